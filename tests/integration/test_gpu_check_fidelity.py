"""tools/gpu-check.sh's fidelity step without a GPU: a stand-in `harness` benches the components
and token counts it is given (time 10 + N / 100 µs), answers lookups 0.5 % above that, has no clocks
to report and validates everything. The step must draw $FIDELITY_DRAWS token counts up to
$FIDELITY_MAX_TOKENS with $FIDELITY_SEED, bench $FIDELITY_COMPONENTS (default experts and
gate_routing), compare every component with tools/bench-lookup-compare.py, run validate with both
routings, and refuse to start without the acquire step's bundle."""
import os
import subprocess
import sys
import tempfile

from harness_test_lib import SOURCE_DIR, gpu_check, write_executable

FAKE = """#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
with open(os.environ["CALLS_FILE"], "a") as f:
    f.write(" ".join(args) + "\\n")
us = lambda n: 10 + n / 100
if args[:2] == ["bench", "experts"]:
    components = args[args.index("--components") + 1].split(",")
    tokens = [int(n) for n in args[args.index("--tokens") + 1].split(",")]
    with open(args[args.index("--csv") + 1], "w") as f:
        f.write("component,model,backend,tokens,activated,assignments,median_us\\n")
        for c in components:
            for n in tokens:
                a, m = (min(128, n), 8 * n) if c == "experts" else (0, 0)
                f.write(f"{c},qwen3-30b-a3b,native,{n},{a},{m},{us(n)}\\n")
elif args[0] == "lookup":
    for line in sys.stdin:
        n = int(line.split()[1])
        print(json.dumps({"time_us": 1.005 * us(n), "exact": False}))
elif args[0] == "inspect":
    print(json.dumps({"entries": []}))
elif args[0] != "validate":
    sys.exit(f"unexpected call {args}")
"""


def draw(count, seed, max_tokens):
    p = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "tools/bench-lookup-compare.py"),
                        "--draw-tokens", str(count), "--seed", str(seed), "--max-tokens", str(max_tokens)],
                       capture_output=True, text=True, check=True)
    return p.stdout.strip()


with tempfile.TemporaryDirectory() as tmp:
    build = os.path.join(tmp, "build")
    write_executable(os.path.join(build, "harness", "harness"), FAKE)
    out = os.path.join(tmp, "out")
    calls = os.path.join(tmp, "calls")

    # No bundle yet: the step says so and fails without benching.
    p = gpu_check(build, out, "fidelity", CALLS_FILE=calls)
    assert p.returncode != 0 and "no bundle at" in open(os.path.join(out, "fidelity.log")).read(), p.stdout
    assert not os.path.exists(calls)

    bundle = os.path.join(out, "acquire", "qwen3-30b-a3b")
    os.makedirs(bundle)
    open(os.path.join(bundle, "meta.yaml"), "w").write("entries: []\n")

    # The defaults: 23 N from 2 to 8000 with seed 20261201, both components compared.
    p = gpu_check(build, out, "fidelity", CALLS_FILE=calls)
    assert p.returncode == 0 and "== fidelity ok" in p.stdout, (p.stdout, p.stderr)
    bench = open(calls).read().splitlines()[0]
    assert f"--components experts,gate_routing --tokens {draw(23, 20261201, 8000)} " in bench, bench
    log = open(os.path.join(out, "fidelity.log")).read()
    for component in ("experts", "gate_routing"):
        assert f"{component} all: 23 points, |error| median 0.50%, p95 0.50%, max 0.50%" in log, log
    validates = [c for c in open(calls).read().splitlines() if c.startswith("validate")]
    assert [c.split()[-1] for c in validates] == ["balanced", "random"], validates

    # A gate-only acquisition's check: the components, count, range and seed as given.
    os.remove(calls)
    p = gpu_check(build, out, "fidelity", CALLS_FILE=calls, FIDELITY_COMPONENTS="gate_routing",
                  FIDELITY_DRAWS="60", FIDELITY_MAX_TOKENS="8192", FIDELITY_SEED="20261203")
    assert p.returncode == 0, (p.stdout, p.stderr)
    bench = open(calls).read().splitlines()[0]
    assert f"--components gate_routing --tokens {draw(60, 20261203, 8192)} " in bench, bench
    log = open(os.path.join(out, "fidelity.log")).read()
    assert log.count("gate_routing all: 60 points") == 1 and "experts all: 60" not in log, log
    rows = open(os.path.join(out, "fidelity-compare.csv")).read().splitlines()
    assert len(rows) == 61, len(rows)
print("ok")
