"""tools/gpu-check.sh's ab step without a GPU: stand-in `harness` binaries (one per build
directory) write bench CSVs whose times follow the build and the $SPEED the arm's environment
sets. The step must run the arms alternating A B A B, give each arm its own environment and
build, compare them with tools/bench-ab.py (B / A; each arm's steps with $AB_STEPS_FROM), and fail
when a bench fails while still running the others."""
import os
import tempfile

from harness_test_lib import gpu_check, write_executable

FAKE = """#!/usr/bin/env python3
# Stand-in for `harness bench experts [options] --csv FILE`: two points at BASE_US x $SPEED;
# records "<build> <speed> <options>" per call in $ORDER_FILE and exits 1 on call $FAIL_CALL.
import os, sys
args = sys.argv[1:]
assert args[:2] == ["bench", "experts"], args
path = args[args.index("--csv") + 1]
speed = float(os.environ.get("SPEED", "1"))
with open(os.environ["ORDER_FILE"], "a") as f:
    f.write(f"BUILD {speed} {' '.join(args[2:args.index('--csv')])}\\n")
calls = len(open(os.environ["ORDER_FILE"]).read().splitlines())
with open(path, "w") as f:
    f.write("component,model,backend,tokens,activated,assignments,median_us\\n")
    for n, a in ((1, 8), (2, 16)):
        f.write(f"experts,qwen3-30b-a3b,native,{n},{a},{8 * n},{BASE_US * n * speed}\\n")
sys.exit(1 if os.environ.get("FAIL_CALL") == str(calls) else 0)
"""


def make_build(root, name, base_us):
    write_executable(os.path.join(root, name, "harness", "harness"),
                     FAKE.replace("BUILD", name).replace("BASE_US", str(base_us)))
    return os.path.join(root, name)


with tempfile.TemporaryDirectory() as tmp:
    base = make_build(tmp, "base", 20.0)
    other = make_build(tmp, "other", 25.0)

    # One build, two environments: B runs at 0.9 of A's time; the arms alternate A B A B and each
    # gets its own environment and the bench options.
    order = os.path.join(tmp, "order-env")
    out = os.path.join(tmp, "env")
    p = gpu_check(base, out, "ab", ORDER_FILE=order, AB_ENV_A="SPEED=1.0", AB_ENV_B="SPEED=0.9",
                  AB_ARGS="--tokens 1,2")
    assert p.returncode == 0 and "== ab ok" in p.stdout, (p.stdout, p.stderr)
    assert open(order).read().splitlines() == ["base 1.0 --tokens 1,2", "base 0.9 --tokens 1,2"] * 2
    log = open(os.path.join(out, "ab.log")).read()
    assert "experts qwen3-30b-a3b native N=1 A=8 M=8: B/A 0.900" in log, log
    assert "experts qwen3-30b-a3b native N=2 A=16 M=16: B/A 0.900" in log, log
    assert all(os.path.exists(os.path.join(out, f"ab_{arm}{run}.csv")) for arm in "ab" for run in (1, 2))

    # AB_STEPS_FROM: each arm's steps between neighbouring N (N = 1 -> 2 doubles the time).
    p = gpu_check(base, os.path.join(tmp, "steps"), "ab", ORDER_FILE=os.path.join(tmp, "order-steps"),
                  AB_ENV_B="SPEED=0.9", AB_STEPS_FROM="1")
    assert p.returncode == 0, (p.stdout, p.stderr)
    log = open(os.path.join(tmp, "steps", "ab.log")).read()
    assert ("B steps experts qwen3-30b-a3b native: 2 points from N=1: 1 of 1 neighbours over 2 %, 1 over 5 %, "
            "largest 100.0 % (N=1 to 2)") in log, log
    assert "steps" not in open(os.path.join(out, "ab.log")).read()

    # Two builds (AB_BUILD), no environment: B / A is their base times' ratio.
    order = os.path.join(tmp, "order-build")
    out = os.path.join(tmp, "build")
    p = gpu_check(base, out, "ab", ORDER_FILE=order, AB_BUILD=other)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert [line.split()[0] for line in open(order).read().splitlines()] == ["base", "other"] * 2
    assert "N=1 A=8 M=8: B/A 1.250" in open(os.path.join(out, "ab.log")).read()

    # The third bench (A's second run) fails: the fourth still runs, and the step fails.
    order = os.path.join(tmp, "order-fail")
    p = gpu_check(base, os.path.join(tmp, "fail"), "ab", ORDER_FILE=order, FAIL_CALL="3")
    assert p.returncode != 0 and "== ab FAILED" in p.stdout, (p.stdout, p.stderr)
    assert len(open(order).read().splitlines()) == 4
print("ok")
