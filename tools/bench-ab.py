#!/usr/bin/env python3
"""Same-call A/B of `harness bench experts` CSVs: a kernel variant (B) against the baseline (A).

    tools/bench-ab.py --a a1.csv [a2.csv ...] --b b1.csv [b2.csv ...] [--out ab.csv]

Runs are paired in the order given (a1 with b1, a2 with b2, ...), as one call measured them
alternating, so that the clock and power state both saw are alike. Rows are matched by
(component, model, backend, tokens, activated, assignments); every row of a run must be in the
other run of its pair (else exit 1, naming it). Prints per point the ratio B / A of median_us
in each pair and its range over the pairs, then per component the median, min and max over the
points of the per-point median ratio. Every run must come from one GPU (the CSVs' `device_uuid`,
which files of older builds lack: then it says the GPU was not checked). Exit status 1 on an error,
else 0: this reports, it does not judge.

--steps-from N also prints, for each arm, how smooth each line of points is from N tokens up:
the points of one (component, model, backend) in token order, each at the median over the arm's
runs, and how many neighbours differ by more than 2 % and 5 % and the largest step (for sweeps
over N alone: gate_routing, or experts at balanced routing).
"""
import argparse
import csv
import statistics
import sys

from bench_csv import one_gpu

KEY = ("component", "model", "backend", "tokens", "activated", "assignments")


def read(path):
    rows = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            key = tuple(r[k] for k in KEY)
            if key in rows:
                raise ValueError(f"{path}: the point {key_text(key)} appears twice")
            rows[key] = float(r["median_us"])
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def key_text(key):
    component, model, backend, n, a, m = key
    return f"{component} {model} {backend} N={n} A={a} M={m}"


def print_steps(arm, line, points):
    """One line of `points` [(tokens, us)] in token order: its steps between neighbours."""
    points.sort()
    head = f"{arm} steps {' '.join(line)}: {len(points)} points"
    if len(points) < 2:
        print(f"{head}, no neighbours")
        return
    steps = [(abs(b / a - 1), n, m) for (n, a), (m, b) in zip(points, points[1:])]
    largest = max(steps)
    print(f"{head} from N={points[0][0]}: {sum(s > 0.02 for s, _, _ in steps)} of {len(steps)} neighbours "
          f"over 2 %, {sum(s > 0.05 for s, _, _ in steps)} over 5 %, largest {100 * largest[0]:.1f} % "
          f"(N={largest[1]} to {largest[2]})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", nargs="+", required=True, help="baseline runs")
    ap.add_argument("--b", nargs="+", required=True, help="variant runs, paired with --a in order")
    ap.add_argument("--out", help="per-point ratios as CSV")
    ap.add_argument("--steps-from", type=int, metavar="N",
                    help="also count the steps between neighbouring token counts from N up, per arm")
    args = ap.parse_args()
    if len(args.a) != len(args.b):
        print(f"bench-ab: {len(args.a)} baseline runs but {len(args.b)} variant runs: they pair in order",
              file=sys.stderr)
        return 1
    try:
        pairs = [(read(a), read(b), a, b) for a, b in zip(args.a, args.b)]
        gpu = one_gpu(args.a + args.b)
    except (OSError, KeyError, ValueError) as e:
        print(f"bench-ab: {e}", file=sys.stderr)
        return 1
    print(f"GPU {gpu}" if gpu else "GPU not checked: the runs record none (device_uuid)")
    keys = sorted(pairs[0][0], key=lambda k: (k[0], k[1], k[2], int(k[3]), int(k[4]), int(k[5])))
    for ra, rb, pa, pb in pairs:
        for path, rows, other in ((pa, ra, rb), (pb, rb, ra)):
            missing = [k for k in rows if k not in other] + [k for k in keys if k not in rows]
            if missing:
                print(f"bench-ab: {path}: {key_text(missing[0])} is not in both runs of its pair", file=sys.stderr)
                return 1
    per_point = []
    for k in keys:
        ratios = [rb[k] / ra[k] for ra, rb, _, _ in pairs]
        per_point.append((k, ratios))
        print(f"{key_text(k)}: B/A {statistics.median(ratios):.3f} (runs {min(ratios):.3f}-{max(ratios):.3f})")
    for component in sorted({k[0] for k in keys}):
        med = [statistics.median(r) for k, r in per_point if k[0] == component]
        print(f"{component}: {len(med)} points, B/A median {statistics.median(med):.3f}, "
              f"min {min(med):.3f}, max {max(med):.3f}")
    if args.steps_from is not None:
        for arm, index in (("A", 0), ("B", 1)):
            for line in sorted({k[:3] for k in keys}):
                print_steps(arm, line, [(int(k[3]), statistics.median(p[index][k] for p in pairs))
                                        for k in keys if k[:3] == line and int(k[3]) >= args.steps_from])
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(list(KEY) + ["ratio_median"] + [f"ratio_run{i + 1}" for i in range(len(pairs))])
            for k, r in per_point:
                w.writerow(list(k) + [f"{statistics.median(r):.6f}"] + [f"{x:.6f}" for x in r])
    return 0


if __name__ == "__main__":
    sys.exit(main())
