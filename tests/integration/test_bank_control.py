"""The B/2B weight-bank control end to end (docs/measurement.md, Protocol 6), on the staircase_model
test double with a bank effect at one token count (HARNESS_STAIRCASE_BANK_EFFECT_TOKENS,
kernels/staircase_backend.h): every experts forward at N = 16 on banks 2 and 3, which only the 2B
arm uses, takes 10 % longer, so each 2B chunk is 5 % slower than the B chunks beside it.

1. Exactly the grid points at N = 16 fail the control; each is measured again in fresh rounds of
   later stages until it has been measured 1 + fidelity.remeasure_limit times, and no more.
2. acquire publishes nothing without the acceptance flag and names the table and the reason;
   inspect lists the failed points by coordinates; publish --accept-failures records
   accepted-with-failures, lists exactly those points, and leaves them out of the table.
3. A value of the variable that is not a token count is refused with one clear error.
4. Unsteady runs (HARNESS_STAIRCASE_CLOCK_STEP_TOKENS: every experts forward at one token count
   after the workload's first 16 takes 10 % longer, both arms alike), with 12 forwards per arm
   (three chunks): the control passes them, inspect and the bundle count them, their misses are
   reported as within their runs' movement and not refined: the stage whose evaluation first
   finds such a miss adds exactly the grid points that stage adds without the step. (Later stages
   may differ: the step also moves grid rows that refinement adds at that token count, which the
   bundle then counts as unsteady.)"""
import collections
import json
import os
import re
import subprocess
import tempfile

import h5py
import yaml

from harness_test_lib import HARNESS, MPI_ENV, SOURCE_DIR, mpirun_cmd, run

JOB = os.path.join(SOURCE_DIR, "tests/data/staircase.yaml")
EFFECT_TOKENS = 16
REMEASURE_LIMIT = 2  # the job's default fidelity.remeasure_limit


def acquire(root, effect, job=JOB, variable="HARNESS_STAIRCASE_BANK_EFFECT_TOKENS", *options):
    env = dict(MPI_ENV, **({variable: effect} if effect else {}))
    return subprocess.run(mpirun_cmd(1, "acquire", "--unverified", job, "--out-root", root, *options),
                          capture_output=True, text=True, env=env, timeout=600)


def experts_points(h5, role, stage=None):
    """{(N, A, M)} of the experts cells of `role` (grid or held_out), of one stage or all."""
    with h5py.File(h5, "r") as f:
        return {tuple(p) for c in f["cells"].values()
                for info in [json.loads(c.attrs["cell"])]
                if info["component"] == "experts" and info["role"] == role
                and stage in (None, info["stage"])
                for p in c["points"][()].tolist()}


def grid_measurements(h5):
    """{(N, A, M): complete measurements in experts grid cells}."""
    times = collections.Counter()
    with h5py.File(h5, "r") as f:
        for cell in f["cells"].values():
            info = json.loads(cell.attrs["cell"])
            if info["component"] == "experts" and info["role"] == "grid" and cell["rounds_done"][()].all():
                times.update(tuple(p) for p in cell["points"][()].tolist())
    return times


