"""Adaptive refinement on the staircase_model test double, whose experts time is a known staircase
in rows per expert (kernels/staircase_backend.h; the model is restated here independently).

1. Refinement finds the steps: the acquisition publishes without an acceptance flag, its own
   held-out max error is within the tolerance, and a dense check this test chooses (every N at
   balanced routing, looked up in the bundle and compared with the model) is too. The model's
   waves are declared (kernels' expert_launch_waves), and some stage brackets them.
   The modeled gate changes its "kernel" above 44 rows with a 1% step (under the tolerance, so no
   held-out point misses): the bundle reports the change between the rows around it.
   Those rows are 32 tokens apart: the change is reported only.
2. Refinement resumes after SIGKILL: a run killed during a refinement stage and re-run ends with
   exactly the cells, points and table of an uninterrupted run, and the rounds complete before the
   kill are not measured again.
3. A kernel change between rows at most 8 tokens apart is bracketed: with capture sizes every 8
   tokens the gate's switch lies between the rows 40 and 48, and refinement adds rows until
   adjacent rows bracket it (44 and 45), with no held-out miss asking for them."""
import collections
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile

import sys

import h5py
import yaml

from harness_test_lib import (HARNESS, MPI_ENV, SOURCE_DIR, check_complete, check_inspect_cells, lookup_many, mpirun_cmd, quantile,
                              run, staircase_sm_clock_mhz, staircase_time_us, staircase_waves)

sys.path.insert(0, os.path.join(SOURCE_DIR, "python"))
import harness_reader  # noqa: E402  (answers like the library: test_python_reader.py)

JOB = os.path.join(SOURCE_DIR, "tests/data/staircase.yaml")
E, K = 8, 2  # the tiny preset


def entry(bundle):
    meta = yaml.safe_load(open(os.path.join(bundle, "meta.yaml")))
    (only,) = meta["per_tp"][1]["moe_components"]["entries"]
    return only


def experts_fidelity(bundle):
    return entry(bundle)["coverage"]["fidelity"]


def table(bundle):
    return open(os.path.join(bundle, "tp1", entry(bundle)["path"])).read()


def cell_rounds(h5):
    """{cell: (points, {round: samples})} of the complete rounds in the file."""
    out = {}
    with h5py.File(h5, "r") as f:
        for name, cell in f["cells"].items():
            done = cell["rounds_done"][()]
            out[name] = (cell["points"][()].tolist(),
                         {r: cell[f"round_{r}"]["samples"][()] for r in range(len(done)) if done[r]})
    return out


