"""tools/step-rows-check.py on bench CSVs written here with a known staircase: the gate's time is
linear in N inside bands of 100 rows and jumps by 1 µs at each multiple of 100. A table with rows
on both sides of every step predicts every other N exactly; one with the endpoints alone misses by
the steps and fails the bounds; a second run 2 % slower shows as the signed median; the error
paths (a step row the table lacks, experts, a file that is not a bench CSV)."""
import csv
import os
import subprocess
import sys
import tempfile

from harness_test_lib import SOURCE_DIR

TOOL = [sys.executable, os.path.join(SOURCE_DIR, "tools/step-rows-check.py")]


def time_us(n, scale=1.0):
    return scale * (5.0 + 0.001 * n + 1.0 * ((n - 1) // 100))


def write(path, tokens, scale=1.0, component="gate_routing"):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["component", "model", "backend", "tokens", "median_us", "configuration"])
        for n in tokens:
            w.writerow([component, "qwen3-30b-a3b", "native", n, f"{time_us(n, scale):.6f}", ""])


def check(*args):
    return subprocess.run(TOOL + list(args), capture_output=True, text=True)


tokens = sorted(set(range(10, 1001, 10)) | {b + 1 for b in range(100, 1000, 100)})
with tempfile.TemporaryDirectory() as tmp:
    run1, run2 = os.path.join(tmp, "run1.csv"), os.path.join(tmp, "run2.csv")
    write(run1, tokens)
    write(run2, tokens, scale=1.02)

    # Rows 10, 1000 and b, b + 1 of each step: every other point lies on its band's line.
    p = check("--bench", run1, "--every", "100", "--split", "500")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "a table of 20 rows from 10 to 1000" in p.stdout, p.stdout
    assert "gate_routing all: 89 points, |error| median 0.00%, p95 0.00%, max 0.00%" in p.stdout, p.stdout
    assert "gate_routing 0 <= N < 500: 44 points" in p.stdout and "500 <= N < inf: 45 points" in p.stdout, p.stdout

    # The same steps given one by one agree with --every.
    q = check("--bench", run1, "--steps", ",".join(str(b) for b in range(100, 1000, 100)))
    assert q.returncode == 0 and q.stdout.splitlines()[:2] == p.stdout.splitlines()[:2], (q.stdout, p.stdout)

    # The endpoints alone: the line from 5.01 to 15.0 µs misses N = 100 (5.1 µs measured) by
    # (5.01 + 9.99 * 90 / 990 - 5.1) / 5.1 = +16.0 %, the worst point (next to the first step).
    p = check("--bench", run1)
    assert p.returncode == 3 and "outside the bounds (median, p95, max)" in p.stdout, (p.stdout, p.stderr)
    assert "a table of 2 rows" in p.stdout and "max 16.04% (N=100)" in p.stdout, p.stdout

    # A table from another run 2 % slower: every error is +2 %, the signed median says so.
    p = check("--bench", run1, "--table", run2, "--every", "100", "--bounds", "0.03,0.03,0.03")
    assert p.returncode == 0 and "max 2.00%" in p.stdout and "signed median +2.00%" in p.stdout, p.stdout

    # Errors: a step whose rows the table lacks, the experts component, a CSV of another kind.
    p = check("--bench", run1, "--every", "50")
    assert p.returncode == 1 and "the table has no row at N=51 (and 9 more)" in p.stderr, p.stderr
    p = check("--bench", run1, "--component", "experts")
    assert p.returncode == 1 and "use tools/bench-lookup-compare.py" in p.stderr, p.stderr
    other = os.path.join(tmp, "other.csv")
    open(other, "w").write("a,b\n1,2\n")
    p = check("--bench", other)
    assert p.returncode == 1 and "no column component" in p.stderr, p.stderr
    p = check("--bench", run1, "--steps", "1x")
    assert p.returncode == 1 and "--steps must be comma-separated integers" in p.stderr, p.stderr
    p = check("--bench", run1, "--every", "-100")
    assert p.returncode == 1 and "--every must not be negative" in p.stderr, p.stderr
print("ok")
