#!/usr/bin/env python3
"""Compares `harness bench experts` figures with a bundle's lookups at the same points.

    harness bench experts --models qwen3-30b-a3b --backends native --components experts \\
        --tokens $(tools/bench-lookup-compare.py --draw-tokens 23 --seed 20261201 --max-tokens 8000) \\
        --csv bench.csv
    tools/bench-lookup-compare.py --bundle OUT_ROOT/VARIANT --bench bench.csv \\
        [--tp 1 --dp 1 --rank 0] [--split 2048] [--bounds 0.01,0.02,0.04] [--out compare.csv]

The bench times balanced routing through its own loop, not the acquisition's, so this is the
check of a table at points it was not built from that a simulator author would make
(docs/measurement.md#fidelity). For every bench row of the bundle's component tables (experts at
its N, A and M; gate_routing and finalize_copy at its N) it asks `harness lookup` for the same
point and records the error bundle − bench relative to the bench; rows the bundle measured itself
are marked `grid`, points outside its support are listed and left out. Prints every row and, per
component, the count, median / p95 / max |error| (quantiles interpolated between order
statistics, as core/statistics.h) and the signed median, over all rows and over the N ranges that
--split cuts, and over all rows once more with the signed median subtracted (an offset between
devices shows as a signed median; what remains is interpolation); where bench points are rows of
the table, their signed median alone (exact lookups: an offset without interpolation); and the
median mean SM clock of the bench points (their device_state) beside the table's rows' (the
bundle's coverage), since an offset often follows the clock, and per point the clock of the rows
its lookup interpolated (`table_sm_clock_mhz`, the vertices' clocks by their weights) with the
median of bench / table − 1 over the points where both are recorded, and the |error| statistics of
the points whose two clocks are within the p95 bound of each other and of those further off (under a
power cap the clock a device settles at differs between runs). Exit status 3 when a component misses --bounds (median, p95, max of |error|), 1 on
an error, else 0. `--draw-tokens K` only prints K distinct token counts drawn log-uniformly from
[2, --max-tokens] with --seed (Python's random), comma-separated, for the bench's --tokens.
"""
import argparse
import csv
import json
import math
import random
import subprocess
import sys

from bench_csv import quantile

COMPONENTS = ("experts", "gate_routing", "finalize_copy")
COLUMNS = ("component", "model", "backend", "tokens", "activated", "assignments", "median_us")


def draw_tokens(count, seed, max_tokens):
    rng = random.Random(seed)
    drawn = set()
    for _ in range(100 * count):
        if len(drawn) == count:
            break
        drawn.add(int(round(math.exp(rng.uniform(math.log(2), math.log(max_tokens))))))
    if len(drawn) < count:
        sys.exit(f"bench-lookup-compare: only {len(drawn)} distinct token counts in [2, {max_tokens}]")
    return sorted(drawn)


def bench_rows(path, model, backend):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            sys.exit(f"bench-lookup-compare: {path} is not a `harness bench experts` CSV "
                     f"(no column {', '.join(missing)})")
        rows = [r for r in reader if r["component"] in COMPONENTS
                and (model is None or r["model"] == model) and (backend is None or r["backend"] == backend)]
    kinds = sorted({(r["model"], r["backend"]) for r in rows})
    if not rows:
        sys.exit(f"bench-lookup-compare: {path} has no component rows for model {model or 'any'}, "
                 f"backend {backend or 'any'}")
    if len(kinds) > 1:
        sys.exit("bench-lookup-compare: the bench CSV mixes " + ", ".join(f"{m}/{b}" for m, b in kinds)
                 + "; choose one with --model and --backend (a bundle holds one)")
    return rows


def lookup_all(a, rows):
    """One `harness lookup --queries -` call for every bench row: (answer, None) or (None, why) per
    row, in order. A bundle that cannot answer at all (it refuses the whole batch) ends the run."""
    lines = "".join(f"{r['component']} {r['tokens']}"
                    + (f" {r['activated']} {r['assignments']}" if r["component"] == "experts" else "") + "\n"
                    for r in rows)
    cmd = [a.harness, "lookup", a.bundle, "--tp", str(a.tp), "--dp", str(a.dp), "--rank", str(a.rank),
           "--queries", "-", "--format", "json", "--explain"]
    p = subprocess.run(cmd, input=lines, capture_output=True, text=True)
    answers = [json.loads(line) for line in p.stdout.splitlines()]
    if p.returncode not in (0, 3) or len(answers) != len(rows):
        why = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
        sys.exit(f"bench-lookup-compare: harness lookup failed: {why}")
    return [(None, x["error"]) if "error" in x else (x, None) for x in answers]


def bench_clock(row):
    """The mean SM clock the bench counted over a row's forwards (its device_state), or None."""
    state = dict(kv.split("=", 1) for kv in (row.get("device_state") or "").split(";") if "=" in kv)
    return float(state["sm_clock_mean_mhz"]) if "sm_clock_mean_mhz" in state else None


