"""The co-location gate on the CPU backend with 4 real MPI ranks (4-way regime), quick profile: the
verdict with its per-interval figures, spread and contamination checks is written to
colocation.h5 and <variant>/colocation.yaml, labelled as a CPU run, with the documented exit
status. acquire then needs it: several ranks per node refuse without a verdict, with one of another
backend, node or age, or a stopped one; --unverified measures and marks every entry; a passing
verdict's regime is used (regime 2 runs in two slots) and recorded in the file and the entries."""
import json
import os
import shutil
import tempfile

import h5py
import yaml

from harness_test_lib import SOURCE_DIR, mpirun_cmd, run

job = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")


def expect_refusal(tmp, root, name, needle):
    out = os.path.join(tmp, name)
    p = run(mpirun_cmd(2, "acquire", job, "--out", out, "--out-root", root, "--no-publish"), check=False)
    assert p.returncode != 0 and needle in p.stderr, (name, p.stderr)
    assert "harness colocate" in p.stderr and "--unverified" in p.stderr, p.stderr
    assert p.stderr.count("error:") == 1, p.stderr
    assert not os.path.exists(os.path.join(out, "acquisition.h5")), "a refused run writes nothing"


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "acq")
    root = os.path.join(tmp, "bundles")
    ymlpath = os.path.join(root, "micro", "colocation.yaml")

    # No verdict: several ranks per node refuse; one rank per node needs none.
    expect_refusal(tmp, root, "none", "there is no co-location verdict")

    p = run(mpirun_cmd(4, "colocate", job, "--out", out, "--out-root", root, "--quick"), check=False)
    v = yaml.safe_load(open(ymlpath))
    assert p.returncode == (0 if v["passed"] else 3), (p.returncode, v["passed"], p.stdout, p.stderr)
    assert "CPU RUN" in p.stdout, p.stdout
    assert v["cpu_run"] is True and v["backend"] == "cpu_reference"
    assert v["profile"] == {"name": "quick", "warmup_s": 0.5, "measure_s": 2.0, "intervals": 4,
                            "window_forwards": 10}, v["profile"]
    assert len(v["family_table"]["sha256"]) == 64
    node = v["nodes"][0]
    assert node["ranks_on_node"] == 4 and node["largest_available_regime"] == 4
    assert node["gpu_uuids"] == [] and node["host"]
    assert "largest available regime" in node["note"]
    tried = node["regimes_tried"]
    assert [t["regime"] for t in tried] == [4]
    t = tried[0]
    for key in ("throughput_ratio", "f3", "solo", "colocated"):
        assert key in t, key
    for phase, busy in (("solo", 1), ("colocated", 4)):
        fig = t[phase]
        assert fig["busy_ranks"] == busy
        assert len(fig["intervals"]) == 4 and all(i["forwards"] >= 10 for i in fig["intervals"])
        ts = sorted(i["throughput_per_s"] for i in fig["intervals"])
        assert abs(fig["throughput_per_s"] - (ts[1] + ts[2]) / 2) < 1e-9 * ts[2], "median of 4 intervals"
        assert fig["throughput_min_per_s"] == ts[0] and fig["throughput_max_per_s"] == ts[3]
        assert abs(fig["throughput_spread"] - (ts[3] - ts[0]) / fig["throughput_per_s"]) < 1e-9
        assert abs(sum(fig["shares"].values()) - 1) < 0.05, fig["shares"]
        assert len(fig["environment"]) == 5, "one sample before and one after each interval"
        for env in fig["environment"]:
            assert "load_average" in env and env["online_cpus"] >= 1 and "device" in env
        assert isinstance(fig["contamination"], list)
    if t["colocated"]["contamination"]:
        assert "contaminated" in t["reason"], t
    assert len(t["f3"]) >= 1 and all("delta" in f for f in t["f3"])
    assert (v["allowed_regime"] is None) == (not v["passed"])
    with h5py.File(os.path.join(out, "colocation.h5"), "r") as f:
        stored = json.loads(f.attrs["verdict"])
        assert abs(stored["nodes"][0]["regimes_tried"][0]["throughput_ratio"] - t["throughput_ratio"]) < 1e-12
        assert f.attrs["family_table_sha256"].decode() == v["family_table"]["sha256"]

    # The verdict must be of this backend, this node, and young enough.
    def write(edit):
        w = json.loads(json.dumps(v))
        w["allowed_regime"] = 2
        w["passed"] = True
        w["nodes"][0]["allowed_regime"] = 2
        edit(w)
        open(ymlpath, "w").write(yaml.safe_dump(w))

    write(lambda w: w.update(backend="native"))
    expect_refusal(tmp, root, "other-backend", "the verdict is for backend native, not cpu_reference")
    write(lambda w: w["nodes"][0].update(host="some-other-node"))
    expect_refusal(tmp, root, "other-node", "holds no entry for host")
    write(lambda w: w["nodes"][0].update(gpu_uuids=["GPU-00000000-0000-0000-0000-000000000000"]))
    expect_refusal(tmp, root, "other-gpus", "UUIDs differ")
    write(lambda w: w.update(created_utc="2026-01-01T00:00:00Z"))
    expect_refusal(tmp, root, "expired", "older than the maximum of 168 hours")
    write(lambda w: (w.update(allowed_regime=None, passed=False), w["nodes"][0].update(allowed_regime=None)))
    expect_refusal(tmp, root, "stopped", "co-location gate stopped")

    # acquire follows a passing verdict: regime 2 on a 4-rank node measures in two slots, and the
    # file and every entry record it. (--accept-failures: the subject is placement; on 4
    # oversubscribed CPU ranks the host-clock B/2B control can fail points of a small cell.)
    write(lambda w: None)
    p = run(mpirun_cmd(4, "acquire", job, "--out", os.path.join(tmp, "acq2"), "--out-root", root, "--quiet",
                       "--accept-failures"))
    assert "placement: regime 2, verified from" in p.stdout, p.stdout
    with h5py.File(os.path.join(tmp, "acq2", "acquisition.h5"), "r") as f:
        prov = json.loads(f["provenance"].attrs["run_0"])
        assert all(r["placement"]["regime"] == 2 and r["placement"]["gate"] == "verified" for r in prov), prov
    meta = yaml.safe_load(open(os.path.join(root, "micro", "meta.yaml")))
    entries = [e for tp in meta["per_tp"].values() for sec in ("moe_components", "collectives")
               for e in tp.get(sec, {}).get("entries", [])]
    assert entries and all(e["contract"]["placement"]["verified"] is True and
                           e["contract"]["placement"]["regimes"] == [2] for e in entries), entries

    # --unverified measures with every rank and marks every entry, in the bundle and the report.
    root2 = os.path.join(tmp, "unverified")
    os.makedirs(os.path.join(root2, "micro"))
    shutil.copy(ymlpath, os.path.join(root2, "micro", "colocation.yaml"))
    p = run(mpirun_cmd(2, "acquire", job, "--out", os.path.join(tmp, "acq3"), "--out-root", root2, "--quiet",
                       "--unverified", "--accept-failures"))
    assert "placement: regime 2, unverified (--unverified)" in p.stdout, p.stdout
    meta = yaml.safe_load(open(os.path.join(root2, "micro", "meta.yaml")))
    entries = [e for tp in meta["per_tp"].values() for sec in ("moe_components", "collectives")
               for e in tp.get(sec, {}).get("entries", [])]
    assert entries and all(e["contract"]["placement"]["verified"] is False and
                           e["contract"]["placement"]["gates"] == ["unverified (--unverified)"]
                           for e in entries), entries
    from harness_test_lib import HARNESS
    p = run([HARNESS, "inspect", os.path.join(root2, "micro")])
    assert p.stdout.count(": UNVERIFIED, regimes [2]") == len(entries), p.stdout
    html = os.path.join(tmp, "r.html")
    run([HARNESS, "report", os.path.join(root2, "micro"), "--out", html])
    assert "UNVERIFIED PLACEMENT" in open(html).read()
print("ok")
