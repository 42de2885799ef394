"""CPU binding under real launchers: `mpirun --bind-to core|socket|none` with 2 and 4 ranks. The
harness builds each rank's CPUs from the CPUs the job may use (its cgroup cpuset), not from the
mask mpirun handed down: the ranks get disjoint shares covering the pool (shared CPUs only when
there are more ranks than CPUs), recorded in the HDF5 provenance and in the bundle.
--keep-launcher-binding keeps mpirun's mask instead."""
import json
import os
import tempfile

import h5py
import yaml

from harness_test_lib import HARNESS, MPIEXEC, SOURCE_DIR, run

JOB = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")
POOL = sorted(os.sched_getaffinity(0))  # ctest does not bind: every CPU this job may use


def bindings(h5):
    with h5py.File(h5, "r") as f:
        ranks = json.loads(f["provenance"].attrs["run_0"])
    out = []
    for r in sorted(ranks, key=lambda r: r["rank"]):
        cpus, label = r["cpu_binding"].split(" ", 1)
        out.append(([int(c) for c in cpus.split(",")], label))
    return out


def acquire(tmp, name, np_, bind, *extra, publish=False):
    out = os.path.join(tmp, name)
    policy = f"{bind}:overload-allowed" if np_ > len(POOL) and bind != "none" else bind
    cmd = [MPIEXEC, "-np", str(np_), "--map-by", ":OVERSUBSCRIBE", "--bind-to", policy, HARNESS,
           "acquire", JOB, "--unverified", "--rounds", "1", "--out", os.path.join(out, "acq"), "--out-root", out,
           "--quiet", *extra] + ([] if publish else ["--no-publish"])
    run(cmd)
    return out


with tempfile.TemporaryDirectory() as tmp:
    for bind in ("core", "socket", "none"):
        for np_ in (2, 4):
            out = acquire(tmp, f"{bind}{np_}", np_, bind, publish=(bind, np_) == ("core", 2))
            got = bindings(os.path.join(out, "acq", "acquisition.h5"))
            assert len(got) == np_, got
            used = sorted(c for cpus, _ in got for c in cpus)
            assert all("from cgroup cpuset" in label or "from online CPUs" in label for _, label in got), got
            if np_ <= len(POOL):
                # Disjoint equal shares, none outside the pool, covering it up to the remainder.
                assert len(set(used)) == len(used), f"{bind} {np_}: overlapping shares {got}"
                assert set(used) <= set(POOL) and len(used) == np_ * (len(POOL) // np_), (got, POOL)
                assert all("disjoint" in label for _, label in got), got
            else:
                assert set(used) == set(POOL), f"{bind} {np_}: {got} does not cover {POOL}"
                assert all("shared" in label for _, label in got), got
            if (bind, np_) == ("core", 2):
                meta = yaml.safe_load(open(os.path.join(out, "micro", "meta.yaml")))
                for entry in meta["per_tp"][1]["moe_components"]["entries"]:
                    (device,) = entry["provenance"]["hardware"]["devices"]
                    assert sorted(device["cpu_bindings"]) == sorted(
                        ",".join(map(str, cpus)) + " " + label for cpus, label in got), device
    # Keeping the launcher's binding: --bind-to core gives each rank its own core, kept as is.
    out = acquire(tmp, "kept", 2, "core", "--keep-launcher-binding")
    got = bindings(os.path.join(out, "acq", "acquisition.h5"))
    assert all(len(cpus) == 1 and "kept, from launcher binding" in label for cpus, label in got), got
    if len(POOL) >= 2:
        assert got[0][0] != got[1][0], got
print(f"ok: bindings over a pool of {len(POOL)} CPUs under --bind-to core/socket/none with 2 and 4 ranks")
