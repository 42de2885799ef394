#!/usr/bin/env python3
"""How well launch waves explain `native` experts times (docs/native-backend.md#launch-waves-set-
the-time-off-balanced-routing).

Reads the experts rows of a bundle's table CSV (tp<T>/<table>.csv: tokens, activated_experts,
local_assignments, time_us) measured with `--backend native` on a Hopper GPU (wgmma tiles), and
for each point counts the tiles the tile rule runs (kernels/native_tile_rule.cpp, restated here as
an independent reading) and the launch waves of the two GEMMs: wgmma tiles run one block of 256
weight rows per SM (W2 on its tall tiles of 128 rows where an expert's 129-256 rows are paired),
the narrow tile blocks of 64 rows, two per SM; paired tiles run as clusters of two CTAs, one per
pair of SMs (the waves kernels/native_tile_rule.h `native_launch_waves` declares to refinement,
counted here independently). Prints, per tile, a least-squares
fit time = a + b * W13 waves + c * W2 waves with its |relative residual| median / p95 / max,
the whole waves over the waves the blocks would fill without a partial last one (what a schedule
without launch-wave steps could save at most), and
with --tokens N the points of that N. --leave-one-out predicts every point that has a neighbour on
either side in A on its row (same N and M) from those two, by linear interpolation of the time
(what a table does between its rows) and of the time over the per-tile fit (a lookup that knew the
waves), and prints both errors' median / p95 / max. --steps prints the rows per expert where the tile rule steps
(what `harness plan` prints for a native job), so the restatement can be checked against it;
--activated-steps N the A at which the wave count of N tokens changes (every route local).

    tools/native-waves.py BUNDLE/tp1/TABLE.csv [--sms 132] [--hidden 2048] [--intermediate 768]
                          [--tokens 1024] [--leave-one-out] [--steps MAX_ROWS] [--activated-steps N [--top-k 8] [--experts 128]]
"""
import argparse
import csv
import math
import sys

from bench_csv import quantile

# (name, token rows, cost per tile): the narrow tile's measured cost, the wgmma tiles' on the line
# from the medium tile (1) to the wide one (476 / 376 µs).
TILES = [("narrow", 16, 309.0 / 376.0)] + [
    (name, tokens, 1.0 + (476.0 / 376.0 - 1.0) * (tokens - 64) / 64)
    for name, tokens in (("medium", 64), ("wide80", 80), ("wide96", 96), ("wide112", 112), ("wide", 128))]


def tiles_per_expert(tokens, rows):
    return max(1, math.ceil(rows / tokens))


def tile_for(rows_per_expert):
    """The tile of least predicted cost; the first of equal ones."""
    best = TILES[0]
    for t in TILES:
        if tiles_per_expert(t[1], rows_per_expert) * t[2] < tiles_per_expert(best[1], rows_per_expert) * best[2]:
            best = t
    return best


def steps(max_rows):
    """Rows per expert b where the tile or an expert's tile count changes between b and b + 1."""
    out = []
    for b in range(1, max_rows):
        at, above = tile_for(b), tile_for(b + 0.5)
        if at != above or tiles_per_expert(at[1], b) != tiles_per_expert(above[1], b + 1):
            out.append(b)
    return out


# W2's tall tiles (128 output features by these token rows): where the rule pairs an expert's
# tiles and its rows fit one of them.
W2_TALL = (160, 192, 224, 256)


def w2_tall_tokens(name, tokens, rows_per_expert):
    if name == "narrow" or rows_per_expert <= tokens:
        return None
    return next((t for t in W2_TALL if math.ceil(rows_per_expert) <= t), None)