with tempfile.TemporaryDirectory() as tmp:
    # 1. Convergence, and an independent dense check at balanced routing.
    ref_root = os.path.join(tmp, "ref")
    p = run(mpirun_cmd(2, "acquire", "--unverified", JOB, "--out-root", ref_root))
    bundle = os.path.join(ref_root, "staircase")
    fid = experts_fidelity(bundle)
    assert fid["status"] == "validated", fid["status"]
    experts = fid["components"]["experts"]
    assert experts["refinement"]["stages"] >= 2 and experts["refinement"]["added_points"] > 0, experts
    # The model declares its waves (as native does): misses across one get both sides of it.
    assert re.search(r"refinement stage \d+ of \S+ experts: [^\n]*misses bracketed at launch-wave steps",
                     p.stderr), p.stderr
    assert experts["held_out"]["max_abs_relative_error"] <= 0.02, experts["held_out"]
    assert experts["failed_points"] == [], experts["failed_points"]
    # Held-out points that refinement took as grid rows were measured twice, in two cells: the
    # bundle says how far apart (the model repeats exactly), counted here from the file's cells.
    points_of = {"grid": set(), "held_out": set()}
    with h5py.File(os.path.join(ref_root, "acquisitions/staircase/acquisition.h5"), "r") as f:
        for name, cell in f["cells"].items():
            if ".experts" in name:
                points_of["held_out" if ".held_out" in name else "grid"].update(
                    tuple(int(v) for v in p) for p in cell["points"][()])
    check_inspect_cells(os.path.join(ref_root, "acquisitions/staircase/acquisition.h5"))
    # inspect --held-out lists every held-out point, the largest |error| first, as the table's
    # statistics count them: the predictions are the published bundle's answers, the splits'
    # counts and the errors' median and max follow from the list.
    listed = json.loads(run([HARNESS, "inspect", os.path.join(ref_root, "acquisitions/staircase/acquisition.h5"),
                             "--held-out", "--format", "json"]).stdout)
    for fidelity_table in listed["fidelity"]:
        held, points = fidelity_table["held_out"], fidelity_table["held_out_points"]
        predicted = [pt for pt in points if pt["predicted_us"] is not None]
        assert len(predicted) == held["count"] and len(points) - len(predicted) == held["unpredicted"], fidelity_table["table"]
        errors = [pt["relative_error"] for pt in predicted]
        assert errors == sorted(errors, reverse=True), fidelity_table["table"]
        assert abs(errors[0] - held["max_abs_relative_error"]) < 1e-12, (errors[0], held)
        assert abs(quantile(sorted(errors), 0.5) - held["median_abs_relative_error"]) < 1e-12, held
        for pt in predicted:
            assert pt["relative_error"] == abs(pt["predicted_us"] - pt["measured_us"]) / pt["measured_us"], pt
            assert pt["miss"] == (pt["relative_error"] > fidelity_table["tolerance"]), pt
        component = fidelity_table["table"].split()[-1]
        answers = lookup_many(bundle, 1, 1, [(component, *pt["point"]) if component == "experts"
                                             else (component, pt["point"][0]) for pt in predicted])
        for pt, answer in zip(predicted, answers):
            assert abs(pt["predicted_us"] - answer) <= 1e-6 * answer, (pt, answer)
        for split, flag, sides in (("by_routing", "balanced", ("off_balance", "balanced")),
                                   ("by_waves", "spans_launch_wave_step", ("same_waves", "across_waves"))):
            if split in held:
                for value, side in zip((False, True), sides):
                    assert sum(pt[flag] is value for pt in predicted) == held[split][side]["count"], (split, side)
            else:
                assert all(pt[flag] is None for pt in predicted), (fidelity_table["table"], flag)
    text = run([HARNESS, "inspect", os.path.join(ref_root, "acquisitions/staircase/acquisition.h5"), "--held-out"]).stdout
    assert re.search(r"held-out points \(\d+, the largest \|error\| first\):\n        \[\d+,\d+,\d+\]: measured ", text), text
    refused = run([HARNESS, "inspect", bundle, "--held-out"], check=False)
    assert refused.returncode != 0 and "a bundle lists each entry's in its held_out.csv" in refused.stderr, refused.stderr
    repeatability = experts["repeatability"]
    assert repeatability["count"] == len(points_of["grid"] & points_of["held_out"]) > 0, repeatability["count"]
    assert repeatability["max_abs_relative_difference"] <= 1e-9, repeatability
    assert len(repeatability["most_apart"]) == 3 and all(
        tuple(m["point"]) in points_of["held_out"] for m in repeatability["most_apart"]), repeatability
    # One device measured both runs of every such point: all on the same device, no device pairs.
    by_device = repeatability["by_device"]
    assert by_device["same_device"]["count"] == repeatability["count"], by_device
    assert by_device["across_devices"]["count"] == 0 and by_device["device_pairs"] == [], by_device
    # The statistics at balanced routing and off it, restated from the bundle's held_out.csv.
    held = [r.split(",") for r in open(os.path.join(
        bundle, "tp1/moe_components/dp1_ep1_rank0_sp0/held_out.csv")).read().splitlines()[1:]]
    by_routing = {"balanced": [], "off_balance": []}
    for c, n, a, m, measured, predicted in held:
        if c != "experts":
            continue
        n, a, m = int(n), int(a), int(m)
        balanced = (a, m) == (round(E * (1 - (1 - K / E) ** n)), n * K)
        by_routing["balanced" if balanced else "off_balance"].append(
            abs(float(predicted) - float(measured)) / float(measured))
    for routing, errors in by_routing.items():
        errors.sort()
        got = experts["held_out"]["by_routing"][routing]
        assert got["count"] == len(errors) > 0, (routing, got, len(errors))
        for key, q in (("median", 0.5), ("p95", 0.95), ("max", 1.0)):
            want = quantile(errors, q)
            # held_out.csv rounds the times to 4 decimals.
            assert abs(got[f"{key}_abs_relative_error"] - want) <= 1e-4, (routing, key, got, want)
    # The same split by the model's declared waves: a point interpolated from any vertex whose
    # waves differ from its own lies across a wave step (vertices as the reader locates them).
    reader = harness_reader.ComponentTable(bundle, 1, 1)
    by_waves = {"same_waves": [], "across_waves": []}
    for c, n, a, m, measured, predicted in held:
        n, a, m = int(n), int(a), int(m)
        if c != "experts" or a == 0:
            continue
        vertices = [reader.mesh.points[v] for v, w in reader.mesh.locate((float(n), float(a), float(m)))
                    if w > harness_reader.NEGLIGIBLE_WEIGHT]
        across = any(staircase_waves(int(va), int(vm)) != staircase_waves(a, m) for _, va, vm in vertices if va > 0)
        by_waves["across_waves" if across else "same_waves"].append(abs(float(predicted) - float(measured)) / float(measured))
    for side, errors in by_waves.items():
        errors.sort()
        got = experts["held_out"]["by_waves"][side]
        assert got["count"] == len(errors), (side, got, len(errors))
        for key, q in (("median", 0.5), ("p95", 0.95), ("max", 1.0)):
            assert not errors or abs(got[f"{key}_abs_relative_error"] - quantile(errors, q)) <= 1e-4, (side, key, got)
    assert len(by_waves["same_waves"]) + len(by_waves["across_waves"]) == experts["held_out"]["count"], by_waves
    balanced = [("experts", n, round(E * (1 - (1 - K / E) ** n)), n * K) for n in range(1, 65)]
    worst = max(abs(got - staircase_time_us(*q)) / staircase_time_us(*q)
                for q, got in zip(balanced, lookup_many(bundle, 1, 1, balanced)))
    assert worst <= 0.02, f"balanced-routing lookup misses the staircase by {worst:.1%}"
    # Off balanced routing: every feasible (N, A) (M = N*k at EP1), where the steps M/A = b run
    # diagonally across the N rows; the mesh over rows per expert keeps them on its edges.
    off = sorted(abs(reader.query("experts", n, a, n * K) - staircase_time_us("experts", n, a, n * K))
                 / staircase_time_us("experts", n, a, n * K)
                 for n in range(1, 65) for a in range(K, min(E, n * K) + 1))
    off_p95, off_max = off[int(0.95 * len(off))], off[-1]
    print(f"off-balance: {len(off)} points, p95 {off_p95:.2%}, max {off_max:.2%}")
    # The steps in rows per expert and the waves in tiles both cut across the rows; fresh random
    # held-out points in every stage keep refinement going until they are bracketed (with the
    # planned sample alone refinement stopped at p95 8% here, max 26%; over (N, A, M) itself the
    # Delaunay mesh gave p95 13.5%).
    assert off_p95 <= 0.02 and off_max <= 0.05, \
        f"off-balance lookups miss the staircase: p95 {off_p95:.1%}, max {off_max:.1%}"
    assert entry(bundle)["coverage"]["triangulation"]["built_in"] == "rows_per_expert"
    gate = fid["components"]["gate_routing"]
    gate_rows = sorted(int(r.split(",")[2]) for r in table(bundle).splitlines()[1:]
                       if r.startswith("gate_routing,"))
    below = max(n for n in gate_rows if n <= 44)
    above = min(n for n in gate_rows if n > 44)
    assert gate["refinement"]["kernel_changes"] == [[below, above]], (gate["refinement"], gate_rows)
    for n, got in zip(range(1, 65), lookup_many(bundle, 1, 1, [("gate_routing", n) for n in range(1, 65)])):
        want = staircase_time_us("gate_routing", n)
        assert abs(got - want) <= 0.0101 * want, (n, got, want)
    # The mean SM clock each point's forwards ran at (the model's device clock, slower at larger N):
    # every median in the file records its point's, and each table states the clocks of its rows.
    with h5py.File(os.path.join(ref_root, "acquisitions/staircase/acquisition.h5"), "r") as f:
        for name, cell in f["cells"].items():
            points = cell["points"][()]
            for r, done in enumerate(cell["rounds_done"][()]):
                for m in (cell[f"round_{r}"]["medians"][()] if done else []):
                    want = staircase_sm_clock_mhz(int(points[m["point"]]["tokens"]))
                    assert abs(m["sm_clock_mean_mhz"] - want) <= 0.5, (name, r, m, want)  # stamps in whole ns
    for name, c in fid["components"].items():
        rows = sorted(staircase_sm_clock_mhz(int(r.split(",")[2])) for r in table(bundle).splitlines()[1:]
                      if r.startswith(name + ","))
        clock = c["sm_clock_mean_mhz"]
        assert clock["rows"] == clock["recorded"] == len(rows) > 0, (name, clock, len(rows))
        for key, want in (("min", rows[0]), ("median", quantile(rows, 0.5)), ("max", rows[-1])):
            assert abs(clock[key] - want) <= 0.5, (name, key, clock, want)
    # acquire's summary: the range and median over every measured point of the file (grid and
    # held-out, per point the median over its rounds), each within 1 MHz of the model's.
    with h5py.File(os.path.join(ref_root, "acquisitions/staircase/acquisition.h5"), "r") as f:
        model = sorted(staircase_sm_clock_mhz(int(pt["tokens"]))
                       for cell in f["cells"].values() for pt in cell["points"][()])
    line = re.search(r"clock: the points ran at (\d+)-(\d+) MHz \(median (\d+); SM 0's mean over each "
                     r"point's forwards\), recorded at (\d+) of (\d+) measured points", p.stdout)
    assert line, p.stdout
    lo, hi, med, recorded, measured = map(int, line.groups())
    assert recorded == measured == len(model), (line.group(0), len(model))
    for got, want in ((lo, model[0]), (hi, model[-1]), (med, quantile(model, 0.5))):
        assert abs(got - want) <= 1, (line.group(0), want)
    text = run([HARNESS, "inspect", bundle]).stdout
    clock = fid["components"]["experts"]["sm_clock_mean_mhz"]
    assert (f"mean SM clock of its rows: median {clock['median']:.0f} MHz ({clock['min']:.0f}-{clock['max']:.0f}), "
            f"recorded at {clock['rows']} of {clock['rows']} rows") in text, text
    # inspect and the HTML report state the held-out errors and the repeatability alike.
    held_line = (f"{experts['held_out']['count']} points, |error| median "
                 f"{100 * experts['held_out']['median_abs_relative_error']:.2f}%, p95 "
                 f"{100 * experts['held_out']['p95_abs_relative_error']:.2f}%, max "
                 f"{100 * experts['held_out']['max_abs_relative_error']:.2f}%")
    repeat_line = (f"{repeatability['count']} held-out points measured again as grid rows, "
                   "|grid - held-out| median 0.00%, max 0.00% (no interpolation)")
    assert f"held-out {held_line} (tolerance" in text and f"repeatability: {repeat_line}" in text, text
    assert (f"{repeat_line}\n        on the same device: {repeatability['count']} points, median 0.00%, "
            "max 0.00%\n      most apart ") in text, text
    assert f"interpolated within its launch waves: {len(by_waves['same_waves'])} points" in text and \
        "interpolated across a launch-wave step: no points" in text, text
    page_path = os.path.join(tmp, "report.html")
    run([HARNESS, "report", bundle, "--out", page_path])
    page = open(page_path).read()
    assert f'<p class="fidelity">experts held-out: {held_line}; repeatability: {repeat_line}</p>' in page, page
    planned = entry(bundle)["contract"]["grids"]["experts"]["points"]
    assert experts["refinement"]["added_points"] >= planned, "refinement added less than the plan"
    # The evaluations refinement made are in the file; the last one is what the bundle says.
    with h5py.File(os.path.join(ref_root, "acquisitions/staircase/acquisition.h5"), "r") as f:
        evaluations = [f["fidelity"][f"evaluation_{n}"][()].tobytes().decode()
                       for n in range(len(f["fidelity"]))]
    assert len(evaluations) == experts["refinement"]["stages"] + 1, len(evaluations)
    final = {t["component"]: t["fidelity"] for t in json.loads(evaluations[-1])["tables"]}
    for key in ("count", "median_abs_relative_error", "p95_abs_relative_error", "max_abs_relative_error"):
        assert math.isclose(final["experts"]["held_out"][key], experts["held_out"][key], rel_tol=1e-9), key
    assert final["experts"]["refinement"] == experts["refinement"]
    first = {t["component"]: t["fidelity"] for t in json.loads(evaluations[0])["tables"]}
    assert first["experts"]["held_out"]["max_abs_relative_error"] > 0.02, "nothing to refine"
    # Before refinement the planned grid leaves wave steps between its columns, and the points
    # interpolated across one are where it misses most.
    split = first["experts"]["held_out"]["by_waves"]
    print("first evaluation by waves:", {k: (v["count"], v["max_abs_relative_error"]) for k, v in split.items()})
    assert split["across_waves"]["count"] > 0 and \
        split["across_waves"]["max_abs_relative_error"] > split["same_waves"]["max_abs_relative_error"], split
    reference_cells = cell_rounds(os.path.join(ref_root, "acquisitions/staircase/acquisition.h5"))
    assert any(".stage" in c for c in reference_cells), "no refinement stage cells in the file"

    # `plan --campaign` previews the stage acquire declares next: with the cells of a stage and
    # of every later one taken out of a copy of the file, the campaign stands where that stage was
    # derived, and the preview must name exactly its points. The stage is the last whose line
    # says it bracketed launch-wave steps (the model declares its waves): the same brackets too.
    stage_lines = {int(m.group(1)): m.group(0) for m in
                   re.finditer(r"refinement stage (\d+) of \S+ (\w+): [^\n]*", p.stderr)}
    bracketed = {int(m.group(1)): int(m.group(2)) for m in re.finditer(
        r"refinement stage (\d+) of \S+ experts: [^\n]*; (\d+) misses bracketed at launch-wave steps", p.stderr)}
    stage = max(bracketed)
    preview_dir = os.path.join(tmp, "preview")
    shutil.copytree(os.path.join(ref_root, "acquisitions/staircase"), preview_dir)
    declared = collections.defaultdict(set)  # (component, role) -> points of that stage
    with h5py.File(os.path.join(preview_dir, "acquisition.h5"), "r+") as f:
        for name in list(f["cells"]):
            info = json.loads(f["cells"][name].attrs["cell"])
            if info["stage"] == stage:
                declared[(info["component"], info["role"])].update(
                    tuple(pt) for pt in f["cells"][name]["points"][()].tolist())
            if info["stage"] >= stage:
                del f["cells"][name]
    preview = json.loads(run([HARNESS, "plan", JOB, "--campaign", preview_dir, "--format", "json"]).stdout)
    got = {n["table"].split()[-1]: n for n in preview["campaign"]["left"]["next_stage"]}
    assert set(got) == {c for c, _ in declared}, (got, dict(declared))
    for component, n in got.items():
        assert n["stage"] == stage and not n["provisional"] and n["estimated_held_s"] > 0, n
        assert (n["grid_points"], n["held_out_points"], n["remeasured_points"]) == \
            (len(declared[(component, "grid")]), len(declared[(component, "held_out")]), 0), (n, stage_lines)
    assert got["experts"]["wave_brackets"] == bracketed[stage], (got["experts"], bracketed)
    text = run([HARNESS, "plan", JOB, "--campaign", preview_dir]).stdout
    assert (f"  next: refinement stage {stage} of tp1/dp1_ep1_rank0_sp0 experts: "
            f"+{len(declared[('experts', 'grid')])} grid points, 0 re-measured, "
            f"{len(declared[('experts', 'held_out')])} held-out") in text, text

    # The table as it stood then, published: row_clocks.csv records each experts row's declared
    # waves, and --explain says when an answer's vertices run different ones (a wave step lies
    # between them), with the table's held-out errors across such steps.
    early = os.path.join(tmp, "early")
    os.makedirs(os.path.join(early, "file"))  # the file alone: its campaign.json counts the cells taken out
    shutil.copy(os.path.join(preview_dir, "acquisition.h5"), os.path.join(early, "file"))
    run([HARNESS, "publish", os.path.join(early, "file", "acquisition.h5"), "--out-root", early, "--accept-failures"])
    early_bundle = os.path.join(early, "staircase")
    early_reader = harness_reader.ComponentTable(early_bundle, 1, 1)
    clocks = [r.split(",") for r in open(os.path.join(
        early_bundle, "tp1/moe_components/dp1_ep1_rank0_sp0/row_clocks.csv")).read().splitlines()[1:]]
    for c, n, a, m, *_, waves in clocks:
        want = f"{staircase_waves(int(a), int(m))};0" if c == "experts" and int(a) > 0 else ""
        assert waves == want, (c, n, a, m, waves, want)
    spanning, within = None, None
    for n, a in ((n, a) for n in range(2, 65) for a in range(K, min(E, n * K) + 1)):
        if spanning and within:
            break
        w = early_reader.mesh.locate((float(n), float(a), float(n * K)))
        if not w or (n, a, n * K) in early_reader.exact:
            continue
        kinds = {staircase_waves(int(early_reader.mesh.points[v][1]), int(early_reader.mesh.points[v][2]))
                 for v, weight in w if weight > harness_reader.NEGLIGIBLE_WEIGHT}
        if len(kinds) > 1 and not spanning:
            spanning = (n, a, n * K)
        if len(kinds) == 1 and not within:
            within = (n, a, n * K)
    assert spanning and within, (spanning, within)
    for q, spans in ((spanning, True), (within, False)):
        args = [HARNESS, "lookup", early_bundle, "--tp", "1", "--dp", "1", "--component", "experts", "--tokens",
                str(q[0]), "--activated", str(q[1]), "--assignments", str(q[2]), "--explain"]
        answer = json.loads(run(args + ["--format", "json"]).stdout)
        assert answer["spans_launch_wave_step"] is spans, (q, answer)
        assert all(v["launch_waves"] == [staircase_waves(v["activated_experts"], v["local_assignments"]), 0]
                   for v in answer["vertices"]), answer
        assert ("held_out_across_wave_steps" in answer) is spans, answer
        text = run(args).stdout
        assert ("the vertices run different launch waves: a wave step lies between them" in text) is spans, text
        assert re.search(r"waves \d+\+0", text), text

    # 2. SIGKILL during a refinement stage, then resume.
    root = os.path.join(tmp, "killed")
    h5 = os.path.join(root, "acquisitions/staircase/acquisition.h5")
    args = ["acquire", "--unverified", JOB, "--out-root", root, "--rounds", "4"]
    proc = subprocess.Popen(mpirun_cmd(2, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=MPI_ENV)
    for line in proc.stderr:
        if "refinement stage 2 " in line:
            break
    ranks = [int(x) for x in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                            text=True).stdout.split()]
    assert ranks, "no rank processes found under mpiexec"
    os.kill(ranks[-1], signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode != 0, "the job survived a killed rank"
    before = cell_rounds(h5)
    assert any(".stage1" in c for c in before), "the kill landed before refinement began"
    complete_before = sum(len(rounds) for _, rounds in before.values())

    p = run(mpirun_cmd(2, *args))
    assert f"resumed {complete_before}" in p.stdout, p.stdout
    after = cell_rounds(h5)
    check_complete(h5, 4)
    assert sum(len(rounds) for _, rounds in after.values()) > complete_before, "the kill came too late"
    for name, (_, rounds) in before.items():
        for r, samples in rounds.items():
            assert (after[name][1][r] == samples).all(), f"{name} round {r} was measured again"
    # The uninterrupted run (fewer rounds, same modeled times) refined the same way.
    assert sorted(after) == sorted(reference_cells), (sorted(after), sorted(reference_cells))
    for name, (points, _) in after.items():
        assert points == reference_cells[name][0], f"{name}: points differ from the uninterrupted run"
    assert table(os.path.join(root, "staircase")) == table(bundle), "tables differ"
    # 3. The gate's switch between close rows.
    close_job = os.path.join(tmp, "close-rows.yaml")
    with open(close_job, "w") as f:
        f.write(open(JOB).read().replace(
            "  mode: NONE\n", "  mode: FULL_AND_PIECEWISE\n  capture_sizes: [8, 16, 24, 32, 40, 48, 56, 64]\n"))
    close_root = os.path.join(tmp, "close")
    run(mpirun_cmd(1, "acquire", "--unverified", close_job, "--components", "gate_routing",
                   "--out-root", close_root))
    close = os.path.join(close_root, "staircase")
    close_rows = sorted(int(r.split(",")[2]) for r in table(close).splitlines()[1:])
    assert {40, 48} <= set(close_rows), close_rows
    assert max(n for n in close_rows if n <= 44) == 44 and min(n for n in close_rows if n > 44) == 45, close_rows
    gate = experts_fidelity(close)["components"]["gate_routing"]
    assert gate["refinement"]["kernel_changes"] == [] and gate["refinement"]["added_points"] >= 2, gate["refinement"]
    for n, got in zip(range(1, 65), lookup_many(close, 1, 1, [("gate_routing", n) for n in range(1, 65)])):
        want = staircase_time_us("gate_routing", n)
        assert abs(got - want) <= 1e-3 * want, (n, got, want)
print(f"ok: staircase resolved (balanced worst {worst:.2%}, +{experts['refinement']['added_points']} points); "
      f"refinement resumed after a kill with {complete_before} cell rounds kept")
