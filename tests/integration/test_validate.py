"""harness validate on the staircase_model test double: the fresh points it measures must be the
model's values (restated here), its predictions must be what `harness lookup` answers, its
statistics must follow from its points, the same seed must draw the same points, and its exit
status must follow the tolerance. Then every error path: one clear message, a non-zero exit."""
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile

import yaml

from harness_test_lib import (HARNESS, SOURCE_DIR, mpirun_cmd, quantile, run, staircase_sm_clock_mhz, staircase_time_us,
                              staircase_waves)

sys.path.insert(0, os.path.join(SOURCE_DIR, "python"))
import harness_reader  # noqa: E402  (answers like the library: test_python_reader.py)


def expect_error(args, needle, code=None):
    p = run([HARNESS, "validate", *args], check=False)
    assert p.returncode not in (0, 3) if code is None else p.returncode == code, (p.returncode, p.stderr)
    assert needle in p.stderr, f"expected '{needle}' in:\n{p.stderr}"


def write_row_clocks(variant, text):
    """Writes row_clocks.csv of a copy of the bundle and renews its checksum in meta.yaml; returns
    the meta path and the document written."""
    open(os.path.join(variant, "tp1/moe_components/dp1_ep1_rank0_sp0/row_clocks.csv"), "w").write(text)
    meta_path = os.path.join(variant, "meta.yaml")
    doc = yaml.safe_load(open(meta_path))
    doc["per_tp"][1]["moe_components"]["entries"][0]["coverage"]["fidelity"]["row_clocks_table"]["sha256"] = \
        hashlib.sha256(text.encode()).hexdigest()
    yaml.safe_dump(doc, open(meta_path, "w"))
    return meta_path, doc