with tempfile.TemporaryDirectory() as tmp:
    root = os.path.join(tmp, "out")
    p = acquire(root, str(EFFECT_TOKENS))
    assert p.returncode != 0, "published a table whose points failed B/2B"
    h5 = os.path.join(root, "acquisitions/staircase/acquisition.h5")
    assert not os.path.exists(os.path.join(root, "staircase", "meta.yaml"))

    # 1. Measured again, up to the limit, only where the effect is: the planned row N = 16 and the
    # columns refinement added to it (tiny: E = 8, k = 2, M = 2N).
    times = grid_measurements(h5)
    effect = {pt for pt in times if pt[0] == EFFECT_TOKENS}
    assert len(effect) >= 3, sorted(times)
    assert "nothing published" in p.stderr and \
        f"experts: {len(effect)} grid points failed the weight-bank control after every re-measure" in p.stderr, \
        p.stderr
    assert all(times[pt] == 1 + REMEASURE_LIMIT for pt in effect), {pt: times[pt] for pt in effect}
    assert all(t == 1 for pt, t in times.items() if pt not in effect and pt[0] < EFFECT_TOKENS), times

    # 2. Listed by inspect; published only when accepted, without those rows.
    text = run([HARNESS, "inspect", h5]).stdout
    listed = {tuple(json.loads(line.split("=", 1)[1].split("(")[0]))
              for line in text.splitlines() if "FAILED B/2B at (N, A, M)" in line}
    assert listed == effect, (listed, effect)
    run([HARNESS, "publish", h5, "--out-root", root, "--accept-failures"])
    meta = yaml.safe_load(open(os.path.join(root, "staircase", "meta.yaml")))
    (entry,) = meta["per_tp"][1]["moe_components"]["entries"]
    fid = entry["coverage"]["fidelity"]
    assert fid["status"] == "accepted-with-failures", fid["status"]
    assert {tuple(p) for p in fid["components"]["experts"]["failed_points"]} == effect, fid
    summary = entry["coverage"]["conditioning_summary"]
    assert summary["failed_points"] == len(effect), summary
    # The bank effect is the 2B arm's in every chunk, so no arm's chunks moved within a run.
    assert summary["unsteady_points"] == 0 and summary["max_run_spread"] == 0, summary
    assert "unsteady runs" not in text, text
    rows = open(os.path.join(root, "staircase", "tp1", entry["path"])).read().splitlines()[1:]
    published = {tuple(int(x) for x in r.split(",")[2:5]) for r in rows if r.startswith("experts,")}
    assert not published & effect and published, sorted(published)

    # 3. Bad input: one clear error, nothing measured.
    bad_root = os.path.join(tmp, "bad")
    p = acquire(bad_root, "16x")
    assert p.returncode != 0 and \
        'HARNESS_STAIRCASE_BANK_EFFECT_TOKENS must be a positive token count, not "16x"' in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(bad_root, "acquisitions/staircase/acquisition.h5"))

    # 4. A clock step mid-run at one held-out token count.
    job = yaml.safe_load(open(JOB))
    job["measurement"]["iterations"] = 12
    chunked = os.path.join(tmp, "chunked.yaml")
    yaml.safe_dump(job, open(chunked, "w"))
    steady_root, stepped_root = os.path.join(tmp, "steady"), os.path.join(tmp, "stepped")
    p = acquire(steady_root, None, chunked, "", "--accept-failures")
    assert p.returncode == 0, p.stderr
    steady_h5 = os.path.join(steady_root, "acquisitions/staircase/acquisition.h5")
    # The step goes where a planned held-out point lies between two planned rows whose interval
    # the first stage does not bisect without it: refining the stepped miss would change that
    # stage's grid (checked: with every miss refined, it does).
    planned_rows = sorted({pt[0] for pt in experts_points(steady_h5, "grid", 0)})
    first_stage_rows = {pt[0] for pt in experts_points(steady_h5, "grid", 1)}

    def bracket(n):
        return max(r for r in planned_rows if r < n), min(r for r in planned_rows if r > n)

    step_tokens = min(n for n in {pt[0] for pt in experts_points(steady_h5, "held_out", 0)}
                      if planned_rows[0] < n < planned_rows[-1] and n not in planned_rows
                      and not any(bracket(n)[0] < r < bracket(n)[1] for r in first_stage_rows))
    p = acquire(stepped_root, str(step_tokens), chunked, "HARNESS_STAIRCASE_CLOCK_STEP_TOKENS", "--accept-failures")
    assert p.returncode == 0, p.stderr
    first = re.search(r"refinement stage (\d+) of \S+ experts: [^\n]*misses within their runs' movement, "
                      r"not refined", p.stderr)
    assert first, p.stderr
    stage = int(first.group(1))
    stepped_h5 = os.path.join(stepped_root, "acquisitions/staircase/acquisition.h5")
    assert experts_points(stepped_h5, "grid", stage) == experts_points(steady_h5, "grid", stage), \
        f"stage {stage} refined a miss within its run's movement"
    text = run([HARNESS, "inspect", stepped_h5]).stdout
    assert "unsteady runs" in text and "unsteady runs" not in run([HARNESS, "inspect", steady_h5]).stdout, text
    meta = yaml.safe_load(open(os.path.join(stepped_root, "staircase", "meta.yaml")))
    (entry,) = meta["per_tp"][1]["moe_components"]["entries"]
    summary = entry["coverage"]["conditioning_summary"]
    # The table's rows at the stepped token count (those refinement added there, if any) are its
    # unsteady points, each having moved by the step; no other row moved.
    rows = open(os.path.join(stepped_root, "staircase", "tp1", entry["path"])).read().splitlines()[1:]
    stepped_rows = sum(1 for r in rows if r.startswith("experts,") and int(r.split(",")[2]) == step_tokens)
    assert summary["unsteady_points"] == stepped_rows and summary["failed_points"] == 0, (summary, stepped_rows)
    assert abs(summary["max_run_spread"] - (0.10 if stepped_rows else 0.0)) < 1e-6, summary
    # The evaluation that declared that stage (the file keeps each) counts the miss as such.
    with h5py.File(stepped_h5, "r") as f:
        evaluation = json.loads(f["fidelity"][f"evaluation_{stage - 1}"][()].tobytes())
    (experts,) = [t["fidelity"] for t in evaluation["tables"] if t["component"] == "experts"]
    assert experts["held_out"]["misses_within_run_movement"] >= 1, experts["held_out"]
    print(f"ok: a clock step at N = {step_tokens}: {summary['unsteady_points']} unsteady points, stage "
          f"{stage} left {experts['held_out']['misses_within_run_movement']} misses within their runs' "
          "movement and added the grid it adds without the step")

    # 5. validate under the same step: its misses at the stepped token count are within their
    # runs' movement and say so; a point's movement is the most its own run or a run of a row its
    # prediction weighs moved (row_clocks.csv), and only misses are classed.
    steady_bundle = os.path.join(steady_root, "staircase")
    args = [HARNESS, "validate", steady_bundle, "--points", "24", "--seed", "5", "--table-rows", "0"]
    drawn = json.loads(run(args + ["--format", "json"], check=False).stdout)
    (comps,) = [e["components"] for e in drawn["entries"]]
    (experts,) = [c for c in comps if c["component"] == "experts"]
    validate_step = experts["points"][len(experts["points"]) // 2]["point"][0]
    env = dict(os.environ, HARNESS_STAIRCASE_CLOCK_STEP_TOKENS=str(validate_step))
    p = subprocess.run(args + ["--format", "json"], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode in (0, 3), p.stderr
    (comps,) = [e["components"] for e in json.loads(p.stdout)["entries"]]
    (experts,) = [c for c in comps if c["component"] == "experts"]
    (entry,) = yaml.safe_load(open(os.path.join(steady_bundle, "meta.yaml")))["per_tp"][1]["moe_components"]["entries"]
    table_dir = os.path.join(steady_bundle, "tp1", os.path.dirname(entry["path"]))
    row_spread = {tuple(int(x) for x in r.split(",")[1:4]): float(r.split(",")[6] or 0)
                  for r in open(os.path.join(table_dir, "row_clocks.csv")).read().splitlines()[1:]
                  if r.startswith("experts,")}
    tolerance, misses, within = experts["tolerance"], 0, 0
    for pt in experts["points"]:
        n, a, m = pt["point"]
        explain = json.loads(run([HARNESS, "lookup", steady_bundle, "--tp", "1", "--dp", "1", "--component",
                                  "experts", "--tokens", str(n), "--activated", str(a), "--assignments", str(m),
                                  "--explain", "--format", "json"]).stdout)
        own = 0.10 if n == validate_step else 0.0  # kernels/staircase_backend.h kStaircaseClockStep
        want = max([own] + [row_spread[(v["tokens"], v["activated_experts"], v["local_assignments"])]
                            for v in explain.get("vertices", [])])
        assert abs(pt["run_spread"] - want) < 1e-6, (pt, want)
        missed = pt["relative_error"] > tolerance
        assert ("miss_within_run_movement" in pt) == missed, pt
        if missed:
            misses += 1
            assert pt["miss_within_run_movement"] == (pt["relative_error"] <= pt["run_spread"]), pt
            within += pt["miss_within_run_movement"]
    stepped = [pt for pt in experts["points"] if pt["point"][0] == validate_step]
    assert any(pt.get("miss_within_run_movement") for pt in stepped), stepped
    assert (experts["misses"], experts["misses_within_run_movement"]) == (misses, within), experts
    text = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600).stdout
    assert f"above the tolerance: {misses} points; within their runs' movement: {within} of them" in text, text
    assert "(within its runs' movement, 10.000%)" in text, text
    print(f"ok: validate with a clock step at N = {validate_step}: {within} of {misses} misses within their runs' "
          "movement")

print("ok")
