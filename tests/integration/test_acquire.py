"""`harness acquire` with N real MPI ranks on the CPU backend: every planned point x round lands
in the shared HDF5 file. Usage: test_acquire.py NRANKS"""
import os
import sys
import tempfile

from harness_test_lib import SOURCE_DIR, check_complete, mpirun_cmd, run

nranks = int(sys.argv[1])
job = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "acq")
    root = os.path.join(tmp, "bundles")
    p = run(mpirun_cmd(nranks, "acquire", job, "--out", out, "--out-root", root))
    assert "11 cells (11 complete)" in p.stdout, p.stdout
    h5 = os.path.join(out, "acquisition.h5")
    cells = check_complete(h5, 2)
    assert len(cells) == 11, cells.keys()
    # DP2 collective tables need two ranks.
    collectives = 2 if nranks >= 2 else 0
    assert f"3 component tables and {collectives} collective tables published" in p.stdout, p.stdout
    # Re-running the same command measures nothing again and publishes nothing new.
    p = run(mpirun_cmd(nranks, "acquire", job, "--out", out, "--out-root", root))
    assert "cell rounds measured now 0, resumed 22" in p.stdout, p.stdout
    assert f"already published (unchanged)" in p.stdout and f", {3 + collectives} already" in p.stdout, p.stdout
print(f"ok: {nranks} ranks")
