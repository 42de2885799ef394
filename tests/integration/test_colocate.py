"""The co-location gate on the CPU backend with 4 real MPI ranks (4-way regime): the verdict and
all figures are written to colocation.h5 and <variant>/colocation.yaml, labelled as a CPU run;
acquire then honours the verdict (regime 2 runs in two slots; a stopped gate refuses)."""
import json
import os
import tempfile

import h5py
import yaml

from harness_test_lib import SOURCE_DIR, mpirun_cmd, run

job = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "acq")
    root = os.path.join(tmp, "bundles")
    p = run(mpirun_cmd(4, "colocate", job, "--out", out, "--out-root", root, "--interval", "0.5",
                       "--calibration", "0.2", "--window", "10"))
    assert "CPU RUN" in p.stdout, p.stdout
    ymlpath = os.path.join(root, "micro", "colocation.yaml")
    v = yaml.safe_load(open(ymlpath))
    assert v["cpu_run"] is True and v["backend"] == "cpu_reference"
    assert len(v["family_table"]["sha256"]) == 64
    node = v["nodes"][0]
    assert node["ranks_on_node"] == 4 and node["largest_available_regime"] == 4
    assert "largest available regime" in node["note"]
    tried = node["regimes_tried"]
    assert [t["regime"] for t in tried] == [4]
    t = tried[0]
    for key in ("throughput_ratio", "f3", "solo", "colocated"):
        assert key in t, key
    for phase in ("solo", "colocated"):
        fig = t[phase]
        assert fig["throughput_per_s"] > 0 and fig["interval_forwards"] >= 10
        assert abs(sum(fig["shares"].values()) - 1) < 1e-9
        for env in ("environment_before", "environment_after"):
            assert "load_average" in fig[env] and "device" in fig[env]
    assert len(t["f3"]) >= 1 and all("delta" in f for f in t["f3"])
    assert (v["allowed_regime"] is None) == (not v["passed"])
    with h5py.File(os.path.join(out, "colocation.h5"), "r") as f:
        stored = json.loads(f.attrs["verdict"])
        assert abs(stored["nodes"][0]["regimes_tried"][0]["throughput_ratio"] - t["throughput_ratio"]) < 1e-12
        assert f.attrs["family_table_sha256"].decode() == v["family_table"]["sha256"]

    # acquire follows the verdict: regime 2 on a 4-rank node measures in two slots.
    v["allowed_regime"] = 2
    v["passed"] = True
    open(ymlpath, "w").write(yaml.safe_dump(v))
    # (--no-publish: the subject is placement; on 4 oversubscribed CPU ranks the host-clock B/2B
    # control can fail every expert point of a small cell, and the publisher then rightly refuses.)
    p = run(mpirun_cmd(4, "acquire", job, "--out", os.path.join(tmp, "acq2"), "--out-root", root, "--quiet",
                       "--no-publish"))
    assert "placement: regime 2 from" in p.stdout, p.stdout
    # A stopped gate refuses to measure several ranks per node.
    v["allowed_regime"] = None
    v["passed"] = False
    open(ymlpath, "w").write(yaml.safe_dump(v))
    p = run(mpirun_cmd(2, "acquire", job, "--out", os.path.join(tmp, "acq3"), "--out-root", root), check=False)
    assert p.returncode != 0 and "co-location gate stopped" in p.stderr, p.stderr
print("ok")
