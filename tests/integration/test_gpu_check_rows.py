"""tools/gpu-check.sh's rows step and tools/rows-remeasured.py without a GPU. A stand-in `harness`
re-measures four experts table rows (two measured on device #0, two on #1) and one gate_routing row:
validate's runs find the rows of #0 1 % slower than the table and those of #1 3 % faster (its first
run exits 3, a held-out miss, which the step must not take for a failure), and the bench measures
every point 0.5 % above validate. The step must run validate $ROWS_RUNS times with $ROWS_COUNT and
$ROWS_SEED, bench each experts row (A > 0) once per run, and fail where validate fails otherwise;
the tool must give each device's offset and the protocols' difference, and refuse every input it
cannot compare, naming the file."""
import json
import os
import subprocess
import sys
import tempfile

from harness_test_lib import SOURCE_DIR, gpu_check, write_executable

ROWS = {(64, 32, 512): (100.0, 0), (256, 64, 2048): (200.0, 0), (1024, 128, 8192): (400.0, 1),
        (4096, 100, 32768): (800.0, 1)}
OFFSET = {0: 1.01, 1: 0.97}

FAKE = """#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
with open(os.environ["CALLS_FILE"], "a") as f:
    f.write(" ".join(args) + "\\n")
rows = {tuple(json.loads(k)): v for k, v in json.loads(os.environ["ROWS_JSON"]).items()}
offset = {int(k): v for k, v in json.loads(os.environ["OFFSET_JSON"]).items()}
if args[0] == "validate" and os.environ.get("VALIDATE_FAILS"):
    sys.exit("harness validate: error: the bundle is broken")
if args[0] == "validate":
    points = [{"point": list(p), "table_us": t, "measured_us": t * offset[d], "table_row_devices": [d]}
              for p, (t, d) in rows.items()]
    print(json.dumps({"entries": [{"device": "GPU-now", "table_devices": ["GPU-zero", "GPU-one"],
                                   "components": [
        {"component": "gate_routing", "table_rows": {"points": [
            {"point": [64, 0, 0], "table_us": 7.0, "measured_us": 7.0, "table_row_devices": [0]}]}},
        {"component": "experts", "table_rows": {"points": points}}]}]}))
    calls = open(os.environ["CALLS_FILE"]).read().count("validate")
    sys.exit(3 if calls == 1 else 0)
if args[:2] == ["bench", "experts"]:
    n, a = int(args[args.index("--tokens") + 1]), int(args[args.index("--activated") + 1])
    t, d = rows[(n, a, 8 * n)]
    print("experts qwen3-30b-a3b N=%d native: %.1f us" % (n, t))  # progress text, not CSV
    with open(args[args.index("--csv") + 1], "w") as f:
        f.write("component,model,backend,tokens,activated,assignments,median_us\\n")
        f.write("experts,qwen3-30b-a3b,native,%d,%d,%d,%r\\n" % (n, a, 8 * n, t * offset[d] * 1.005))
    sys.exit(0)
sys.exit(f"unexpected call {args}")
"""

TOOL = os.path.join(SOURCE_DIR, "tools/rows-remeasured.py")


