"""Kills at exact HDF5 calls (hdf5_kill_shim.c, preloaded): one rank, SIGKILL right after it
creates the file or a group, or right before a flush or a dataset write -- the boundaries of file
creation and of a round's commit that a kill at a random instant rarely hits. Each case re-runs
the same command without the shim and requires a clean resume: the run completes and publishes,
every planned round is in the file, and no round completed before the kill was measured again."""
import os
import tempfile

from harness_test_lib import complete_rounds, require_clean_resume, run, shim_kill_acquire

SHIM = os.environ["HDF5_KILL_SHIM"]
ROUNDS = 4
CASES = [("H5Fcreate", 1, 0), ("H5Fcreate", 1, 1), ("H5Gcreate2", 1, 1), ("H5Gcreate2", 3, 0),
         ("H5Gcreate2", 6, 1), ("H5Fflush", 1, 0), ("H5Fflush", 2, 1), ("H5Fflush", 4, 0),
         ("H5Fflush", 7, 1), ("H5Dwrite", 1, 1), ("H5Dwrite", 4, 0), ("H5Dwrite", 9, 1)]

with tempfile.TemporaryDirectory() as tmp:
    for i, (call, at, rank) in enumerate(CASES):
        d = os.path.join(tmp, f"case{i}")
        h5 = os.path.join(d, "acq", "acquisition.h5")
        killed = run(shim_kill_acquire(d, ROUNDS, "-x", f"LD_PRELOAD={SHIM}", "-x", f"KILL_CALL={call}", "-x",
                                       f"KILL_AT={at}", "-x", f"KILL_RANK={rank}"), check=False)
        assert killed.returncode != 0, f"{call} #{at} on rank {rank} was never reached: the case tests nothing"
        before = complete_rounds(h5)
        require_clean_resume(d, ROUNDS, before, f"{call} #{at} rank {rank}")
        print(f"ok: killed rank {rank} at {call} #{at} ({len(before)} complete rounds kept), resumed cleanly")
