"""`harness acquire` with N real MPI ranks on the CPU backend: every planned point x round lands
in the shared HDF5 file. Usage: test_acquire.py NRANKS"""
import json
import os
import re
import sys
import tempfile

import h5py

from harness_test_lib import SOURCE_DIR, check_complete, mpirun_cmd, run

nranks = int(sys.argv[1])
job = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "acq")
    root = os.path.join(tmp, "bundles")
    p = run(mpirun_cmd(nranks, "acquire", "--unverified", job, "--out", out, "--out-root", root))
    m = re.search(r"(\d+) cells \((\d+) complete\)", p.stdout)
    assert m and m.group(1) == m.group(2), p.stdout
    h5 = os.path.join(out, "acquisition.h5")
    cells = check_complete(h5, 2)
    assert len(cells) == int(m.group(1)), cells.keys()
    # The 11 planned grids, each with its held-out set; refinement stages only add to them.
    with h5py.File(h5, "r") as f:
        roles = [json.loads(f["cells"][c].attrs["cell"]) for c in f["cells"]]
        point_rounds = 2 * sum(len(f["cells"][c]["points"][()]) for c in f["cells"])
    # Every point-round was measured by this run; host clocks report no held-down clocks.
    assert f"settle: extended at 0 of {point_rounds} point-rounds measured now" in p.stdout, p.stdout
    planned = [r for r in roles if r["stage"] == 0]
    assert sum(r["role"] == "grid" for r in planned) == 11, planned
    assert sum(r["role"] == "held_out" for r in planned) == 11, planned
    # DP2 collective tables need two ranks.
    collectives = 2 if nranks >= 2 else 0
    assert f"3 component tables and {collectives} collective tables published" in p.stdout, p.stdout
    # Re-running the same command measures nothing again and publishes nothing new.
    p = run(mpirun_cmd(nranks, "acquire", "--unverified", job, "--out", out, "--out-root", root))
    assert f"cell rounds measured now 0, resumed {2 * len(cells)}" in p.stdout, p.stdout
    assert "settle: extended at 0 of 0 point-rounds measured now" in p.stdout, p.stdout
    assert "already published (unchanged)" in p.stdout and f", {3 + collectives} already" in p.stdout, p.stdout
print(f"ok: {nranks} ranks")