def interpolated_clock(answer):
    """The mean SM clock of the table rows a lookup interpolated, weighted as their times are
    (--explain's vertices), or None where one of them recorded none."""
    vertices = answer.get("vertices", [])
    if not vertices or any("sm_clock_mean_mhz" not in v for v in vertices):
        return None
    return sum(v["weight"] * v["sm_clock_mean_mhz"] for v in vertices)


def table_clocks(a):
    """{component: median mean SM clock of the table's rows} as the bundle states it (absent where
    it recorded none), from `harness inspect --format json`."""
    p = subprocess.run([a.harness, "inspect", a.bundle, "--format", "json"], capture_output=True, text=True)
    if p.returncode not in (0, 4):  # 4: red flags, which the report still lists
        sys.exit(f"bench-lookup-compare: harness inspect failed: {p.stderr.strip()}")
    for entry in json.loads(p.stdout)["entries"]:
        t = entry["target"]
        if entry["section"] == "moe_components" and (t["tp"], t["dp"], t["rank"]) == (a.tp, a.dp, a.rank):
            return {name: c["sm_clock_mean_mhz"]["median"]
                    for name, c in entry.get("fidelity", {}).get("components", {}).items()
                    if "median" in c.get("sm_clock_mean_mhz", {})}
    return {}


def megahertz(value):
    return "not recorded" if value is None else f"{value:.0f} MHz"


