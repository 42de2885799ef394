"""tools/bench-ab.py on bench CSVs written here (the bench's columns) with known times: the
per-point and per-component ratios follow from them, the runs pair in order, --steps-from counts
the steps between neighbouring token counts of each arm, and its error paths (unpaired runs, a
point missing from one run of a pair, a repeated point, an unreadable file)."""
import csv
import os
import subprocess
import sys
import tempfile

from harness_test_lib import SOURCE_DIR, on_gpu

TOOL = [sys.executable, os.path.join(SOURCE_DIR, "tools/bench-ab.py")]
HEADER = ["component", "model", "backend", "tokens", "activated", "assignments", "banks", "median_us",
          "min_us", "max_us"]


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for component, n, a, us in rows:
            w.writerow([component, "qwen3-30b-a3b", "native", n, a, n * 8 if a else 0, 2, us, us, us])


def ab(*args):
    return subprocess.run(TOOL + list(args), capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    p = lambda name: os.path.join(tmp, name)
    base = [("experts", 1024, 9, 250.0), ("experts", 1024, 8, 200.0), ("gate_routing", 1024, 0, 10.0)]
    # Variant: 0.9x at A = 9 in run 1, 0.8x in run 2 (median 0.85); 1.0x and 1.1x at A = 8 (1.05).
    write(p("a1.csv"), base)
    write(p("a2.csv"), base)
    write(p("b1.csv"), [("experts", 1024, 9, 225.0), ("experts", 1024, 8, 200.0), ("gate_routing", 1024, 0, 10.0)])
    write(p("b2.csv"), [("experts", 1024, 9, 200.0), ("experts", 1024, 8, 220.0), ("gate_routing", 1024, 0, 11.0)])
    r = ab("--a", p("a1.csv"), p("a2.csv"), "--b", p("b1.csv"), p("b2.csv"), "--out", p("ab.csv"))
    assert r.returncode == 0, r.stderr
    assert "experts qwen3-30b-a3b native N=1024 A=9 M=8192: B/A 0.850 (runs 0.800-0.900)" in r.stdout, r.stdout
    assert "experts qwen3-30b-a3b native N=1024 A=8 M=8192: B/A 1.050 (runs 1.000-1.100)" in r.stdout, r.stdout
    assert "experts: 2 points, B/A median 0.950, min 0.850, max 1.050" in r.stdout, r.stdout
    assert "gate_routing: 1 points, B/A median 1.050, min 1.050, max 1.050" in r.stdout, r.stdout
    # A=8 is listed before A=9 (points in numeric order).
    assert r.stdout.index("A=8 M") < r.stdout.index("A=9 M"), r.stdout
    with open(p("ab.csv"), newline="") as f:
        rows = {(x["tokens"], x["activated"]): x for x in csv.DictReader(f)}
    assert rows[("1024", "9")]["ratio_run1"] == "0.900000" and rows[("1024", "9")]["ratio_run2"] == "0.800000", rows
    # Pairing follows the order given: swapping the variant runs swaps the per-run ratios only.
    r = ab("--a", p("a1.csv"), p("a2.csv"), "--b", p("b2.csv"), p("b1.csv"))
    assert "A=9 M=8192: B/A 0.850 (runs 0.800-0.900)" in r.stdout, r.stdout

    # Steps between neighbouring N per arm, each point at its median over the arm's runs: the
    # baseline's gate steps 10 -> 11 (+10 %) -> 11.11 (+1 %) -> 10.6656 (-4 %); the variant is flat.
    gate_a = [(4096, 10.0), (4097, 11.0), (4098, 11.11), (4104, 10.6656)]
    write(p("ga1.csv"), [("gate_routing", n, 0, us) for n, us in gate_a] + [("gate_routing", 8, 0, 5.0)])
    write(p("ga2.csv"), [("gate_routing", n, 0, us) for n, us in gate_a] + [("gate_routing", 8, 0, 5.0)])
    write(p("gb1.csv"), [("gate_routing", n, 0, 10.0) for n, _ in gate_a] + [("gate_routing", 8, 0, 9.0)])
    write(p("gb2.csv"), [("gate_routing", n, 0, 10.2) for n, _ in gate_a] + [("gate_routing", 8, 0, 9.0)])
    r = ab("--a", p("ga1.csv"), p("ga2.csv"), "--b", p("gb1.csv"), p("gb2.csv"), "--steps-from", "1000")
    assert r.returncode == 0, r.stderr
    assert ("A steps gate_routing qwen3-30b-a3b native: 4 points from N=4096: 2 of 3 neighbours over 2 %, "
            "1 over 5 %, largest 10.0 % (N=4096 to 4097)") in r.stdout, r.stdout
    assert ("B steps gate_routing qwen3-30b-a3b native: 4 points from N=4096: 0 of 3 neighbours over 2 %, "
            "0 over 5 %, largest 0.0 % (N=4098 to 4104)") in r.stdout, r.stdout  # N=8 is below 1000
    r = ab("--a", p("ga1.csv"), "--b", p("gb1.csv"), "--steps-from", "4104")
    assert "A steps gate_routing qwen3-30b-a3b native: 1 points, no neighbours" in r.stdout, r.stdout
    assert "steps" not in ab("--a", p("ga1.csv"), "--b", p("gb1.csv")).stdout

    assert "GPU not checked: the runs record none (device_uuid)" in \
        ab("--a", p("a1.csv"), "--b", p("b1.csv")).stdout

    # One GPU: said; runs of two GPUs, or one run without the column beside others with it, refused.
    r = ab("--a", on_gpu(p("a1.csv"), "GPU-a"), "--b", on_gpu(p("b1.csv"), "GPU-a"))
    assert r.returncode == 0 and "GPU GPU-a" in r.stdout, (r.stdout, r.stderr)
    r = ab("--a", on_gpu(p("a1.csv"), "GPU-a"), on_gpu(p("a2.csv"), "GPU-a"), "--b", on_gpu(p("b1.csv"), "GPU-a"),
           on_gpu(p("b2.csv"), "GPU-b"))
    assert r.returncode == 1 and "GPU-b-b2.csv ran on GPU-b, " + p("GPU-a-a1.csv") + " on GPU-a: compare runs " \
        "of one GPU" in r.stderr, r.stderr
    r = ab("--a", on_gpu(p("a1.csv"), "GPU-a"), "--b", p("b1.csv"))
    assert r.returncode == 1 and "b1.csv records no GPU (device_uuid)" in r.stderr, r.stderr

    # Errors.
    r = ab("--a", p("a1.csv"), "--b", p("b1.csv"), p("b2.csv"))
    assert r.returncode == 1 and "1 baseline runs but 2 variant runs" in r.stderr, r.stderr
    write(p("short.csv"), base[:2])
    r = ab("--a", p("a1.csv"), "--b", p("short.csv"))
    assert r.returncode == 1 and "gate_routing qwen3-30b-a3b native N=1024 A=0 M=0 is not in both runs" in r.stderr, \
        r.stderr
    write(p("twice.csv"), base + [base[0]])
    r = ab("--a", p("twice.csv"), "--b", p("b1.csv"))
    assert r.returncode == 1 and "appears twice" in r.stderr, r.stderr
    r = ab("--a", p("missing.csv"), "--b", p("b1.csv"))
    assert r.returncode == 1 and "missing.csv" in r.stderr, r.stderr
print("bench-ab: ok")
