"""Kills at exact HDF5 calls (hdf5_kill_shim.c, preloaded): one rank, SIGKILL right after it
creates the file or a group, or right before a flush or a dataset write -- the boundaries of file
creation and of a round's commit that a kill at a random instant rarely hits. Each case re-runs
the same command without the shim and requires a clean resume: the run completes and publishes,
every planned round is in the file, and no round completed before the kill was measured again."""
import os
import tempfile

from harness_test_lib import HARNESS, MPIEXEC, SOURCE_DIR, check_complete, complete_rounds, run

JOB = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")
SHIM = os.environ["HDF5_KILL_SHIM"]
ROUNDS = 4
CASES = [("H5Fcreate", 1, 0), ("H5Fcreate", 1, 1), ("H5Gcreate2", 1, 1), ("H5Gcreate2", 3, 0),
         ("H5Gcreate2", 6, 1), ("H5Fflush", 1, 0), ("H5Fflush", 2, 1), ("H5Fflush", 4, 0),
         ("H5Fflush", 7, 1), ("H5Dwrite", 1, 1), ("H5Dwrite", 4, 0), ("H5Dwrite", 9, 1)]


def acquire(d, *mpiexec_options):
    return [MPIEXEC, "-np", "2", "--oversubscribe", *mpiexec_options, HARNESS, "acquire", "--unverified", JOB,
            "--rounds", str(ROUNDS), "--out", os.path.join(d, "acq"), "--out-root", os.path.join(d, "bundles"),
            "--quiet"]


with tempfile.TemporaryDirectory() as tmp:
    for i, (call, at, rank) in enumerate(CASES):
        d = os.path.join(tmp, f"case{i}")
        h5 = os.path.join(d, "acq", "acquisition.h5")
        killed = run(acquire(d, "-x", f"LD_PRELOAD={SHIM}", "-x", f"KILL_CALL={call}", "-x", f"KILL_AT={at}",
                             "-x", f"KILL_RANK={rank}"), check=False)
        assert killed.returncode != 0, f"{call} #{at} on rank {rank} was never reached: the case tests nothing"
        before = complete_rounds(h5)
        resumed = run(acquire(d), check=False)
        assert resumed.returncode == 0, f"{call} #{at} rank {rank}: resume failed:\n{resumed.stderr[-2000:]}"
        after = check_complete(h5, ROUNDS)
        for (name, r), samples in before.items():
            assert (after[name][r] == samples).all(), f"{call} #{at}: {name} round {r} measured again"
        assert os.path.exists(os.path.join(d, "bundles", "micro", "meta.yaml")), f"{call} #{at}: not published"
        print(f"ok: killed rank {rank} at {call} #{at} ({len(before)} complete rounds kept), resumed cleanly")