def launch(a, m, sms, hidden, intermediate):
    """(tile name, tiles, W13 units, W2 units, W13 slots, W2 slots) of a forward whose A experts get
    floor(M/A) or ceil(M/A) rows each, as the stimuli give them. Paired tiles run as clusters of
    two CTAs, a unit being a pair's feature block and a slot a pair of SMs."""
    name, tokens, _ = tile_for(m / a)
    q, rem = divmod(m, a)

    def tiles_of(height):
        return rem * math.ceil((q + 1) / height) + (a - rem) * math.ceil(q / height)

    tiles = tiles_of(tokens)
    if name == "narrow":
        return name, tiles, tiles * math.ceil(2 * intermediate / 64), tiles * math.ceil(hidden / 64), 2 * sms, 2 * sms
    paired = m / a > tokens
    units, slots = (math.ceil(tiles / 2), sms // 2) if paired else (tiles, sms)
    tall = w2_tall_tokens(name, tokens, m / a)
    w2 = (tiles_of(tall) * math.ceil(hidden / 128), sms) if tall else (units * math.ceil(hidden / 256), slots)
    return name, tiles, units * math.ceil(2 * intermediate / 256), w2[0], slots, w2[1]


def waves(a, m, sms, hidden, intermediate):
    """(tile name, tiles, W13 waves, W2 waves): whole waves, as the launches run them."""
    name, tiles, b13, b2, s13, s2 = launch(a, m, sms, hidden, intermediate)
    return name, tiles, math.ceil(b13 / s13), math.ceil(b2 / s2)


def wave_excess(a, m, sms, hidden, intermediate):
    """Whole waves over the waves the blocks would fill without a partial last one: what a
    schedule without launch-wave steps could save at most."""
    _, _, b13, b2, s13, s2 = launch(a, m, sms, hidden, intermediate)
    return (math.ceil(b13 / s13) + math.ceil(b2 / s2)) / (b13 / s13 + b2 / s2)


def activated_steps(n, top_k, experts, sms, hidden, intermediate):
    """A where the wave count of N tokens with every route local (M = N * k) changes between A and
    A + 1: the A values a grid would have to bracket on that N row to follow the waves."""
    m = n * top_k
    lo, hi = max(1, -(-m // n)), min(experts, m)
    counts = {a: waves(a, m, sms, hidden, intermediate)[2:] for a in range(lo, hi + 1)}
    return [a for a in range(lo, hi) if counts[a] != counts[a + 1]]


def solve(a, b):
    """x with a x = b (Gaussian elimination with partial pivoting); None when singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-9:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(points):
    """Least squares of time on (1, W13 waves, W2 waves): (coefficients, |relative residuals|)."""
    xs = [(1.0, float(w13), float(w2)) for w13, w2, _ in points]
    ys = [t for _, _, t in points]
    ata = [[sum(x[i] * x[j] for x in xs) for j in range(3)] for i in range(3)]
    aty = [sum(x[i] * y for x, y in zip(xs, ys)) for i in range(3)]
    c = solve(ata, aty)
    if c is None:
        return None, []
    return c, [abs(sum(ci * xi for ci, xi in zip(c, x)) - y) / y for x, y in zip(xs, ys)]


def leave_one_out(points, fits, sms, hidden, intermediate):
    """|relative errors| of predicting each point with a neighbour on either side in A on its row
    from those two: (linear in the time, linear in the time over the fit of its tile's waves)."""
    rows = {}
    for n, a, m, t in points:
        rows.setdefault((n, m), []).append((a, t))

    def model(a, m):
        name, _, w13, w2 = waves(a, m, sms, hidden, intermediate)
        c = fits.get(name)
        return c[0] + c[1] * w13 + c[2] * w2 if c else None

    plain, scaled = [], []
    for (_, m), row in rows.items():
        row.sort()
        for (a0, t0), (a1, t1), (a2, t2) in zip(row, row[1:], row[2:]):
            f = (a1 - a0) / (a2 - a0)
            plain.append(abs(t0 + (t2 - t0) * f - t1) / t1)
            m0, m1, m2 = model(a0, m), model(a1, m), model(a2, m)
            if None not in (m0, m1, m2) and min(m0, m1, m2) > 0:
                scaled.append(abs((t0 / m0 + (t2 / m2 - t0 / m0) * f) * m1 - t1) / t1)
    return plain, scaled


def read_points(path):
    points = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("component", "experts") != "experts" or int(r["activated_experts"]) == 0:
                continue
            points.append((int(r["tokens"]), int(r["activated_experts"]), int(r["local_assignments"]),
                           float(r["time_us"])))
    return points


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("table", nargs="?", help="a bundle's table CSV (experts rows)")
    ap.add_argument("--sms", type=int, default=132, help="SMs of the GPU (H200: 132)")
    ap.add_argument("--hidden", type=int, default=2048, help="H (Qwen3-30B-A3B: 2048)")
    ap.add_argument("--intermediate", type=int, default=768, help="I (Qwen3-30B-A3B: 768)")
    ap.add_argument("--tokens", type=int, help="also list the points of this N")
    ap.add_argument("--leave-one-out", action="store_true",
                    help="predict each point from its neighbours in A: plain and wave-scaled")
    ap.add_argument("--steps", type=int, metavar="MAX_ROWS", help="print the tile rule's steps up to MAX_ROWS")
    ap.add_argument("--activated-steps", type=int, metavar="N",
                    help="print the A where the wave count of N tokens changes (every route local)")
    ap.add_argument("--top-k", type=int, default=8, help="k (Qwen3-30B-A3B: 8)")
    ap.add_argument("--experts", type=int, default=128, help="E (Qwen3-30B-A3B: 128)")
    args = ap.parse_args()
    if args.activated_steps is not None:
        st = activated_steps(args.activated_steps, args.top_k, args.experts, args.sms, args.hidden,
                             args.intermediate)
        print(f"N={args.activated_steps}: the waves change between A and A + 1 at {len(st)} A:", " ".join(map(str, st)))
        if args.table is None and args.steps is None:
            return 0
    if args.steps is not None:
        print("steps:", " ".join(str(b) for b in steps(args.steps)))
        if args.table is None:
            return 0
    if args.table is None:
        ap.error("a table CSV is needed (or --steps)")
    try:
        points = read_points(args.table)
    except (OSError, KeyError, ValueError) as e:
        print(f"native-waves: cannot read experts rows from {args.table}: {e}", file=sys.stderr)
        return 2
    if not points:
        print(f"native-waves: {args.table} has no experts rows with active experts", file=sys.stderr)
        return 2
    by_tile = {}
    excess = [wave_excess(a, m, args.sms, args.hidden, args.intermediate) for _, a, m, _ in points]
    print(f"{len(points)} experts points; whole waves / filled waves: median {quantile(sorted(excess), 0.5):.3f}, "
          f"p90 {quantile(sorted(excess), 0.9):.3f}, max {max(excess):.3f}")
    for n, a, m, t in sorted(points):
        name, tiles, w13, w2 = waves(a, m, args.sms, args.hidden, args.intermediate)
        by_tile.setdefault(name, []).append((w13, w2, t))
        if args.tokens == n:
            print(f"N={n} A={a} M={m} rows/expert={m / a:.1f} tile={name} tiles={tiles} "
                  f"waves={w13}+{w2} time={t:.1f} us per wave={t / (w13 + w2):.2f}")
    fits = {}
    for name, _, _ in TILES:
        pts = by_tile.get(name, [])
        c, res = fit(pts) if len(pts) >= 4 else (None, [])
        if c is None:
            print(f"{name}: {len(pts)} points, too few or too alike to fit")
            continue
        fits[name] = c
        print(f"{name}: {len(pts)} points, time = {c[0]:.2f} + {c[1]:.2f} * W13 waves + {c[2]:.2f} * W2 waves; "
              f"|residual| median {100 * quantile(sorted(res), 0.5):.1f}% p95 {100 * quantile(sorted(res), 0.95):.1f}% "
              f"max {100 * max(res):.1f}%")
    if args.leave_one_out:
        for what, errs in zip(("time", "time over the waves' fit"),
                              leave_one_out(points, fits, args.sms, args.hidden, args.intermediate)):
            errs.sort()
            print(f"leave one out, interpolating the {what}: {len(errs)} points" +
                  (f", |error| median {100 * quantile(errs, 0.5):.1f}% p95 {100 * quantile(errs, 0.95):.1f}% "
                   f"max {100 * errs[-1]:.1f}%" if errs else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
