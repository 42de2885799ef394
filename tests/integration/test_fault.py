"""Fault test: SIGKILL one rank of a running acquisition, re-run the same command, and check that
the result is complete with no duplicated and no missing rounds, and that rounds completed before
the kill were not measured again."""
import os
import signal
import subprocess
import tempfile

import h5py

from harness_test_lib import MPI_ENV, SOURCE_DIR, check_complete, mpirun_cmd, run

job = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")
ROUNDS = "30"


def children(pid):
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return []
    return [int(x) for x in out.split()]


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "acq")
    h5 = os.path.join(out, "acquisition.h5")
    root = os.path.join(tmp, "bundles")
    proc = subprocess.Popen(mpirun_cmd(3, "acquire", "--unverified", job, "--out", out, "--rounds", ROUNDS, "--out-root", root),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=MPI_ENV)
    # Wait until at least one round is committed, then kill a rank mid-run.
    for line in proc.stderr:
        if "committed round 0" in line:
            break
    ranks = [c for c in children(proc.pid)]
    assert ranks, "no rank processes found under mpiexec"
    os.kill(ranks[-1], signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode != 0, "the job survived a killed rank"

    before = {}
    with h5py.File(h5, "r") as f:
        for name, cell in f["cells"].items():
            done = cell["rounds_done"][()]
            before[name] = {r: cell[f"round_{r}"]["samples"][()] for r in range(len(done)) if done[r]}
    complete_before = sum(len(v) for v in before.values())
    assert complete_before >= 11, f"expected round 0 complete for all 11 cells, got {complete_before}"
    assert complete_before < 11 * int(ROUNDS), "the kill landed after the run finished"

    p = run(mpirun_cmd(3, "acquire", "--unverified", job, "--out", out, "--rounds", ROUNDS, "--out-root", root))
    assert "3 component tables and 2 collective tables published" in p.stdout, p.stdout
    assert f"resumed {complete_before}" in p.stdout, p.stdout
    after = check_complete(h5, int(ROUNDS))
    for name, rounds in before.items():
        for r, samples in rounds.items():
            assert (after[name][r] == samples).all(), f"{name} round {r} was measured again"
print(f"ok: {complete_before} cell rounds survived the kill, the rest resumed")