def statistics(errors):
    magnitudes = sorted(abs(e) for e in errors)
    return {"count": len(errors), "median": quantile(magnitudes, 0.5), "p95": quantile(magnitudes, 0.95),
            "max": magnitudes[-1], "signed_median": quantile(sorted(errors), 0.5)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", help="OUT_ROOT/VARIANT")
    ap.add_argument("--bench", help="CSV written by `harness bench experts --csv`")
    ap.add_argument("--harness", default="harness", help="the harness binary")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--model", help="bench rows of this model only")
    ap.add_argument("--backend", help="bench rows of this backend only")
    ap.add_argument("--split", default="", help="N boundaries for per-range statistics, e.g. 2048")
    ap.add_argument("--bounds", default="0.01,0.02,0.04", help="median,p95,max of |error|")
    ap.add_argument("--out", help="comparison CSV")
    ap.add_argument("--draw-tokens", type=int, help="print this many token counts and exit")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--max-tokens", type=int, default=8000)
    a = ap.parse_args()
    if a.draw_tokens is not None:
        if a.draw_tokens < 1 or a.max_tokens < 2:
            sys.exit("bench-lookup-compare: --draw-tokens needs a positive count and --max-tokens >= 2")
        print(",".join(str(n) for n in draw_tokens(a.draw_tokens, a.seed, a.max_tokens)))
        return 0
    if not a.bundle or not a.bench:
        sys.exit("bench-lookup-compare: --bundle and --bench are needed (or --draw-tokens)")
    try:
        bounds = [float(x) for x in a.bounds.split(",")]
        splits = sorted(int(x) for x in a.split.split(",") if x)
    except ValueError as e:
        sys.exit(f"bench-lookup-compare: --bounds takes three fractions and --split token counts ({e})")
    if len(bounds) != 3:
        sys.exit("bench-lookup-compare: --bounds takes median,p95,max, e.g. 0.01,0.02,0.04")

    out_rows, outside = [], []
    rows = bench_rows(a.bench, a.model, a.backend)
    for row, (answer, why) in zip(rows, lookup_all(a, rows)):
        if answer is None:
            if "outside" not in why and "support" not in why:
                sys.exit(f"bench-lookup-compare: harness lookup failed for {row['component']} "
                         f"N={row['tokens']}: {why}")
            outside.append((row, why))
            continue
        bench_us = float(row["median_us"])
        out_rows.append({"component": row["component"], "tokens": int(row["tokens"]),
                         "activated": int(row["activated"]), "assignments": int(row["assignments"]),
                         "bench_us": bench_us, "lookup_us": answer["time_us"],
                         "error": (answer["time_us"] - bench_us) / bench_us, "grid": answer["exact"],
                         "bench_sm_clock_mhz": bench_clock(row),
                         "table_sm_clock_mhz": interpolated_clock(answer)})
    for row, why in outside:
        print(f"outside the support: {row['component']} N={row['tokens']} A={row['activated']} "
              f"M={row['assignments']}: {why}")
    if not out_rows:
        sys.exit("bench-lookup-compare: no bench row lies in the bundle's support")
    print("| component | N | A | M | bench µs | lookup µs | error | bench clock | table clock | |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in out_rows:
        print(f"| {r['component']} | {r['tokens']} | {r['activated']} | {r['assignments']} | "
              f"{r['bench_us']:.2f} | {r['lookup_us']:.2f} | {100 * r['error']:+.2f}% | "
              f"{megahertz(r['bench_sm_clock_mhz'])} | {megahertz(r['table_sm_clock_mhz'])} | "
              f"{'grid' if r['grid'] else ''} |")
    table_clock = table_clocks(a)
    if a.out:
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(out_rows[0]))
            w.writeheader()
            w.writerows(out_rows)
    missed = False
    edges = [0] + splits + [math.inf]
    for component in COMPONENTS:
        rows = [r for r in out_rows if r["component"] == component]
        if not rows:
            continue
        ranges = [("all", rows)] + ([(f"{lo} <= N < {hi}", [r for r in rows if lo <= r["tokens"] < hi])
                                     for lo, hi in zip(edges, edges[1:])] if splits else [])
        for name, selected in ranges:
            if not selected:
                continue
            s = statistics([r["error"] for r in selected])
            print(f"{component} {name}: {s['count']} points, |error| median {100 * s['median']:.2f}%, "
                  f"p95 {100 * s['p95']:.2f}%, max {100 * s['max']:.2f}%, signed median "
                  f"{100 * s['signed_median']:+.2f}%")
            grid = [r for r in selected if r["grid"]]
            if name == "all" and grid:
                # The table answers its own rows exactly: what they miss by is no interpolation,
                # an offset (the signed median) or a time that does not repeat (the largest miss).
                worst = max(grid, key=lambda r: abs(r["error"]))
                print(f"{component} at the table's own rows: {len(grid)} points, signed median "
                      f"{100 * statistics([r['error'] for r in grid])['signed_median']:+.2f}% "
                      f"(this device and day against the table's), |error| max "
                      f"{100 * abs(worst['error']):.2f}% at N={worst['tokens']} (no interpolation)")
            if name == "all":
                # An offset between devices often follows their clocks: the bench's against the
                # clock the table's rows ran at.
                clocks = sorted(r["bench_sm_clock_mhz"] for r in selected if r["bench_sm_clock_mhz"] is not None)
                print(f"{component} median mean SM clock: bench points "
                      f"{megahertz(quantile(clocks, 0.5) if clocks else None)} ({len(clocks)} of "
                      f"{len(selected)} recorded), the table's rows {megahertz(table_clock.get(component))}")
                # Point by point: the clock of the rows each lookup interpolated. Where the times
                # agree and the clocks do not, the two clocks were counted over different spans.
                ratios = sorted(r["bench_sm_clock_mhz"] / r["table_sm_clock_mhz"] - 1 for r in selected
                                if r["bench_sm_clock_mhz"] is not None and r["table_sm_clock_mhz"] is not None)
                if ratios:
                    print(f"{component} bench clock / the interpolated rows' clock - 1: median "
                          f"{100 * quantile(ratios, 0.5):+.2f}% ({100 * ratios[0]:+.2f}% to "
                          f"{100 * ratios[-1]:+.2f}%) over {len(ratios)} of {len(selected)} points")
                    # A clock offset within the p95 bound cannot alone move a point past it; the
                    # points further off differ by the device's state as well (as validate's
                    # by_clock: docs/measurement.md#validating-a-published-bundle).
                    clocked = [r for r in selected
                               if r["bench_sm_clock_mhz"] is not None and r["table_sm_clock_mhz"] is not None]
                    offset = lambda r: abs(r["bench_sm_clock_mhz"] / r["table_sm_clock_mhz"] - 1)
                    for label, part in ((f"within {bounds[1]:.2%} of its rows' clock",
                                         [r for r in clocked if offset(r) <= bounds[1]]),
                                        ("further from its rows' clock", [r for r in clocked if offset(r) > bounds[1]])):
                        line = f"{component} measured {label}: {len(part)} points"
                        if part:
                            c = statistics([r["error"] for r in part])
                            line += (f", |error| median {100 * c['median']:.2f}%, p95 {100 * c['p95']:.2f}%, "
                                     f"max {100 * c['max']:.2f}%")
                        print(line)
            if name == "all" and len(selected) > 1:
                # An offset shared by every point (another device of the kind, another day) spends
                # the bounds by itself; what is left once it is removed is the table's.
                c = statistics([r["error"] - s["signed_median"] for r in selected])
                print(f"{component} all, the signed median removed: |error| median {100 * c['median']:.2f}%, "
                      f"p95 {100 * c['p95']:.2f}%, max {100 * c['max']:.2f}% (the bounds judge the errors above)")
            if name == "all" and (s["median"] > bounds[0] or s["p95"] > bounds[1] or s["max"] > bounds[2]):
                missed = True
                print(f"{component}: misses the bounds (median {bounds[0]:.1%}, p95 {bounds[1]:.1%}, "
                      f"max {bounds[2]:.1%})")
    return 3 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
