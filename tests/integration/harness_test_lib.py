"""Helpers for the integration tests: run the real harness under real mpiexec, read HDF5 with h5py
(independently of the harness' own reader)."""
import hashlib
import json
import os
import subprocess
import sys

import h5py

HARNESS = os.environ["HARNESS_BIN"]
SOURCE_DIR = os.environ["HARNESS_SOURCE_DIR"]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1")


def mpirun_cmd(np, *args):
    return [MPIEXEC, "-np", str(np), "--oversubscribe", HARNESS, *args]


def run(cmd, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, env=MPI_ENV, **kw)
    if check and p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(cmd)}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def file_sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def check_complete(path, expect_rounds):
    """Every planned point x round has samples, medians and checks; returns {cell: {round: samples}}."""
    out = {}
    with h5py.File(path, "r") as f:
        assert f.attrs["schema_version"] == 1
        json.loads(f.attrs["contract"].decode() if isinstance(f.attrs["contract"], bytes) else f.attrs["contract"])
        cells = f["cells"]
        assert len(cells) > 0, "no cells"
        for name, cell in cells.items():
            points = cell["points"][()]
            done = cell["rounds_done"][()]
            assert len(done) == expect_rounds, (name, done)
            assert all(done == 1), f"{name}: rounds_done {done}"
            desc = json.loads(cell.attrs["cell"])
            out[name] = {}
            for r in range(expect_rounds):
                g = cell[f"round_{r}"]
                med = g["medians"][()]
                assert sorted(med["point"].tolist()) == list(range(len(points))), f"{name} round {r}: medians"
                smp = g["samples"][()]
                assert set(smp["point"].tolist()) == set(range(len(points))), f"{name} round {r}: samples"
                assert (smp["round"] == r).all()
                assert (smp["value_us"] > 0).all()
                chk = g["checks"][()]
                assert (chk["pass"] == 1).all()
                if desc["component"] == "experts":
                    assert set(smp["arm"].tolist()) == {1, 2}, f"{name}: both bank arms"
                out[name][r] = smp
    return out