with tempfile.TemporaryDirectory() as tmp:
    root = os.path.join(tmp, "bundles")
    run(mpirun_cmd(1, "acquire", os.path.join(SOURCE_DIR, "tests/data/staircase.yaml"), "--out-root",
                   root, "--quiet"))
    bundle = os.path.join(root, "staircase")
    table = os.path.join(bundle, "tp1/moe_components/dp1_ep1_rank0_sp0/components.csv")
    rows = {(r.split(",")[0], tuple(int(x) for x in r.split(",")[2:5]))
            for r in open(table).read().splitlines()[1:]}

    p = run([HARNESS, "validate", bundle, "--points", "10", "--seed", "11", "--format", "json"], check=False)
    assert p.returncode in (0, 3), p.stderr
    report = json.loads(p.stdout)
    assert report["seed"] == 11
    (entry,) = report["entries"]
    # The device that measured now and the table's, as the bundle's provenance names it.
    here = "staircase model (no hardware)"
    assert entry["device"] == here and entry["table_devices"] == [here], entry
    assert entry["same_device"] is True
    comps = {c["component"]: c for c in entry["components"]}
    assert set(comps) == {"gate_routing", "experts", "wrapper"}, comps.keys()
    within = True
    for name, c in comps.items():
        assert c["count"] == len(c["points"]) == 10, (name, c["count"])
        errors, signed = [], []
        for pt in c["points"]:
            n, a, m = pt["point"]
            assert (name, (n, a, m)) not in rows, f"{name} {pt['point']} is a table row, not held out"
            want = staircase_time_us(name, n, a, m)
            assert abs(pt["measured_us"] - want) <= 1e-9 * want, (name, pt, want)
            query = ["--tp", "1", "--dp", "1", "--component", name, "--tokens", str(n)]
            if name == "experts":
                query += ["--activated", str(a), "--assignments", str(m)]
            looked_up = float(run([HARNESS, "lookup", bundle, *query]).stdout.split()[0])
            assert abs(pt["predicted_us"] - looked_up) <= 1e-6 * looked_up, (pt, looked_up)
            errors.append(abs(pt["predicted_us"] - pt["measured_us"]) / pt["measured_us"])
            signed.append((pt["predicted_us"] - pt["measured_us"]) / pt["measured_us"])
        errors.sort()
        signed.sort()
        assert abs(c["median_relative_error"] - quantile(signed, 0.5)) < 1e-12  # an offset
        # ... and the errors once it is removed (what interpolation alone leaves).
        centred = sorted(abs(e - quantile(signed, 0.5)) for e in signed)
        rest = c["offset_removed"]
        assert rest["count"] == len(signed) and abs(rest["max_abs_relative_error"] - centred[-1]) < 1e-12, rest
        assert abs(rest["median_abs_relative_error"] - quantile(centred, 0.5)) < 1e-12, rest
        assert abs(rest["p95_abs_relative_error"] - quantile(centred, 0.95)) < 1e-12, rest
        assert abs(c["max_abs_relative_error"] - errors[-1]) < 1e-12
        assert abs(c["median_abs_relative_error"] - quantile(errors, 0.5)) < 1e-12
        assert abs(c["p95_abs_relative_error"] - quantile(errors, 0.95)) < 1e-12
        within = within and c["p95_abs_relative_error"] <= c["tolerance"]
    assert report["within_tolerance"] == within and p.returncode == (0 if within else 3)
    # The experts points split by the model's declared waves: across a step where a vertex of the
    # prediction (as the reader locates it) runs other waves than the point; the statistics of
    # each side follow from its points.
    reader = harness_reader.ComponentTable(bundle, 1, 1)
    sides = {"same_waves": [], "across_waves": []}
    for pt in comps["experts"]["points"]:
        n, a, m = pt["point"]
        vertices = [reader.mesh.points[v] for v, w in reader.mesh.locate((float(n), float(a), float(m)))
                    if w > harness_reader.NEGLIGIBLE_WEIGHT]
        across = any(staircase_waves(int(va), int(vm)) != staircase_waves(a, m) for _, va, vm in vertices if va > 0)
        assert pt["spans_launch_wave_step"] is across, (pt, vertices)
        sides["across_waves" if across else "same_waves"].append(pt["relative_error"])
    for side, errors in sides.items():
        got = comps["experts"]["by_waves"][side]
        assert got["count"] == len(errors), (side, got, errors)
        if errors:
            assert abs(got["max_abs_relative_error"] - max(errors)) < 1e-12, (side, got)
    assert "by_waves" not in comps["gate_routing"], comps["gate_routing"].keys()
    # Beside the held-out points, 6 (the default) of the table's own rows per component, spread
    # over its token range: answered exactly by the table, so on the same (modeled) device they
    # miss by nothing.
    csv_time = {(r.split(",")[0], tuple(int(x) for x in r.split(",")[2:5])): float(r.split(",")[5])
                for r in open(table).read().splitlines()[1:]}
    for name, c in comps.items():
        t = c["table_rows"]
        assert t["count"] == len(t["points"]) == 6 and t["bank_failures"] == 0, (name, t)
        tokens = sorted(pt["point"][0] for pt in t["points"])
        assert tokens[0] < 8 and tokens[-1] > 24, (name, tokens)  # spread, not bunched
        for pt in t["points"]:
            key = (name, tuple(pt["point"]))
            assert key in rows and pt["table_us"] == csv_time[key], (name, pt)
            assert abs(pt["measured_us"] - staircase_time_us(name, *pt["point"])) <= 1e-9 * pt["measured_us"], pt
        assert abs(t["median_relative_error"]) < 1e-4 and t["max_abs_relative_error"] < 1e-4, (name, t)  # 4-decimal CSV
    # Straight-line components are exact between rows (the gate within its 1% kernel step); the
    # experts staircase off balanced routing is where a sample can miss.
    # The clock each point ran at (the model's, per point) and its median now, beside the median
    # clock of the table's rows as the bundle states it.
    meta = yaml.safe_load(open(os.path.join(bundle, "meta.yaml")))
    (published,) = meta["per_tp"][1]["moe_components"]["entries"]
    for name, c in comps.items():
        measured = c["points"] + c["table_rows"]["points"]
        for pt in measured:
            assert abs(pt["sm_clock_mean_mhz"] - staircase_sm_clock_mhz(pt["point"][0])) <= 0.5, (name, pt)
        now = quantile(sorted(pt["sm_clock_mean_mhz"] for pt in measured), 0.5)
        assert abs(c["sm_clock_mean_mhz"]["now"] - now) < 1e-9, (name, c["sm_clock_mean_mhz"], now)
        table_clock = published["coverage"]["fidelity"]["components"][name]["sm_clock_mean_mhz"]["median"]
        assert c["sm_clock_mean_mhz"]["table"] == table_clock, (name, c["sm_clock_mean_mhz"], table_clock)
        # Each re-measured row beside the clock it was measured at (row_clocks.csv): the model's.
        # and the device that measured it (row_clocks.csv's devices): this one, the only one.
        for pt in c["table_rows"]["points"]:
            assert abs(pt["table_sm_clock_mean_mhz"] - staircase_sm_clock_mhz(pt["point"][0])) <= 0.5, (name, pt)
            assert pt["table_row_devices"] == [0] and pt["table_row_on_this_device"] is True, (name, pt)
    # row_clocks.csv: one line per row of components.csv, in its order, under its checksum.
    table_dir = os.path.dirname(table)
    clocks_text = open(os.path.join(table_dir, "row_clocks.csv")).read()
    assert published["coverage"]["fidelity"]["row_clocks_table"] == \
        {"file": "row_clocks.csv", "sha256": hashlib.sha256(clocks_text.encode()).hexdigest()}
    clock_lines = clocks_text.splitlines()
    assert clock_lines[0] == \
        "component,tokens,activated_experts,local_assignments,sm_clock_mean_mhz,devices,run_spread,launch_waves"
    table_lines = open(table).read().splitlines()[1:]
    assert [r.rsplit(",", 4)[0] for r in clock_lines[1:]] == \
        [",".join(r.split(",")[:1] + r.split(",")[2:5]) for r in table_lines], "row_clocks.csv rows differ"
    for r in clock_lines[1:]:
        f = r.split(",")
        assert abs(float(f[4]) - staircase_sm_clock_mhz(int(f[1]))) <= 0.5 and f[5] == "0", r
        # The model's runs do not move; only experts rows carry a spread, and the waves it declares.
        assert (float(f[6]) == 0) if f[0] == "experts" else f[6] == "", r
        declared = f[0] == "experts" and int(f[2]) > 0
        assert f[7] == (f"{staircase_waves(int(f[2]), int(f[3]))};0" if declared else ""), r
    text = run([HARNESS, "validate", bundle, "--points", "10", "--seed", "11"], check=False).stdout
    g = comps["gate_routing"]["sm_clock_mean_mhz"]
    whole = lambda mhz: math.floor(mhz + 0.5)  # std::lround
    assert f"mean SM clock (median): now {whole(g['now'])} MHz, the table's rows {whole(g['table'])} MHz" in text, text
    row = comps["gate_routing"]["table_rows"]["points"][0]
    assert f"at {whole(row['sm_clock_mean_mhz'])} MHz (the row: {whole(row['table_sm_clock_mean_mhz'])} MHz on this device)" in text, text
    assert comps["wrapper"]["max_abs_relative_error"] < 1e-9
    assert comps["gate_routing"]["max_abs_relative_error"] < 0.0101

    again = json.loads(run([HARNESS, "validate", bundle, "--points", "10", "--seed", "11", "--format", "json"],
                           check=False).stdout)
    assert again["entries"] == report["entries"], "the same seed drew different points"
    other = json.loads(run([HARNESS, "validate", bundle, "--points", "10", "--seed", "12", "--format", "json"],
                           check=False).stdout)
    assert [p["point"] for p in other["entries"][0]["components"][1]["points"]] != \
        [p["point"] for p in report["entries"][0]["components"][1]["points"]], "another seed, same points"
    # Balanced routing: every experts point is the balanced point of its N (A = the expected
    # distinct experts, rounded; M = N*k*L/E), restated here from the geometry (E=8, k=2, L=8).
    balanced = json.loads(run([HARNESS, "validate", bundle, "--points", "6", "--seed", "11",
                               "--routing", "balanced", "--format", "json"], check=False).stdout)
    assert balanced["routing"] == "balanced"
    (experts,) = [c for c in balanced["entries"][0]["components"] if c["component"] == "experts"]
    def balanced_point(n):
        return (n, min(8, n * 2, max(2, round(8 * (1 - (1 - 2 / 8) ** n)))), 2 * n)
    # Refinement leaves few balanced points off the table; random draws find some of them.
    free = [n for n in range(2, 64) if ("experts", balanced_point(n)) not in rows]
    assert 0 < experts["count"] <= min(6, len(free)), (experts, free)
    for pt in experts["points"]:
        n, a, m = pt["point"]
        assert (n, a, m) == balanced_point(n) and n in free, pt
        assert abs(pt["measured_us"] - staircase_time_us("experts", n, a, m)) <= 1e-9 * pt["measured_us"]
    text = run([HARNESS, "validate", bundle, "--tp", "1", "--points", "3"], check=False)
    assert "seed " in text.stdout and ("within tolerance" in text.stdout or "OUTSIDE TOLERANCE" in text.stdout)

    # A table of one token row has no interior: each component is reported as skipped, not left out.
    one_row = os.path.join(tmp, "one_row.yaml")
    open(one_row, "w").write(open(os.path.join(SOURCE_DIR, "tests/data/staircase.yaml")).read()
                             .replace("max_num_batched_tokens: 64", "max_num_batched_tokens: 1")
                             .replace("max_num_seqs: 16", "max_num_seqs: 1")
                             .replace("variant: staircase", "variant: one_row"))
    run(mpirun_cmd(1, "acquire", one_row, "--out-root", root, "--quiet"))
    p = run([HARNESS, "validate", os.path.join(root, "one_row"), "--format", "json", "--seed", "1"])
    comps = p and json.loads(p.stdout)["entries"][0]["components"]
    assert comps and all(c["count"] == 0 and "skipped" in c for c in comps), comps
    p = run([HARNESS, "validate", os.path.join(root, "one_row"), "--seed", "1"])
    assert "(skipped: no feasible point between the table's token rows)" in p.stdout, p.stdout

    # A table 5% slower than this device measures (every row scaled, its checksum renewed): the
    # re-measured rows say +5% without interpolation in it, and so does the held-out offset.
    slow = os.path.join(tmp, "slow")
    shutil.copytree(bundle, slow)
    slow_table = os.path.join(slow, "tp1/moe_components/dp1_ep1_rank0_sp0/components.csv")
    head, *body = open(slow_table).read().splitlines()
    scaled = "\n".join([head] + [",".join(f[:5] + [f"{1.05 * float(f[5]):.4f}"]) for f in (r.split(",") for r in body)]) + "\n"
    open(slow_table, "w").write(scaled)
    meta_path = os.path.join(slow, "meta.yaml")
    doc = yaml.safe_load(open(meta_path))
    doc["per_tp"][1]["moe_components"]["entries"][0]["coverage"]["table_sha256"] = \
        hashlib.sha256(scaled.encode()).hexdigest()
    yaml.safe_dump(doc, open(meta_path, "w"))
    p = run([HARNESS, "validate", slow, "--points", "4", "--table-rows", "3", "--seed", "3", "--format", "json"],
            check=False)
    for c in json.loads(p.stdout)["entries"][0]["components"]:
        t = c["table_rows"]
        assert t["count"] == 3 and abs(t["median_relative_error"] - 0.05) < 2e-4, (c["component"], t)
        if c["component"] != "experts":  # straight lines: the held-out points carry the same +5%
            assert abs(c["median_relative_error"] - 0.05) < 2e-4, c
    text = run([HARNESS, "validate", slow, "--points", "2", "--table-rows", "3", "--seed", "3"], check=False).stdout
    assert "3 table rows re-measured: bundle - measured median +5.00%" in text, text
    assert "this device and day against the table's, without interpolation" in text, text
    none = json.loads(run([HARNESS, "validate", bundle, "--points", "2", "--table-rows", "0", "--seed", "3",
                           "--format", "json"], check=False).stdout)
    assert all(c["table_rows"]["count"] == 0 and c["table_rows"]["points"] == []
               for c in none["entries"][0]["components"]), none

    # Rows that ran at another clock than this device runs now (row_clocks.csv's clocks of the rows
    # at N >= 24 raised 5 %, re-signed): each point states its rows' clock as its prediction weighs
    # them and its own against it, and the points split by whether that offset is within the
    # tolerance; the model's own clocks (the first run) put every point within it.
    (experts,) = [c for c in report["entries"][0]["components"] if c["component"] == "experts"]
    assert experts["by_clock"]["off"]["count"] == 0 and \
        experts["by_clock"]["matched"]["count"] == experts["count"], experts["by_clock"]
    warm = os.path.join(tmp, "warm")
    shutil.copytree(bundle, warm)
    head, *body = clocks_text.splitlines()
    raised = "\n".join([head] + [",".join(f[:4] + [f"{float(f[4]) * (1.05 if int(f[1]) >= 24 else 1):.1f}"] + f[5:])
                                 for f in (r.split(",") for r in body)]) + "\n"
    write_row_clocks(warm, raised)
    row_clock = {(f[0], int(f[1]), int(f[2]), int(f[3])): float(f[4]) for f in (r.split(",") for r in raised.splitlines()[1:])}
    p = run([HARNESS, "validate", warm, "--points", "10", "--seed", "11", "--format", "json"], check=False)
    for c in json.loads(p.stdout)["entries"][0]["components"]:
        name, classes = c["component"], {"matched": [], "off": []}
        for pt in c["points"]:
            n, a, m = pt["point"]
            query = ["--component", name, "--tokens", str(n)] + \
                (["--activated", str(a), "--assignments", str(m)] if name == "experts" else [])
            explain = json.loads(run([HARNESS, "lookup", warm, "--tp", "1", "--dp", "1", *query, "--explain",
                                      "--format", "json"]).stdout)
            rows_mhz = sum(v["weight"] * row_clock[(name, v["tokens"], v.get("activated_experts", 0),
                                                    v.get("local_assignments", 0))] for v in explain["vertices"])
            assert abs(pt["rows_sm_clock_mean_mhz"] - rows_mhz) < 1e-6 * rows_mhz, (name, pt, rows_mhz)
            offset = pt["sm_clock_mean_mhz"] / rows_mhz - 1
            assert abs(pt["clock_vs_rows"] - offset) < 1e-9, (name, pt, offset)
            classes["matched" if abs(offset) <= c["tolerance"] else "off"].append(pt["relative_error"])
        for side, errors in classes.items():
            got = c["by_clock"][side]
            assert got["count"] == len(errors), (name, side, got, errors)
            if errors:
                assert abs(got["max_abs_relative_error"] - max(errors)) < 1e-12, (name, side, got)
        assert classes["off"] and classes["matched"], (name, classes)  # both sides of N = 24 drawn
    text = run([HARNESS, "validate", warm, "--points", "10", "--seed", "11"], check=False).stdout
    assert "measured within 2.00% of its rows' clock: " in text and "measured further from its rows' clock: " in text, text
    assert re.search(r"error [0-9.]+%, at [0-9]+ MHz \(-4\.[0-9]% against its rows'\)", text), text

    # Error paths.
    expect_error([os.path.join(tmp, "nowhere")], "no meta.yaml")
    expect_error([bundle, "--table-rows", "-1"], "--table-rows must be between 0 and 1000")
    expect_error([bundle, "--points", "0"], "--points must be between 1 and 1000")
    expect_error([bundle, "--tp", "4"], "no component table matches --tp/--dp/--rank")
    expect_error([bundle, "--format", "xml"], "--format must be text or json")
    expect_error([bundle, "--routing", "skewed"], "--routing must be random or balanced, got 'skewed'")
    expect_error([], "name the bundle variant directory")
    # row_clocks.csv changed under its checksum, then re-signed but malformed, then gone.
    clocks = os.path.join(tmp, "clocks")
    shutil.copytree(bundle, clocks)
    clocks_csv = os.path.join(clocks, "tp1/moe_components/dp1_ep1_rank0_sp0/row_clocks.csv")
    open(clocks_csv, "a").write("experts,9,9,9,1.0\n")
    expect_error([clocks, "--points", "2"], "row_clocks.csv: checksum mismatch (row_clocks_table.sha256 in meta.yaml)")
    meta_path, doc = write_row_clocks(clocks, clocks_text.replace("\n", "\nexperts,x,1,1,1900.0\n", 1))
    expect_error([clocks, "--points", "2"], "row_clocks.csv:2: expected component,tokens,activated_experts,"
                 "local_assignments,sm_clock_mean_mhz")
    os.remove(clocks_csv)
    expect_error([clocks, "--points", "2"], "cannot read " + clocks_csv + " (named by row_clocks_table in meta.yaml)")
    # An entry published before row_clocks.csv: validated, and the output says why no row has a
    # clock of its own (the current bundle says nothing of the kind).
    assert report["entries"][0]["row_clocks_recorded"] is True
    assert "no row's own clock" not in text
    del doc["per_tp"][1]["moe_components"]["entries"][0]["coverage"]["fidelity"]["row_clocks_table"]
    yaml.safe_dump(doc, open(meta_path, "w"))
    old = run([HARNESS, "validate", clocks, "--points", "2", "--seed", "11"], check=False)
    assert old.returncode in (0, 3), old.stderr
    assert "no row's own clock: this entry was published before bundles recorded row_clocks.csv" in old.stdout, old.stdout
    assert "(the row:" not in old.stdout, old.stdout
    old_json = json.loads(run([HARNESS, "validate", clocks, "--points", "2", "--seed", "11", "--format", "json"],
                              check=False).stdout)
    assert old_json["entries"][0]["row_clocks_recorded"] is False

    def contract_changed(name, change):
        """A copy of the bundle whose first TP1 entry's contract `change` edits, re-signed."""
        copy = os.path.join(tmp, name)
        shutil.copytree(bundle, copy)
        meta_path = os.path.join(copy, "meta.yaml")
        doc = yaml.safe_load(open(meta_path))
        entry = doc["per_tp"][1]["moe_components"]["entries"][0]
        change(entry["contract"])
        entry["contract_sha256"] = hashlib.sha256(json.dumps(
            entry["contract"], sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()
        yaml.safe_dump(doc, open(meta_path, "w"))
        return copy

    # A table measured by another version of the backend's code, and one measured with the timing
    # loop before protocol 2 (no timing_protocol in its conditioning): validated, and the output
    # says what differs; the current bundle says nothing of either.
    assert report["entries"][0]["backend_version"] == {"now": 1, "table": 1}
    assert report["entries"][0]["timing_protocol"] == {"now": 2, "table": 2}
    assert "another version of the measured code" not in text and "another timing protocol" not in text
    for name, change, said, key, versions in (
        ("newer", lambda c: c.update(backend_version=2),
         "another version of the measured code: this build runs version 1, the table was measured by version 2",
         "backend_version", {"now": 1, "table": 2}),
        ("older-loop", lambda c: c["conditioning"].pop("timing_protocol"),
         "another timing protocol: this build times with protocol 2, the table was measured with protocol 1",
         "timing_protocol", {"now": 2, "table": 1}),
    ):
        copy = contract_changed(name, change)
        p = run([HARNESS, "validate", copy, "--points", "2", "--seed", "11"], check=False)
        assert p.returncode in (0, 3), p.stderr
        assert said in p.stdout, (name, p.stdout)
        p = run([HARNESS, "validate", copy, "--points", "2", "--seed", "11", "--format", "json"], check=False)
        assert json.loads(p.stdout)["entries"][0][key] == versions, (name, p.stdout)
    for name, change, needle in (
        ("elsewhere", lambda hw: hw["devices"][0].update(device="NVIDIA H200"),
         "was measured on NVIDIA H200, but this machine's staircase_model backend runs on "
         "staircase model (no hardware)"),
        ("anonymous", lambda hw: hw.clear(), "carries no hardware identity"),
    ):
        copy = os.path.join(tmp, name)
        shutil.copytree(bundle, copy)
        meta_path = os.path.join(copy, "meta.yaml")
        doc = yaml.safe_load(open(meta_path))
        change(doc["per_tp"][1]["moe_components"]["entries"][0]["provenance"]["hardware"])
        yaml.safe_dump(doc, open(meta_path, "w"))
        expect_error([copy, "--points", "2"], needle)
print(f"ok: validate measured the model exactly and predicted what lookup answers (within tolerance: {within})")