def tool(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    build = os.path.join(tmp, "build")
    write_executable(os.path.join(build, "harness", "harness"), FAKE)
    out = os.path.join(tmp, "out")
    calls = os.path.join(tmp, "calls")
    env = dict(CALLS_FILE=calls, ROWS_JSON=json.dumps({json.dumps(list(k)): v for k, v in ROWS.items()}),
               OFFSET_JSON=json.dumps(OFFSET))

    # No bundle yet: the step says so and measures nothing.
    p = gpu_check(build, out, "rows", **env)
    assert p.returncode != 0 and "no bundle at" in open(os.path.join(out, "rows.log")).read(), p.stdout
    assert not os.path.exists(calls)

    bundle = os.path.join(out, "acquire", "qwen3-30b-a3b")
    os.makedirs(bundle)
    open(os.path.join(bundle, "meta.yaml"), "w").write("entries: []\n")
    p = gpu_check(build, out, "rows", **env)
    assert p.returncode == 0 and "== rows ok" in p.stdout, (p.stdout, p.stderr)
    made = open(calls).read().splitlines()
    validates = [c for c in made if c.startswith("validate")]
    assert len(validates) == 3 and all("--table-rows 32 " in c and "--seed 20261205 " in c and
                                       "--routing balanced" in c for c in validates), validates
    benches = [c for c in made if c.startswith("bench")]
    assert len(benches) == 3 * len(ROWS), benches  # every experts row, each run; not the gate's
    log = open(os.path.join(out, "rows.log")).read()
    assert "4 experts rows re-measured on GPU-now: 3 validate runs, 3 bench runs" in log, log
    assert ("rows of #0 (GPU-zero): 2, this GPU against the table: validate signed median +1.00% "
            "(+1.00% … +1.00%); bench signed median +1.51%") in log, log
    assert "rows of #1 (GPU-one): 2, this GPU against the table: validate signed median -3.00%" in log, log
    assert "bench against validate, the same rows: signed median +0.50% (+0.50% … +0.50%)" in log, log
    assert "run to run (largest / smallest - 1): validate median 0.00%" in log, log
    for i in (1, 2, 3):
        assert os.path.exists(os.path.join(out, f"rows-validate-{i}.json"))
        bench_rows = open(os.path.join(out, f"rows-bench-{i}.csv")).read().splitlines()
        assert bench_rows[0].startswith("component,") and len(bench_rows) == 1 + len(ROWS), bench_rows

    # The count, seed and runs as given; the earlier call's runs are not compared with these.
    os.remove(calls)
    p = gpu_check(build, out, "rows", ROWS_RUNS="2", ROWS_COUNT="8", ROWS_SEED="7", **env)
    assert p.returncode == 0, (p.stdout, p.stderr)
    validates = [c for c in open(calls).read().splitlines() if c.startswith("validate")]
    assert len(validates) == 2 and all("--table-rows 8 --routing balanced --seed 7 " in c + " "
                                       for c in validates), validates
    assert not os.path.exists(os.path.join(out, "rows-validate-3.json"))
    assert "2 validate runs, 2 bench runs" in open(os.path.join(out, "rows.log")).read()

    # A validate that fails (not a held-out miss) fails the step, and nothing is benched.
    os.remove(calls)
    p = gpu_check(build, out, "rows", VALIDATE_FAILS="1", **env)
    assert p.returncode != 0 and "== rows FAILED" in p.stdout, p.stdout
    assert "the bundle is broken" in open(os.path.join(out, "rows.log")).read()
    assert not any(c.startswith("bench") for c in open(calls).read().splitlines())
    p = gpu_check(build, out, "rows", ROWS_RUNS="2", **env)  # the runs the checks below read
    assert p.returncode == 0, (p.stdout, p.stderr)

    # The tool's refusals, each naming the file.
    v1, v2 = (os.path.join(out, f"rows-validate-{i}.json") for i in (1, 2))
    other = os.path.join(tmp, "other.json")
    run = json.load(open(v1))
    run["entries"][0]["components"][1]["table_rows"]["points"].pop()
    json.dump(run, open(other, "w"))
    p = tool("--validate", v1, other)
    assert p.returncode == 1 and f"{other}: other rows than {v1}" in p.stderr, p.stderr
    short = os.path.join(tmp, "short.csv")
    open(short, "w").write("\n".join(open(os.path.join(out, "rows-bench-1.csv")).read().splitlines()[:-1]) + "\n")
    p = tool("--validate", v1, v2, "--bench", short)
    assert p.returncode == 1 and f"{short}: no bench point at N=4096 A=100 M=32768" in p.stderr, p.stderr
    run["entries"][0]["components"][1]["table_rows"]["points"] = []
    json.dump(run, open(other, "w"))
    p = tool("--points", other)
    assert p.returncode == 1 and "no experts table rows re-measured" in p.stderr, p.stderr
    p = tool("--points", v1)
    assert p.stdout.split("\n")[:4] == ["64 32", "256 64", "1024 128", "4096 100"], p.stdout
    # A run on another GPU, two entries with experts rows, a row without its table time, a file
    # that is not JSON, a bench file without its columns, and neither mode given.
    run = json.load(open(v1))
    run["entries"][0]["device"] = "GPU-other"
    json.dump(run, open(other, "w"))
    p = tool("--validate", v1, other)
    assert p.returncode == 1 and f"{other}: measured on GPU-other, {v1} on GPU-now: one GPU per comparison" \
        in p.stderr, p.stderr
    run["entries"].append(run["entries"][0])
    json.dump(run, open(other, "w"))
    p = tool("--points", other)
    assert p.returncode == 1 and f"{other}: several entries with experts rows" in p.stderr, p.stderr
    run["entries"].pop()
    del run["entries"][0]["components"][1]["table_rows"]["points"][0]["table_us"]
    json.dump(run, open(other, "w"))
    p = tool("--points", other)
    assert p.returncode == 1 and f"{other}: a table row without 'table_us'" in p.stderr, p.stderr
    open(other, "w").write("not json")
    p = tool("--points", other)
    assert p.returncode == 1 and p.stderr.startswith(f"rows-remeasured: {other}: "), p.stderr
    open(short, "w").write("component,tokens\nexperts,64\n")
    p = tool("--validate", v1, "--bench", short)
    assert p.returncode == 1 and f"{short}: no column activated" in p.stderr, p.stderr
    p = tool()
    assert p.returncode == 1 and "give --points or --validate" in p.stderr, p.stderr
print("ok")
