"""The C API (lookup/harness_lookup.h) from a C program: its answers equal `harness lookup` at grid
rows and between them, refusals carry the library's message and code, a batch marks refused
queries NaN, collectives are answered, whether an answer spans a launch-wave step and the held-out
errors across such steps are lookup's (and the plain-Python reader's), so is the spread between
devices, 4 threads querying one
handle get the sequential answers, and the program links no MPI, HDF5, CUDA or Boost library."""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import yaml

from harness_test_lib import HARNESS, SOURCE_DIR, mpirun_cmd, run

sys.path.insert(0, os.path.join(SOURCE_DIR, "python"))
import harness_reader  # noqa: E402  (the plain-Python reader: docs/bundle-format.md alone)

CONSUMER = os.path.join(os.path.dirname(os.path.dirname(HARNESS)), "lookup", "lookup_c_consumer")


def consume(variant, tp, dp, lines):
    p = subprocess.run([CONSUMER, variant, str(tp), str(dp)], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, check=True)
    return p.stdout.splitlines()


def cli(variant, tp, dp, *query):
    p = run([HARNESS, "lookup", variant, "--tp", str(tp), "--dp", str(dp), *query], check=False)
    return float(p.stdout.split()[0]) if p.returncode == 0 else None


with tempfile.TemporaryDirectory() as tmp:
    run(mpirun_cmd(2, "acquire", "--unverified", os.path.join(SOURCE_DIR, "tests/data/micro.yaml"), "--out",
                   os.path.join(tmp, "acq"), "--out-root", tmp, "--quiet"))
    variant = os.path.join(tmp, "micro")
    table = os.path.join(variant, "tp1/moe_components/dp2_ep2_rank0_sp0/components.csv")
    rows = [r.split(",") for r in open(table).read().splitlines()[1:]]
    rng = random.Random(5)
    queries = [(r[0], int(r[2]), int(r[3]), int(r[4])) for r in rows[::3]]
    for _ in range(20):
        n = rng.randint(1, 16)
        a = rng.randint(1, min(4, 2 * n))
        queries.append(("experts", n, a, rng.randint(a, n * min(2, a))))
    queries.append(("gate_routing", 7, 0, 0))
    out = consume(variant, 1, 2, [f"component {c} {n} {a} {m}" for c, n, a, m in queries] +
                  ["component experts 100000 1 1", "component shared 1 0 0",
                   "batch experts 4 2 4 100000 1 1", "collective ep_dispatch 3",
                   "collective no_such 3", "held_out experts 4 2 4", "held_out experts 4 3 6",
                   "held_out gate_routing 7 0 0", "held_out shared 1 0 0"])
    answered = 0
    for (c, n, a, m), line in zip(queries, out):
        args = ["--component", c, "--tokens", str(n)] + (["--activated", str(a), "--assignments", str(m)]
                                                         if c == "experts" else [])
        want = cli(variant, 1, 2, *args)
        if want is None:
            assert line.startswith("error 1: "), (c, n, a, m, line)
        else:
            got = float(line.split()[0])
            assert abs(got - want) <= 1e-9 * want, (c, n, a, m, got, want)
            answered += 1
    tail = out[len(queries):]
    assert tail[0].startswith("error 1: ") and "outside the measured support" in tail[0], tail[0]
    assert tail[1] == "error 2: unknown component 'shared'", tail[1]
    batch = tail[2].split()
    assert batch[1] == "nan" and batch[2:4] == ["status", "1"] and "query 1:" in tail[2], tail[2]
    assert abs(float(batch[0]) - cli(variant, 1, 2, "--component", "experts", "--tokens", "4",
                                     "--activated", "2", "--assignments", "4")) < 1e-6
    coll = tail[3].split()
    want = run([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--collective", "ep_dispatch",
                "--tokens", "3", "--format", "json"]).stdout
    want = json.loads(want)
    assert abs(float(coll[0]) - want["time_us"]) < 1e-9 and int(coll[2]) == want["bytes"], (coll, want)
    assert tail[4].startswith("error 1: no collective 'no_such'"), tail[4]
    # Held-out errors: what `harness lookup` reports with the same query (the routing class as
    # 1 balanced / 0 off it, -1 for a table without classes).
    for line, query in zip(tail[5:8], (("experts", 4, 2, 4), ("experts", 4, 3, 6), ("gate_routing", 7, 0, 0))):
        c, n, a, m = query
        args = ["--component", c, "--tokens", str(n)] + (["--activated", str(a), "--assignments", str(m)]
                                                         if c == "experts" else [])
        want = json.loads(run([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", *args,
                               "--format", "json"]).stdout)["held_out"]
        median, p95, mx, count, balanced = line.split()
        assert [float(median), float(p95), float(mx), int(count)] == [
            want["median_abs_relative_error"], want["p95_abs_relative_error"],
            want["max_abs_relative_error"], want["count"]], (line, want)
        assert int(balanced) == {"balanced": 1, "off_balance": 0}.get(want.get("routing"), -1), (line, want)
    assert [l.split()[4] for l in tail[5:8]] != ["-1"] * 3 and tail[7].split()[4] == "-1", tail[5:8]
    assert tail[8] == "error 2: unknown component 'shared'", tail[8]
    # A bundle published before the fidelity block: its held-out errors are refused, its times not.
    old = os.path.join(tmp, "no_fidelity")
    shutil.copytree(variant, old)
    meta = yaml.safe_load(open(os.path.join(old, "meta.yaml")))
    for entry in meta["per_tp"][1]["moe_components"]["entries"]:
        entry["coverage"].pop("fidelity")
    yaml.safe_dump(meta, open(os.path.join(old, "meta.yaml"), "w"))
    held, time = consume(old, 1, 2, ["held_out gate_routing 7 0 0", "component gate_routing 7 0 0"])[:2]
    assert held == "error 1: gate_routing: the bundle records no held-out errors (published before them)", held
    assert float(time.split()[0]) > 0, time
    assert out[-1] == "threads: identical", out[-1]
    assert answered >= 10, answered

    # Launch-wave steps: the host backend declares no waves (nothing to say, and no split to give);
    # the staircase model does, and the C API says what `harness lookup --explain` says.
    assert consume(variant, 1, 2, ["wave_step experts 5 3 7"])[0] == "-1"
    none = consume(variant, 1, 2, ["held_out_across_wave_steps experts"])[0]
    assert none.startswith("error 1: experts: the bundle records no held-out errors across launch-wave steps"), none
    # Unrefined (no grid points added, published with its misses), so that answers span the steps.
    unrefined = os.path.join(tmp, "unrefined.yaml")
    open(unrefined, "w").write(open(os.path.join(SOURCE_DIR, "tests/data/staircase.yaml")).read()
                               .replace("max_added_points: 600", "max_added_points: 0"))
    run(mpirun_cmd(1, "acquire", unrefined, "--out-root", tmp, "--accept-failures", "--quiet"))
    stairs = os.path.join(tmp, "staircase")
    points = [(n, a, 2 * n) for n in range(3, 60, 4) for a in (2, 3, 5, 7)]  # EP1: every route local, M = N*k
    lines = consume(stairs, 1, 1, [f"wave_step experts {n} {a} {m}" for n, a, m in points] +
                    ["held_out_across_wave_steps experts", "wave_step gate_routing 7 0 0", "wave_step shared 1 0 0"])
    # ... and so does the plain-Python reader, from the format's documentation alone.
    reader = harness_reader.ComponentTable(stairs, 1, 1)
    assert harness_reader.ComponentTable(variant, 1, 2).spans_launch_wave_step("experts", 5, 3, 7) is None
    assert harness_reader.ComponentTable(variant, 1, 2).held_out_across_wave_steps("experts") is None
    said = set()
    for (n, a, m), line in zip(points, lines):
        p = run([HARNESS, "lookup", stairs, "--tp", "1", "--dp", "1", "--component", "experts", "--tokens", str(n),
                 "--activated", str(a), "--assignments", str(m), "--explain", "--format", "json"], check=False)
        if p.returncode != 0:
            assert line.startswith("error 1: "), (n, a, m, line)
            continue
        want = json.loads(p.stdout)
        assert line == {True: "1", False: "0", None: "-1"}[want.get("spans_launch_wave_step")], (n, a, m, line, want)
        assert reader.spans_launch_wave_step("experts", n, a, m) == want.get("spans_launch_wave_step"), (n, a, m)
        said.add(line)
        if line == "1":
            across, spanning = want["held_out_across_wave_steps"], (n, a, m)
    assert {"0", "1"} <= said, said
    # A row_clocks.csv that does not match its checksum: the C API and the reader refuse the
    # question (the table itself still answers).
    tampered = os.path.join(tmp, "tampered")
    shutil.copytree(stairs, tampered)
    with open(os.path.join(tampered, "tp1/moe_components/dp1_ep1_rank0_sp0/row_clocks.csv"), "a") as f:
        f.write("experts,1,1,1,,0,0,9;9\n")
    refused = consume(tampered, 1, 1, ["wave_step experts {} {} {}".format(*spanning),
                                       "component experts {} {} {}".format(*spanning)])
    assert refused[0].startswith("error 1: ") and "checksum mismatch" in refused[0], refused[0]
    assert not refused[1].startswith("error"), refused[1]
    try:
        harness_reader.ComponentTable(tampered, 1, 1).spans_launch_wave_step("experts", *spanning)
        raise AssertionError("the reader read a tampered row_clocks.csv")
    except harness_reader.LookupError as e:
        assert "row_clocks.csv: checksum mismatch" in str(e), e
    median, p95, mx, count = lines[len(points)].split()
    assert [float(median), float(p95), float(mx), int(count)] == [
        across["median_abs_relative_error"], across["p95_abs_relative_error"], across["max_abs_relative_error"],
        across["count"]], (lines[len(points)], across)
    assert reader.held_out_across_wave_steps("experts") == {
        "count": across["count"], "median": across["median_abs_relative_error"],
        "p95": across["p95_abs_relative_error"], "max": across["max_abs_relative_error"]}
    assert lines[len(points) + 1] == "-1", lines[len(points) + 1]
    assert lines[len(points) + 2] == "error 2: unknown component 'shared'", lines[len(points) + 2]

    # The spread between devices: a bundle that records none is refused by name; one whose
    # repeatability is split by device answers what `harness lookup --explain` and the reader say
    # (the largest offset among pairs of at least 5 points: the 3-point pair's -9 % is left out).
    assert consume(stairs, 1, 1, ["device_spread experts"])[0] == (
        "error 1: experts: the bundle records no spread between devices (published before it)")
    spread_dir = os.path.join(tmp, "spread")
    shutil.copytree(variant, spread_dir)
    meta = yaml.safe_load(open(os.path.join(spread_dir, "meta.yaml")))
    by_device = {"same_device": {"count": 4, "median_abs_relative_difference": 0.002,
                                 "max_abs_relative_difference": 0.004},
                 "across_devices": {"count": 14, "median_abs_relative_difference": 0.021,
                                    "max_abs_relative_difference": 0.043},
                 "device_pairs": [{"grid_device": 1, "held_out_device": 0, "count": 6,
                                   "median_signed_relative_difference": 0.012},
                                  {"grid_device": 2, "held_out_device": 0, "count": 5,
                                   "median_signed_relative_difference": -0.025},
                                  {"grid_device": 2, "held_out_device": 1, "count": 3,
                                   "median_signed_relative_difference": -0.09}]}
    for entry in meta["per_tp"][1]["moe_components"]["entries"]:
        entry["coverage"]["fidelity"]["components"]["experts"]["repeatability"]["by_device"] = by_device
    yaml.safe_dump(meta, open(os.path.join(spread_dir, "meta.yaml"), "w"))
    median, mx, offset, count = consume(spread_dir, 1, 2, ["device_spread experts"])[0].split()
    assert [float(median), float(mx), float(offset), int(count)] == [0.021, 0.043, -0.025, 14], (median, mx, offset, count)
    explained = json.loads(run([HARNESS, "lookup", spread_dir, "--tp", "1", "--dp", "2", "--component", "experts",
                                "--tokens", "4", "--activated", "2", "--assignments", "4", "--explain",
                                "--format", "json"]).stdout)["device_spread"]
    assert explained == {"count": 14, "median_abs_relative_difference": 0.021, "max_abs_relative_difference": 0.043,
                         "largest_offset": -0.025, "pairs": 2}, explained
    assert harness_reader.ComponentTable(spread_dir, 1, 2).device_spread("experts") == {
        "count": 14, "median": 0.021, "max": 0.043, "largest_offset": -0.025}
    assert harness_reader.ComponentTable(stairs, 1, 1).device_spread("experts") is None
    text = run([HARNESS, "lookup", spread_dir, "--tp", "1", "--dp", "2", "--component", "experts", "--tokens", "4",
                "--activated", "2", "--assignments", "4", "--explain"]).stdout
    assert ("GPUs of the kind measured the same points 2.10% apart (median; max 4.30% over 14 points measured on "
            "two devices; the pair furthest apart: -2.50%)") in text, text
    # ... and the report says it beside the table's held-out errors.
    page = os.path.join(tmp, "spread.html")
    run([HARNESS, "report", spread_dir, "--out", page])
    assert "; between devices: 14 points measured on two devices, |difference| median 2.10%, max 4.30%</p>" in \
        open(page).read(), page
    # Anchors (rows a device new to the campaign measured again) are pairs too: a pair of 5 rows
    # further apart than any held-out pair is the largest offset, one of 4 rows is left out, and so
    # is a device against itself (rows whose later rounds the new device measured); with
    # anchors alone the held-out figures are 0 and the pairs are the anchors'.
    anchors = {"count": 9, "device_pairs": [{"row_device": 0, "anchor_device": 3, "count": 5,
                                             "median_signed_relative_difference": 0.031},
                                            {"row_device": 1, "anchor_device": 3, "count": 4,
                                             "median_signed_relative_difference": -0.2},
                                            {"row_device": 3, "anchor_device": 3, "count": 7,
                                             "median_signed_relative_difference": 0.3}]}
    for entry in meta["per_tp"][1]["moe_components"]["entries"]:
        entry["coverage"]["fidelity"]["components"]["experts"]["device_anchors"] = anchors
    yaml.safe_dump(meta, open(os.path.join(spread_dir, "meta.yaml"), "w"))
    median, mx, offset, count = consume(spread_dir, 1, 2, ["device_spread experts"])[0].split()
    assert [float(median), float(mx), float(offset), int(count)] == [0.021, 0.043, 0.031, 14], (median, mx, offset)
    assert harness_reader.ComponentTable(spread_dir, 1, 2).device_spread("experts") == {
        "count": 14, "median": 0.021, "max": 0.043, "largest_offset": 0.031}
    explain = [HARNESS, "lookup", spread_dir, "--tp", "1", "--dp", "2", "--component", "experts", "--tokens", "4",
               "--activated", "2", "--assignments", "4", "--explain"]
    assert json.loads(run(explain + ["--format", "json"]).stdout)["device_spread"]["pairs"] == 3
    for entry in meta["per_tp"][1]["moe_components"]["entries"]:
        del entry["coverage"]["fidelity"]["components"]["experts"]["repeatability"]["by_device"]
    yaml.safe_dump(meta, open(os.path.join(spread_dir, "meta.yaml"), "w"))
    median, mx, offset, count = consume(spread_dir, 1, 2, ["device_spread experts"])[0].split()
    assert [float(median), float(mx), float(offset), int(count)] == [0, 0, 0.031, 0], (median, mx, offset, count)
    assert harness_reader.ComponentTable(spread_dir, 1, 2).device_spread("experts") == {
        "count": 0, "median": 0.0, "max": 0.0, "largest_offset": 0.031}
    assert ("GPUs of the kind measured the same rows +3.10% apart (median of the pair furthest apart of 1): a GPU "
            "that did not measure the table may be off by as much") in run(explain).stdout

    libs = subprocess.run(["ldd", CONSUMER], capture_output=True, text=True).stdout
    for lib in ("libmpi", "libhdf5", "libcuda", "libcudart", "libboost"):
        assert lib not in libs, f"the C consumer links {lib}:\n{libs}"
print(f"ok: {answered} C API answers equal harness lookup; refusals, batch, collectives, threads")
