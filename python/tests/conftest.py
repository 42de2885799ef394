"""A bundle to read: the micro job acquired on 2 CPU ranks by the harness under test
(HARNESS_BIN), once per session."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.environ.get("HARNESS_BIN", os.path.join(ROOT, "build-cpu", "harness", "harness"))
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")


def harness(*args, check=True):
    return subprocess.run([HARNESS, *args], capture_output=True, text=True, env=MPI_ENV, check=check)


@pytest.fixture(scope="session")
def variant(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bundle")
    subprocess.run(["mpiexec", "-np", "2", "--oversubscribe", HARNESS, "acquire", "--unverified",
                    os.path.join(ROOT, "tests", "data", "micro.yaml"), "--out", str(tmp / "acq"),
                    "--out-root", str(tmp), "--quiet"], check=True, capture_output=True, env=MPI_ENV)
    return str(tmp / "micro")


@pytest.fixture(scope="session")
def staircase(tmp_path_factory):
    """A bundle of the staircase_model test double, whose backend declares launch waves, unrefined
    (no grid points added, published with its misses) so that answers span its steps."""
    tmp = tmp_path_factory.mktemp("staircase")
    job = tmp / "unrefined.yaml"
    job.write_text(open(os.path.join(ROOT, "tests", "data", "staircase.yaml")).read()
                   .replace("max_added_points: 600", "max_added_points: 0"))
    subprocess.run(["mpiexec", "-np", "1", HARNESS, "acquire", str(job), "--out-root", str(tmp), "--accept-failures",
                    "--quiet"], check=True, capture_output=True, env=MPI_ENV)
    return str(tmp / "staircase")


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
