#!/usr/bin/env python3
"""Does the `native` tile rule pick the fastest tile? Checks `harness bench experts --sweep` run
with the rule against the same sweep with each tile forced (HARNESS_NATIVE_TILE), as
docs/native-backend.md#tile-choice does by hand.

    tools/tile-rule-check.py RULE.csv FORCED.csv [FORCED.csv ...] [--model M] [--backend B]
                             [--tolerance 0.02]

RULE.csv is the sweep as the rule runs it; each FORCED.csv one sweep with one tile forced (its
`configuration` names the same tile at every point). At every N of the rule's sweep this prints the
rows per expert (assignments / activated), each forced tile's time, the fastest of them, the tile
the rule picked (from RULE.csv's configuration) and the rule's tile's time in its forced sweep over
the fastest: both from forced sweeps, so the comparison is not between the rule's run and the
others. Points whose rule tile was not swept are listed as not compared. Every sweep must come
from one GPU (`device_uuid`; not checked, and said so, where the files record none). Exit status 3 when the
rule's tile is slower than the fastest by more than the tolerance at some point, 1 on an error
(named), else 0. `tools/gpu-check.sh BUILD OUT tiles` runs the sweeps and this check.
"""
import argparse
import sys

from bench_csv import component_rows, one_gpu

COLUMNS = ("assignments", "activated")


def tile_of(configuration):
    """The tile a configuration ran: its first word ("wide96 tile (96 tokens, ...)" -> "wide96")."""
    return configuration.split(" ", 1)[0]


def forced_sweep(path, model, backend):
    """(tile, {N: median_us}) of a sweep with one tile forced."""
    rows = component_rows(path, model, backend, COLUMNS)
    tiles = sorted({tile_of(r["configuration"]) for r in rows.values()})
    if len(tiles) != 1:
        raise ValueError(f"{path}: not a forced-tile sweep: it ran tiles {', '.join(tiles)}")
    return tiles[0], {n: float(r["median_us"]) for n, r in rows.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rule", help="the sweep as the tile rule runs it")
    ap.add_argument("forced", nargs="+", help="the same sweep with one tile forced, one per file")
    ap.add_argument("--model")
    ap.add_argument("--backend")
    ap.add_argument("--tolerance", type=float, default=0.02,
                    help="how much slower than the fastest forced tile the rule's tile may be")
    args = ap.parse_args()
    try:
        rule = component_rows(args.rule, args.model, args.backend, COLUMNS)
        forced = {}
        for path in args.forced:
            tile, times = forced_sweep(path, args.model, args.backend)
            if tile in forced:
                raise ValueError(f"{path}: tile {tile} is forced in two files")
            missing = sorted(set(rule) - set(times))
            if missing:
                raise ValueError(f"{path}: no point at N={missing[0]} of the rule's sweep")
            forced[tile] = times
        gpu = one_gpu([args.rule] + args.forced)
    except (OSError, ValueError) as e:
        print(f"tile-rule-check: {e}", file=sys.stderr)
        return 1
    print(f"GPU {gpu}" if gpu else "GPU not checked: the sweeps record none (device_uuid)")

    tiles = list(forced)
    print(f"{'N':>6} {'rows/expert':>11} " + " ".join(f"{t:>9}" for t in tiles) +
          f" {'fastest':>9} {'rule':>9} {'rule/fastest':>12}")
    misses, uncompared = [], []
    for n in sorted(rule):
        r = rule[n]
        rows = float(r["assignments"]) / float(r["activated"]) if float(r["activated"]) > 0 else 0.0
        picked = tile_of(r["configuration"])
        fastest = min(tiles, key=lambda t: forced[t][n])
        line = f"{n:>6} {rows:>11.1f} " + " ".join(f"{forced[t][n]:>9.1f}" for t in tiles)
        if picked not in forced:
            uncompared.append(n)
            print(f"{line} {fastest:>9} {picked:>9} {'not swept':>12}")
            continue
        excess = forced[picked][n] / forced[fastest][n]
        print(f"{line} {fastest:>9} {picked:>9} {excess:>12.3f}")
        if excess > 1 + args.tolerance:
            misses.append((n, picked, fastest, excess))
    compared = len(rule) - len(uncompared)
    print(f"the rule's tile is the fastest or within {args.tolerance:.1%} of it at "
          f"{compared - len(misses)} of {compared} compared points")
    if uncompared:
        print(f"not compared (the rule's tile was not swept): N = {', '.join(map(str, uncompared))}")
    for n, picked, fastest, excess in misses:
        print(f"  N={n}: the rule's {picked} took {excess - 1:.1%} longer than {fastest}")
    return 3 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
