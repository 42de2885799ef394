#!/usr/bin/env python3
"""Alignment comb of a component's table: how much faster rows whose token count N is a multiple of
2, 4, 8, ... run than their odd-N neighbours (docs/measurement.md#the-full-job-finished-thirteenth-
session-2026-12-02: cuBLAS's router GEMM picks other kernels at multiples of 8).

    tools/alignment-comb.py TABLE.csv [--component gate_routing] [--split 512,2048] [--window 0.06]

TABLE.csv is a published component table (BUNDLE/tp<T>/moe_components/<entry>/components.csv).
Each row of N > 1 belongs to the class 2^j, the largest power of two (up to 64) dividing N; its
ratio is its time over the median time of the odd-N rows of the same mode within
max(window * N, 8) tokens (at least two of them, else the row is left out and counted). Per mode,
N range and class the script prints the rows, the median ratio and its range. A ratio well below
1 at a class is a comb a table interpolated over N cannot follow. Exits 1 on a missing file,
component or column, or a component whose rows vary in activated experts or assignments (the
check reads a table over N alone).
"""
import argparse
import csv
import statistics
import sys

COLUMNS = ("component", "mode", "tokens", "activated_experts", "local_assignments", "time_us")


def fail(message):
    print(f"alignment-comb: {message}", file=sys.stderr)
    sys.exit(1)


def alignment_class(n):
    c = 1
    while c < 64 and n % (2 * c) == 0:
        c *= 2
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("table")
    ap.add_argument("--component", default="gate_routing")
    ap.add_argument("--split", default="512,2048", help="N boundaries of the ranges reported")
    ap.add_argument("--window", type=float, default=0.06, help="relative half-width of a row's neighbourhood")
    args = ap.parse_args()
    try:
        with open(args.table, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                fail(f"{args.table}: no column {', '.join(missing)} (a published component table has {', '.join(COLUMNS)})")
            rows = [r for r in reader if r["component"] == args.component]
    except OSError as e:
        fail(f"cannot read {args.table}: {e.strerror}")
    if not rows:
        fail(f"{args.table} has no rows of component {args.component}")
    if len({(r["activated_experts"], r["local_assignments"]) for r in rows}) > 1:
        fail(f"{args.component} rows vary in activated experts or assignments: the check reads a table over N alone")
    try:
        splits = sorted(int(x) for x in args.split.split(",") if x)
    except ValueError:
        fail(f"--split {args.split}: expected token counts separated by commas")
    bounds = [1] + splits + [float("inf")]

    for mode in sorted({r["mode"] for r in rows}):
        points = sorted((int(r["tokens"]), float(r["time_us"])) for r in rows if r["mode"] == mode)
        odd = [(n, t) for n, t in points if n % 2]
        ratios, left_out = {}, 0
        for n, t in points:
            if n < 2:
                continue
            reach = max(args.window * n, 8)
            near = [t2 for n2, t2 in odd if n2 != n and abs(n2 - n) <= reach]
            if len(near) < 2:
                left_out += 1
                continue
            span = next(i for i in range(len(bounds) - 1) if bounds[i] <= n < bounds[i + 1])
            ratios.setdefault((span, alignment_class(n)), []).append(t / statistics.median(near))
        print(f"{args.component} {mode}: {len(points)} rows, {left_out} left out (fewer than two odd-N rows near them)")
        print(f"  {'N range':<14} {'class':>6} {'rows':>5} {'median':>7} {'min':>6} {'max':>6}")
        for (span, c), v in sorted(ratios.items()):
            hi = bounds[span + 1]
            label = f"{bounds[span]}-{'' if hi == float('inf') else hi - 1}"
            print(f"  {label:<14} {c:>6} {len(v):>5} {statistics.median(v):>7.3f} {min(v):>6.3f} {max(v):>6.3f}")


if __name__ == "__main__":
    main()
