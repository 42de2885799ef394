#!/usr/bin/env python3
"""How well a table over N whose rows sit around declared time steps predicts the other token
counts of a `harness bench experts --csv` file, for the components interpolated over N alone
(gate_routing, finalize_copy, wrapper).

    tools/step-rows-check.py --bench run2.csv [--table run1.csv] [--component gate_routing]
        [--model M] [--backend B] [--steps 2048,...] [--every 528] [--rows N,...] [--split 2048]
        [--bounds 0.01,0.02,0.04]

The table's rows are the first and last N of --table (default: --bench itself), the rows b and
b + 1 of every step b (--steps, and every multiple of --every) below the last N, and --rows; it
interpolates linearly between them, as lookup does over tokens. Every other N of --bench inside
the table's range is predicted and compared: the count, median / p95 / max |error| (table − bench,
relative to the bench) with the worst N, and the signed median, over all points and over the N
ranges --split cuts. It is the check that a declared step rule (kernels/gate_rows.h) leaves
nothing between its rows for a table to miss, before a campaign measures it
(docs/native-backend.md#the-router-gemm-on-rows-padded-to-bands). Exit status 3 when the points
miss --bounds (median, p95, max of |error|), 1 on an error (a step row the table lacks, an
unreadable file), else 0.
"""
import argparse
import bisect
import sys

from bench_csv import component_rows, quantile


def numbers(text, what):
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        sys.exit(f"step-rows-check: {what} must be comma-separated integers, got '{text}'")


def table_rows(table, steps, every, extra):
    first, last = min(table), max(table)
    wanted = {first, last, *extra}
    bounds = set(steps)
    if every:
        bounds.update(range(every, last, every))
    for b in sorted(bounds):
        if first <= b < last:
            wanted.update((b, b + 1))
    missing = sorted(n for n in wanted if n not in table)
    if missing:
        sys.exit(f"step-rows-check: the table has no row at N={missing[0]}"
                 f"{' (and ' + str(len(missing) - 1) + ' more)' if len(missing) > 1 else ''}: "
                 "bench both sides of every step")
    return sorted(wanted)


def summary(label, errors):
    magnitudes = sorted(abs(e) for e, _ in errors)
    worst = max(errors, key=lambda x: abs(x[0]))
    signed = quantile(sorted(e for e, _ in errors), 0.5)
    stats = (quantile(magnitudes, 0.5), quantile(magnitudes, 0.95), magnitudes[-1])
    print(f"{label}: {len(errors)} points, |error| median {100 * stats[0]:.2f}%, p95 {100 * stats[1]:.2f}%, "
          f"max {100 * stats[2]:.2f}% (N={worst[1]}), signed median {100 * signed:+.2f}%")
    return stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="the points to predict")
    ap.add_argument("--table", help="the table's rows (default: --bench)")
    ap.add_argument("--component", default="gate_routing")
    ap.add_argument("--model")
    ap.add_argument("--backend")
    ap.add_argument("--steps", default="", help="declared steps b (rows b and b + 1 join the table)")
    ap.add_argument("--every", type=int, default=0, help="every multiple of this is a step too")
    ap.add_argument("--rows", default="", help="more table rows")
    ap.add_argument("--split", default="", help="N boundaries for per-range statistics")
    ap.add_argument("--bounds", default="0.01,0.02,0.04", help="median,p95,max of |error|")
    a = ap.parse_args()
    if a.component == "experts":
        sys.exit("step-rows-check: experts tables interpolate over (N, A, M); use "
                 "tools/bench-lookup-compare.py on a bundle")
    if a.every < 0:
        sys.exit("step-rows-check: --every must not be negative (0: no multiples)")
    bounds = [float(x) for x in a.bounds.split(",")]
    try:
        bench = component_rows(a.bench, a.model, a.backend, component=a.component)
        table = component_rows(a.table or a.bench, a.model, a.backend, component=a.component)
    except (OSError, ValueError) as e:
        sys.exit(f"step-rows-check: {e}")
    rows = table_rows(table, numbers(a.steps, "--steps"), a.every, numbers(a.rows, "--rows"))
    us = {n: float(table[n]["median_us"]) for n in rows}
    errors = []
    for n, r in sorted(bench.items()):
        if n in us or not rows[0] < n < rows[-1]:
            continue
        i = bisect.bisect(rows, n)
        lo, hi = rows[i - 1], rows[i]
        predicted = us[lo] + (us[hi] - us[lo]) * (n - lo) / (hi - lo)
        errors.append((predicted / float(r["median_us"]) - 1, n))
    if not errors:
        sys.exit("step-rows-check: no bench point lies between the table's rows")
    model = next(iter(bench.values()))["model"]
    print(f"{a.component} {model}: a table of {len(rows)} rows from {rows[0]} to {rows[-1]}")
    stats = summary(f"{a.component} all", errors)
    cuts = [0] + numbers(a.split, "--split") + [float("inf")]
    for lo, hi in zip(cuts, cuts[1:]):
        part = [(e, n) for e, n in errors if lo <= n < hi]
        if part and len(cuts) > 2:
            summary(f"{a.component} {lo} <= N < {hi}", part)
    miss = [name for name, value, bound in zip(("median", "p95", "max"), stats, bounds) if value > bound]
    if miss:
        print(f"outside the bounds ({', '.join(miss)})")
        sys.exit(3)


if __name__ == "__main__":
    main()
