"""CPU end to end: acquire jobs/tiny.yaml with 4 ranks (rank 0 publishes), then check the bundle
byte-exact against the spec, the checksums, lookup at measured and interpolated points, and every
bad-input path of publish and lookup (clear error, non-zero exit, nothing on disk changed)."""
import csv
import fcntl
import glob
import hashlib
import json
import os
import shutil
import tempfile

import h5py
import yaml

from harness_test_lib import HARNESS, SOURCE_DIR, mpirun_cmd, run

HEADER = "component,mode,tokens,activated_experts,local_assignments,time_us\n"


def tree_digest(root):
    out = {}
    for p in sorted(glob.glob(os.path.join(root, "**"), recursive=True)):
        if os.path.isfile(p) and not p.endswith(".lock"):
            out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def expect_error(cmd, needle):
    p = run(cmd, check=False)
    assert p.returncode != 0, f"{cmd} exited 0:\n{p.stdout}"
    assert needle in p.stderr, f"expected '{needle}' in:\n{p.stderr}"


def lookup(variant, *args):
    return run([HARNESS, "lookup", variant, *args])


with tempfile.TemporaryDirectory() as tmp:
    job = os.path.join(SOURCE_DIR, "jobs/tiny.yaml")
    acq = os.path.join(tmp, "acq")
    root = os.path.join(tmp, "bundles")
    p = run(mpirun_cmd(4, "acquire", "--unverified", job, "--out", acq, "--out-root", root, "--quiet"))
    assert "3 component tables and 2 collective tables published" in p.stdout, p.stdout
    assert "  clock: not recorded (the backend has no device clock)\n" in p.stdout, p.stdout
    variant = os.path.join(root, "tiny")
    # The 134-point experts grids of the EP > 1 targets are measured as cells of at most 64 points
    # (committed wave by wave), and every planned point is published from them.
    with h5py.File(os.path.join(acq, "acquisition.h5"), "r") as f:
        sizes = {name: len(cell["points"][()]) for name, cell in f["cells"].items()}
    assert any(name.endswith(".experts.part2") for name in sizes), sorted(sizes)
    assert max(sizes.values()) <= 64, sizes

    # Layout and headers, byte-exact.
    meta = yaml.safe_load(open(os.path.join(variant, "meta.yaml")))
    entries = meta["per_tp"][1]["moe_components"]["entries"]
    assert meta["per_tp"][1]["moe_components"]["schema"] == "moe-components"
    assert len(entries) == 3
    for e in entries:
        t = e["target"]
        rel = f"moe_components/dp{t['dp']}_ep{t['ep']}_rank{t['rank']}_sp{int(t['sp'])}/components.csv"
        assert e["path"] == rel, e["path"]
        path = os.path.join(variant, "tp1", rel)
        data = open(path, "rb").read()
        assert data.decode().startswith(HEADER), "header differs"
        assert hashlib.sha256(data).hexdigest() == e["coverage"]["table_sha256"], "checksum != sha256sum"
        # Fidelity: every component validated against its held-out set; the CPU job accepts
        # failures explicitly (jobs/tiny.yaml), and says so in the entry.
        fid = e["coverage"]["fidelity"]
        assert fid["status"] in ("validated", "accepted-with-failures"), fid
        assert set(fid["components"]) == {"gate_routing", "experts", "wrapper"} | (
            {"finalize_copy"} if t["dp"] > 1 else set()), fid
        for name, c in fid["components"].items():
            h = c["held_out"]
            assert h["count"] > 0 and h["median_abs_relative_error"] <= h["p95_abs_relative_error"] <= h["max_abs_relative_error"], (name, h)
            if fid["status"] == "validated":
                assert h["p95_abs_relative_error"] <= c["tolerance"] and not c["failed_points"], (name, c)
        # Hardware identity: the 4 ranks of one host measured on one device kind; the state of
        # the device (here the host CPU) at the start and the end of the run.
        hw = e["provenance"]["hardware"]
        assert hw["runs"] == 1 and len(hw["devices"]) == 1, hw
        (dev,) = hw["devices"]
        assert dev["device"] == "host CPU" and dev["host"] == os.uname().nodename, dev
        assert "state_before" in dev and "state_after" in dev, dev
        # What was run: the job text, the binary and family table it ran with, per run.
        job_text = open(job).read()
        assert e["provenance"]["job_text"] == job_text
        (r0,) = e["provenance"]["runs"]
        assert r0["job_sha256"] == hashlib.sha256(job_text.encode()).hexdigest(), r0
        assert len(r0["harness_binary_sha256"]) == 64 and len(r0["family_table_sha256"]) == 64, r0
        assert r0["complete"] is True and r0["command"].startswith("harness acquire"), r0
        # The commit the binary was built from, as `harness --version` says it.
        assert r0["harness_revision"] == run([HARNESS, "--version"]).stdout.split()[1], r0
        # Every row's clock, under its own checksum: none on the host backend (no device clock);
        # every row's device: the one device of the one run.
        rc_path = os.path.join(os.path.dirname(path), "row_clocks.csv")
        rc = open(rc_path, "rb").read()
        assert fid["row_clocks_table"] == {"file": "row_clocks.csv", "sha256": hashlib.sha256(rc).hexdigest()}
        rc_rows = list(csv.DictReader(open(rc_path)))
        assert len(rc_rows) == e["coverage"]["rows"] and all(r["sm_clock_mean_mhz"] == "" for r in rc_rows), rc_rows[:3]
        assert all(r["devices"] == "0" for r in rc_rows), rc_rows[:3]
        # Every held-out point with the table's prediction, under its own checksum.
        ho_path = os.path.join(os.path.dirname(path), "held_out.csv")
        ho = open(ho_path, "rb").read()
        assert fid["held_out_table"] == {"file": "held_out.csv", "sha256": hashlib.sha256(ho).hexdigest()}
        ho_rows = list(csv.DictReader(open(ho_path)))
        assert len(ho_rows) == sum(c["held_out"]["count"] + c["held_out"]["unpredicted"]
                                   for c in fid["components"].values()), len(ho_rows)
        for r in ho_rows:
            if r["predicted_us"]:
                assert float(r["measured_us"]) > 0 and float(r["predicted_us"]) > 0, r
        cs = e["coverage"]["conditioning_summary"]
        assert set(cs) == {"checked_points", "failed_points", "max_relative_change", "unsteady_points",
                           "max_run_spread"}, cs
        assert 0 <= cs["unsteady_points"] <= cs["checked_points"] and cs["max_run_spread"] >= 0, cs
        assert (cs["unsteady_points"] > 0) == (cs["max_run_spread"] > 0.03), cs
        assert e["coverage"]["completion"] == 1 and e["coverage"]["completed_rounds"] == 3
        for key in ("geometry", "target", "expert_ownership", "dtypes", "backend", "timing", "modes",
                    "conditioning", "expert_sampling"):
            assert key in e["contract"], key
        assert e["contract"]["backend"] == "cpu_reference" and e["contract"]["timing"] == "host_clock"
        assert e["contract"]["conditioning"]["bank_tolerance"] == 0.03
        rows = list(csv.DictReader(open(path)))
        comps = {r["component"] for r in rows}
        want = {"gate_routing", "experts", "wrapper"} | ({"finalize_copy"} if t["dp"] > 1 else set())
        assert comps == want, comps

    # Lookup at every measured row returns exactly the CSV value: all rows in one --queries file
    # (one answer per line, in order), and a few rows one query per call as well.
    e = next(e for e in entries if e["target"]["dp"] == 2 and e["target"]["rank"] == 0)
    rows = list(csv.DictReader(open(os.path.join(variant, "tp1", e["path"]))))
    queries = os.path.join(tmp, "rows.txt")
    with open(queries, "w") as f:
        for r in rows:
            f.write(f"{r['component']} {r['tokens']}" +
                    (f" {r['activated_experts']} {r['local_assignments']}" if r["component"] == "experts" else "") +
                    "\n")
    answers = lookup(variant, "--tp", "1", "--dp", "2", "--rank", "0", "--queries", queries,
                     "--format", "json").stdout.splitlines()
    assert len(answers) == len(rows), (len(answers), len(rows))
    for r, line in zip(rows, answers):
        got = json.loads(line)
        assert got["component"] == r["component"] and got["tokens"] == int(r["tokens"]), (r, got)
        assert got["exact"] and abs(got["time_us"] - float(r["time_us"])) == 0, (r, got)
    for r in rows[:: max(1, len(rows) // 6)]:
        out = lookup(variant, "--tp", "1", "--dp", "2", "--rank", "0", "--component", r["component"],
                     "--tokens", r["tokens"], "--activated", r["activated_experts"],
                     "--assignments", r["local_assignments"], "--format", "json")
        got = json.loads(out.stdout)
        assert got["exact"] and abs(got["time_us"] - float(r["time_us"])) == 0, (r, got)

    # A midpoint between measured local rows lies between its neighbours.
    gate = sorted((int(r["tokens"]), float(r["time_us"])) for r in rows if r["component"] == "gate_routing")
    (n0, t0), (n1, t1) = next((a, b) for a, b in zip(gate[::-1][1:], gate[::-1]) if b[0] - a[0] >= 2)
    mid = (n0 + n1) // 2
    got = json.loads(lookup(variant, "--tp", "1", "--dp", "2", "--rank", "0", "--component", "gate_routing",
                            "--tokens", str(mid), "--explain", "--format", "json").stdout)
    assert min(t0, t1) <= got["time_us"] <= max(t0, t1) and len(got["vertices"]) == 2, got
    # --explain says how each vertex row was measured (row_clocks.csv): on the host, no clock, and
    # the one device of the one run.
    assert all(v["devices"] == [0] and "sm_clock_mean_mhz" not in v for v in got["vertices"]), got
    text = lookup(variant, "--tp", "1", "--dp", "2", "--rank", "0", "--component", "gate_routing",
                  "--tokens", str(mid), "--explain").stdout
    assert text.count("  on #0\n") == 2 and " MHz" not in text, text
    # --explain alone reads row_clocks.csv, under its checksum: a changed file refuses it, while
    # a plain lookup, which needs none of it, still answers.
    edited = os.path.join(tmp, "edited-clocks")
    shutil.copytree(variant, edited)
    (dp2,) = [e for e in entries if e["target"]["dp"] == 2 and e["target"]["rank"] == 0]
    open(os.path.join(edited, "tp1", os.path.dirname(dp2["path"]), "row_clocks.csv"), "a").write("gate_routing,9,0,0,,0\n")
    query = ["--tp", "1", "--dp", "2", "--rank", "0", "--component", "gate_routing", "--tokens", str(mid)]
    expect_error([HARNESS, "lookup", edited, *query, "--explain"],
                 "row_clocks.csv: checksum mismatch (row_clocks_table.sha256 in meta.yaml)")
    assert abs(float(lookup(edited, *query).stdout) - got["time_us"]) <= 1e-9 * got["time_us"]

    # An interior experts query: <= 4 vertices, nonnegative weights summing to 1 that reproduce the
    # query point, and a value between the vertices' values.
    ex = [r for r in rows if r["component"] == "experts" and r["activated_experts"] != "0"]
    pts = {(int(r["tokens"]), int(r["activated_experts"]), int(r["local_assignments"])) for r in ex}
    found = False
    for (n, a, m) in sorted(pts):
        for (n2, a2, m2) in sorted(pts):
            if n2 > n and a2 == a and (n + n2) % 2 == 0 and (m + m2) % 2 == 0:
                q = ((n + n2) // 2, a, (m + m2) // 2)
                if q in pts:
                    continue
                out = run([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--rank", "0",
                           "--component", "experts", "--tokens", str(q[0]), "--activated", str(q[1]),
                           "--assignments", str(q[2]), "--explain", "--format", "json"], check=False)
                if out.returncode != 0:
                    continue
                got = json.loads(out.stdout)
                vs = got["vertices"]
                assert 1 <= len(vs) <= 4, vs
                assert all(v["weight"] >= 0 for v in vs) and abs(sum(v["weight"] for v in vs) - 1) < 1e-9
                for axis, val in (("tokens", q[0]), ("activated_experts", q[1]), ("local_assignments", q[2])):
                    assert abs(sum(v["weight"] * v[axis] for v in vs) - val) < 1e-6, (axis, vs)
                lo, hi = min(v["time_us"] for v in vs), max(v["time_us"] for v in vs)
                assert lo - 1e-9 <= got["time_us"] <= hi + 1e-9
                found = True
                break
        if found:
            break
    assert found, "no interior experts query found"

    # Each answer says how well its table predicted held-out points: for experts those of the
    # query's routing (balanced at EP1: A = round(E(1 - (1 - k/E)^N)), M = N*k; tiny: E=8, k=2).
    e1 = next(e for e in entries if e["target"]["dp"] == 1)
    fid1 = e1["coverage"]["fidelity"]["components"]
    held = list(csv.DictReader(open(os.path.join(variant, "tp1", os.path.dirname(e1["path"]), "held_out.csv"))))
    seen = set()
    for r in held:
        # A held-out point outside the table's support (a B/2B-failed grid point left out, which a
        # loaded host makes more likely) has no prediction and gets a refusal, tested below.
        if r["component"] != "experts" or not r["predicted_us"]:
            continue
        n, a, m = int(r["tokens"]), int(r["activated_experts"]), int(r["local_assignments"])
        routing = "balanced" if (a, m) == (round(8 * (1 - (1 - 2 / 8) ** n)), 2 * n) else "off_balance"
        if routing in seen:
            continue
        seen.add(routing)
        query = ["--tp", "1", "--dp", "1", "--component", "experts", "--tokens", str(n), "--activated", str(a),
                 "--assignments", str(m)]
        got = json.loads(lookup(variant, *query, "--format", "json").stdout)["held_out"]
        want = fid1["experts"]["held_out"]["by_routing"][routing]
        assert got["routing"] == routing and all(got[k] == want[k] for k in want), (got, want)
        text = lookup(variant, *query, "--explain").stdout
        label = "at balanced routing" if routing == "balanced" else "off balanced routing"
        assert f"the table's held-out error {label}: median " in text and f"over {want['count']} points" in text, text
        # Each experts vertex says how far its run moved (row_clocks.csv's run_spread); the text
        # names the rows that moved more than 3 %.
        vertices = json.loads(lookup(variant, *query, "--explain", "--format", "json").stdout)["vertices"]
        assert vertices and all(v["run_spread"] >= 0 for v in vertices), vertices
        assert text.count("its run moved") == sum(v["run_spread"] > 0.03 for v in vertices), (text, vertices)
    assert seen == {"balanced", "off_balance"}, seen
    got = json.loads(lookup(variant, "--tp", "1", "--dp", "1", "--component", "gate_routing", "--tokens", "3",
                            "--format", "json").stdout)["held_out"]
    want = fid1["gate_routing"]["held_out"]
    assert "routing" not in got and all(got[k] == want[k] for k in got), (got, want)

    # Out of support: refused, never extrapolated.
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--component", "gate_routing",
                  "--tokens", "100000"], "outside the measured support")
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--component", "experts",
                  "--tokens", "100000", "--activated", "1", "--assignments", "100000"],
                 "outside the measured support")
    # Impossible for the geometry (tiny: k = 2), even inside the hull: the violated constraint is named.
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--component", "experts",
                  "--tokens", "24", "--activated", "3", "--assignments", "60"], "M <= N*min(k, A) = 48")
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--component", "experts",
                  "--tokens", "4", "--activated", "0", "--assignments", "3"], "A >= 1 (or A = M = 0)")
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "1", "--component", "finalize_copy",
                  "--tokens", "4"], "not in this deployment's contract")
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--component", "shared",
                  "--tokens", "4"], "unknown component")

    # --queries: a refused query is a line of its own (the same message as a single lookup), the
    # others are answered in order, and the exit status is 3; collectives and components mix.
    q = os.path.join(tmp, "mixed.txt")
    with open(q, "w") as f:
        f.write("# comment line\ngate_routing 4\nexperts 24 3 60   # infeasible\n\nep_dispatch 4\n"
                "ep_dispatch 100000\nexperts 4 0 3\n")
    p = run([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--queries", q], check=False)
    lines = p.stdout.splitlines()
    assert p.returncode == 3 and len(lines) == 5, (p.returncode, p.stdout, p.stderr)
    assert "3 of 5 queries refused" in p.stderr, p.stderr
    single = lambda *a: float(lookup(variant, "--tp", "1", "--dp", "2", *a).stdout)
    assert float(lines[0]) == single("--component", "gate_routing", "--tokens", "4"), lines
    assert float(lines[2]) == single("--collective", "ep_dispatch", "--tokens", "4"), lines
    assert lines[1].startswith("error: ") and "M <= N*min(k, A) = 48" in lines[1], lines
    assert lines[3].startswith("error: ") and "outside the measured range" in lines[3], lines
    assert lines[4].startswith("error: ") and "A >= 1 (or A = M = 0)" in lines[4], lines
    # The same from stdin as JSON lines.
    p = run([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--queries", "-", "--format", "json",
             "--explain"], check=False, input=open(q).read())
    objs = [json.loads(x) for x in p.stdout.splitlines()]
    assert p.returncode == 3 and [("error" in o) for o in objs] == [False, True, False, True, True], p.stdout
    assert objs[0]["component"] == "gate_routing" and objs[0]["vertices"], objs[0]
    assert objs[2]["collective"] == "ep_dispatch" and objs[2]["time_us"] == float(lines[2]), objs[2]
    # A malformed file is refused whole (nothing answered), naming its line; so are bad options.
    with open(q, "w") as f:
        f.write("gate_routing 4\nexperts 4 2\n")
    p = run([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--queries", q], check=False)
    assert p.returncode == 1 and p.stdout == "" and f"{q}:2: expected 'experts N A M'" in p.stderr, p
    with open(q, "w") as f:
        f.write("gate_routing 4\ngate_rooting 4\n")
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "1", "--queries", q],
                 f"{q}:2: 'gate_rooting' is no component (gate_routing, experts, finalize_copy, wrapper), "
                 "so it names a collective, but")
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--queries", q, "--tokens", "3"],
                 "--queries takes the queries from its file")
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--queries", q, "--explain"],
                 "--explain with --queries needs --format json")
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--queries", os.path.join(tmp, "none.txt")],
                 "cannot open the queries file")

    # Collective lookup: exact at a measured row, linear in bytes between rows, refused outside.
    coll_csv = os.path.join(variant, "tp1", "collectives", "dp2_ep2_rank0_sp0", "collectives.csv")
    coll = [r for r in csv.DictReader(open(coll_csv)) if r["collective"] == "ep_dispatch"]
    coll.sort(key=lambda r: int(r["tokens"]))
    assert len(coll) >= 2, coll
    at = json.loads(lookup(variant, "--tp", "1", "--dp", "2", "--collective", "ep_dispatch", "--tokens",
                           coll[1]["tokens"], "--format", "json").stdout)
    assert at["exact"] and at["time_us"] == float(coll[1]["time_us"]) and at["bytes"] == int(coll[1]["bytes"])
    assert at["steady_time_us"] == float(coll[1]["steady_time_us"])
    lo, hi = next((a, b) for a, b in zip(coll, coll[1:]) if int(b["tokens"]) - int(a["tokens"]) >= 2)
    mid = (int(lo["tokens"]) + int(hi["tokens"])) // 2
    got = json.loads(lookup(variant, "--tp", "1", "--dp", "2", "--collective", "ep_dispatch", "--tokens",
                            str(mid), "--format", "json").stdout)
    w = (mid - int(lo["tokens"])) / (int(hi["tokens"]) - int(lo["tokens"]))
    assert not got["exact"] and abs(got["time_us"] - (float(lo["time_us"]) + w * (float(hi["time_us"]) - float(lo["time_us"])))) < 1e-9
    assert got["bytes"] == round(int(lo["bytes"]) + w * (int(hi["bytes"]) - int(lo["bytes"])))
    coll_query = ["--tp", "1", "--dp", "2", "--collective"]
    expect_error([HARNESS, "lookup", variant, *coll_query, "ep_dispatch", "--tokens", str(int(coll[-1]["tokens"]) + 1)],
                 "outside the measured range")
    expect_error([HARNESS, "lookup", variant, *coll_query, "all_to_everyone", "--tokens", "4"],
                 "no collective 'all_to_everyone' in this table (allgather_hidden,")
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "1", "--collective", "ep_dispatch", "--tokens", "4"],
                 "no collective table for TP1 DP1")
    expect_error([HARNESS, "lookup", variant, *coll_query, "ep_dispatch", "--component", "gate_routing", "--tokens", "4"],
                 "name exactly one of --component and --collective")
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--component", "experts", "--tokens", "6"],
                 "experts needs --activated A and --assignments M")
    expect_error([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--component", "gate_routing"],
                 "--tokens N is required")

    # The expected device: a table measured elsewhere is refused, naming both.
    query = ["--tp", "1", "--dp", "2", "--component", "gate_routing", "--tokens", "4"]
    assert lookup(variant, *query, "--expect-device", "host cpu").stdout == lookup(variant, *query).stdout
    assert "not on a GPU: use it to test plumbing" in lookup(variant, *query).stderr
    expect_error([HARNESS, "lookup", variant, *query, "--expect-device", "H200"],
                 "was measured on host CPU (host " + os.uname().nodename + "), not on the expected device 'H200'")
    no_identity = os.path.join(tmp, "no_identity")
    shutil.copytree(variant, no_identity)
    meta_path = os.path.join(no_identity, "meta.yaml")
    text = yaml.safe_load(open(meta_path))
    for entry in text["per_tp"][1]["moe_components"]["entries"]:
        del entry["provenance"]["hardware"]
    yaml.safe_dump(text, open(meta_path, "w"))
    expect_error([HARNESS, "lookup", no_identity, *query, "--expect-device", "host CPU"],
                 "carries no hardware identity")

    # inspect on the acquisition file and on the bundle: coverage, failed points, sanity block.
    r = json.loads(run([HARNESS, "inspect", os.path.join(acq, "acquisition.h5"), "--format", "json"]).stdout)
    assert r["kind"] == "acquisition" and len(r["cells"]) >= 22 and r["dropped_records"] == 0
    assert all(c["rounds_complete"] == c["rounds_planned"] == 3 for c in r["cells"])
    assert r["sanity"]["red_flags"] == [] and r["sanity"]["families"]["completion"]["min"] == 1
    r = json.loads(run([HARNESS, "inspect", variant, "--format", "json"]).stdout)
    assert r["kind"] == "bundle" and len(r["entries"]) == 5 and all(e["checksum_ok"] for e in r["entries"])
    assert r["sanity"]["families"]["time_us"]["finite"] > 0
    text = run([HARNESS, "inspect", variant]).stdout
    assert "sanity:" in text
    assert all("sanity" in e["coverage"] for e in entries)
    # The CPU backend has no device clock: every table says it recorded none, and inspect says so.
    for published in entries:
        for name, c in published["coverage"].get("fidelity", {}).get("components", {}).items():
            assert c["sm_clock_mean_mhz"]["recorded"] == 0 and c["sm_clock_mean_mhz"]["rows"] > 0, (name, c)
            assert "median" not in c["sm_clock_mean_mhz"], c
    assert "mean SM clock of its rows: not recorded (the backend has no device clock)" in text, text

    # Re-publishing the same contract changes nothing; --force is rejected.
    before = tree_digest(root)
    h5 = os.path.join(acq, "acquisition.h5")
    p = run([HARNESS, "publish", h5, "--out-root", root, "--accept-failures"])
    assert "0 component tables and 0 collective tables published, 5 already published" in p.stdout, p.stdout
    expect_error([HARNESS, "publish", h5, "--out-root", root, "--force"], "another --out-root")
    assert tree_digest(root) == before

    # The fidelity gate: host-clock tables miss the 2% tolerance, so publishing without the
    # acceptance flag publishes nothing and names the table and the reason; with it, every entry
    # records accepted-with-failures and the held-out numbers.
    gated = os.path.join(tmp, "gated")
    status = {e["coverage"]["fidelity"]["status"] for e in entries}
    if status != {"validated"}:
        p = run([HARNESS, "publish", h5, "--out-root", gated], check=False)
        assert p.returncode != 0 and "exceeds the tolerance" in p.stderr + p.stdout or \
            "failed the weight-bank control" in p.stderr, p.stderr
        assert not os.path.exists(os.path.join(gated, "tiny", "meta.yaml")), "gate published something"
        run([HARNESS, "publish", h5, "--out-root", gated, "--accept-failures"])
        doc = yaml.safe_load(open(os.path.join(gated, "tiny", "meta.yaml")))
        assert "accepted-with-failures" in {
            e["coverage"]["fidelity"]["status"] for e in doc["per_tp"][1]["moe_components"]["entries"]}
    assert "held-out" in run([HARNESS, "inspect", h5]).stdout

    # A second writer fails clearly while the first holds writer.lock.
    lock_path = os.path.join(variant, "tp1", "moe_components", "dp1_ep1_rank0_sp0", "writer.lock")
    other = os.path.join(tmp, "other-root")
    shutil.copytree(root, other)
    with open(os.path.join(other, "tiny", "tp1", "moe_components", "dp1_ep1_rank0_sp0", "writer.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        expect_error([HARNESS, "publish", h5, "--out-root", other, "--accept-failures"], "another writer holds")
    # An acquisition directory is single-writer too.
    with open(os.path.join(acq, "writer.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        expect_error(mpirun_cmd(2, "acquire", "--unverified", job, "--out", acq), "another acquisition holds")

    # A changed semantic condition is a new contract: refused, nothing overwritten.
    acq2 = os.path.join(tmp, "acq2")
    run(mpirun_cmd(2, "acquire", "--unverified", job, "--out", acq2, "--iterations", "4", "--no-publish", "--quiet"))
    expect_error([HARNESS, "publish", os.path.join(acq2, "acquisition.h5"), "--out-root", root, "--accept-failures"],
                 "different contract (differs in: conditioning.iterations: 5 -> 4")
    assert tree_digest(root) == before

    def edit_entry(v, change):
        """Rewrites meta.yaml with `change` applied to the TP1 DP2 rank-0 component entry."""
        doc = yaml.safe_load(open(os.path.join(v, "meta.yaml")))
        for en in doc["per_tp"][1]["moe_components"]["entries"]:
            if en["target"]["dp"] == 2 and en["target"]["rank"] == 0:
                change(en)
        yaml.safe_dump(doc, open(os.path.join(v, "meta.yaml"), "w"))

    # A variant that would leave the out-root is refused before anything is written.
    for bad in ("../escape", "..", "a/b"):
        expect_error([HARNESS, "publish", h5, "--out-root", root, "--variant", bad], "--variant")
    assert not os.path.exists(os.path.join(tmp, "escape")) and tree_digest(root) == before

    # Tampered CSV, truncated meta.yaml, wrong schema, relabelled target, escaping path: clear
    # errors, nothing changed on disk.
    for name, mutate, needle in (
        ("tampered", lambda v: open(os.path.join(v, "tp1", e["path"]), "a").write("experts,eager,1,1,1,9.0\n"),
         "checksum mismatch"),
        ("truncated", lambda v: open(os.path.join(v, "meta.yaml"), "r+").truncate(300), "corrupt meta.yaml"),
        ("schema", lambda v: open(os.path.join(v, "meta.yaml"), "w").write(
            open(os.path.join(variant, "meta.yaml")).read().replace('"moe-components"', '"moe-other"')),
         "schema"),
        # The entry's target is under its contract's hash: relabelling DP2 as DP4 is refused.
        ("target", lambda v: edit_entry(v, lambda en: en["target"].update(dp=4, ep=4)),
         "does not match its contract"),
        # A path that leaves the bundle is refused, even when the file it names exists.
        ("path", lambda v: (open(os.path.join(v, "..", "outside.csv"), "w").write("x"),
                            edit_entry(v, lambda en: en.update(path="../../outside.csv"))),
         "has path '../../outside.csv'"),
    ):
        copy = os.path.join(tmp, name)
        shutil.copytree(root, copy)
        mutate(os.path.join(copy, "tiny"))
        snap = tree_digest(copy)
        expect_error([HARNESS, "lookup", os.path.join(copy, "tiny"), "--tp", "1", "--dp", "2", "--rank", "0",
                      "--component", "gate_routing", "--tokens", "4"], needle)
        if name == "tampered":  # inspect reports it as a red flag and exits non-zero
            p = run([HARNESS, "inspect", os.path.join(copy, "tiny")], check=False)
            assert p.returncode == 4 and "checksum mismatch" in p.stdout, (p.returncode, p.stdout)
        if name in ("truncated", "schema", "target", "path"):
            expect_error([HARNESS, "publish", h5, "--out-root", copy, "--accept-failures"], "corrupt meta.yaml")
        assert tree_digest(copy) == snap, f"{name}: files changed by a failed command"

    # Held-out errors with each answer: a bundle without a fidelity block (published before it)
    # answers with none; a malformed block is refused, naming it.
    for name, change in (("no_fidelity", lambda en: en["coverage"].pop("fidelity")),
                         ("bad_fidelity", lambda en: en["coverage"]["fidelity"]["components"]["gate_routing"]
                          ["held_out"].pop("count"))):
        copy = os.path.join(tmp, name)
        shutil.copytree(root, copy)
        edit_entry(os.path.join(copy, "tiny"), change)
        query = [HARNESS, "lookup", os.path.join(copy, "tiny"), "--tp", "1", "--dp", "2", "--rank", "0",
                 "--component", "gate_routing", "--tokens", "4"]
        if name == "no_fidelity":
            got = json.loads(run(query + ["--format", "json"]).stdout)
            assert got["held_out"] is None and got["time_us"] > 0, got
            assert "held-out error" not in run(query + ["--explain"]).stdout
        else:
            expect_error(query + ["--format", "json"], "coverage.fidelity of gate_routing is malformed")
print("ok")
