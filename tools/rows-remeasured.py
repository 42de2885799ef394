#!/usr/bin/env python3
"""A bundle's own `experts` rows measured again on one GPU, by the entry's protocol and by the
bench's (docs/measurement.md#the-same-rows-on-other-h100s-fiftieth-session): what
tools/gpu-check.sh's rows step prints. No interpolation is involved, so what the runs miss the
table by is this GPU against the devices that measured the rows, and what the two protocols miss
each other by is the protocols' difference (the same GPU, the same points, alternating runs).

    tools/rows-remeasured.py --points VALIDATE.json
        the (N, A) of the experts rows `harness validate --table-rows K --format json` re-measured,
        one "N A" line each (every route local, M = N k), for `harness bench experts --tokens N
        --activated A`
    tools/rows-remeasured.py --validate V1.json [V2.json ...] [--bench B1.csv [B2.csv ...]]
        per row the table's time, every run of both protocols and the device that measured the row;
        then, per such device, this GPU's runs against the table (signed median, range), the bench
        against validate (the median of each protocol's runs), and each protocol's run-to-run spread

Each validate file is one run of the same rows (`--seed` fixed); each bench file one run of a
`harness bench experts --csv` (several points per file). Errors name the file and the problem and
exit 1.
"""
import argparse
import csv
import json
import statistics
import sys


def fail(message):
    sys.exit(f"rows-remeasured: {message}")


def experts_rows(path):
    """{(N, A, M): point} of the experts table rows one validate run re-measured, and the table's
    devices (UUIDs by number) and this GPU's UUID."""
    try:
        with open(path) as f:
            run = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"{path}: {e}")
    rows, devices, now = {}, None, None
    for entry in run.get("entries", []):
        for c in entry.get("components", []):
            if c.get("component") != "experts":
                continue
            if devices is not None:
                fail(f"{path}: several entries with experts rows; validate one (--tp/--dp/--rank)")
            devices, now = entry.get("table_devices", []), entry.get("device")
            for p in c.get("table_rows", {}).get("points", []):
                try:
                    point = tuple(int(v) for v in p["point"])
                    rows[point] = {"table_us": float(p["table_us"]), "measured_us": float(p["measured_us"]),
                                   "devices": [int(d) for d in p.get("table_row_devices", [])]}
                except (KeyError, TypeError, ValueError) as e:
                    fail(f"{path}: a table row without {e}")
    if not rows:
        fail(f"{path}: no experts table rows re-measured (was validate run with --table-rows?)")
    return rows, devices or [], now


def bench_times(path):
    """{(N, A, M): median_us} of the experts rows of one bench CSV."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in ("component", "tokens", "activated", "assignments", "median_us")
                       if c not in (reader.fieldnames or [])]
            if missing:
                fail(f"{path}: no column {missing[0]} (is it a `harness bench experts --csv` file?)")
            out = {}
            for r in reader:
                if r["component"] == "experts":
                    out[(int(r["tokens"]), int(r["activated"]), int(r["assignments"]))] = float(r["median_us"])
            return out
    except OSError as e:
        fail(f"{path}: {e}")


def pct(x):
    return f"{100 * x:+.2f}%"


def summary(values):
    return f"signed median {pct(statistics.median(values))} ({pct(min(values))} … {pct(max(values))})"


def device_label(devices):
    """"#0", "#0+#4" for a row whose rounds ran on both, "?" where none is recorded."""
    return "+".join(f"#{d}" for d in devices) or "?"


def spread(runs):
    """Largest run over smallest, minus one."""
    return max(runs) / min(runs) - 1


def compare(validate_paths, bench_paths):
    runs = [experts_rows(p) for p in validate_paths]
    rows, devices, now = runs[0]
    for path, (other, _, other_now) in zip(validate_paths[1:], runs[1:]):
        if set(other) != set(rows):
            fail(f"{path}: other rows than {validate_paths[0]} (run validate with the same --seed and --table-rows)")
        if other_now != now:
            fail(f"{path}: measured on {other_now}, {validate_paths[0]} on {now}: one GPU per comparison")
    bench_runs = [bench_times(p) for p in bench_paths]
    keyed = sorted(p for p in rows if p[1] > 0)
    for path, times in zip(bench_paths, bench_runs):
        absent = [p for p in keyed if p not in times]
        if absent:
            fail(f"{path}: no bench point at N={absent[0][0]} A={absent[0][1]} M={absent[0][2]}")
    print(f"{len(keyed)} experts rows re-measured on {now}: {len(runs)} validate runs, {len(bench_runs)} bench runs")
    print("N A M | table us (device) | validate runs | bench runs | validate/table-1 bench/table-1 bench/validate-1")
    by_device, bench_vs_validate, v_spread, b_spread = {}, [], [], []
    for p in keyed:
        table = rows[p]["table_us"]
        measured = [r[0][p]["measured_us"] for r in runs]
        benched = [b[p] for b in bench_runs]
        v = statistics.median(measured)
        device = tuple(rows[p]["devices"])
        group = by_device.setdefault(device, {"validate": [], "bench": []})
        group["validate"].append(v / table - 1)
        v_spread.append(spread(measured))
        line = (f"{p[0]} {p[1]} {p[2]} | {table:.1f} ({device_label(device)}) | " + " ".join(f"{m:.1f}" for m in measured) +
                " | " + " ".join(f"{b:.1f}" for b in benched) + f" | {pct(v / table - 1)}")
        if benched:
            b = statistics.median(benched)
            group["bench"].append(b / table - 1)
            bench_vs_validate.append(b / v - 1)
            b_spread.append(spread(benched))
            line += f" {pct(b / table - 1)} {pct(b / v - 1)}"
        print(line)
    for device, group in sorted(by_device.items()):
        names = ", ".join(devices[d] if 0 <= d < len(devices) else "unknown" for d in device) or "unknown"
        text = (f"rows of {device_label(device)} ({names}): {len(group['validate'])}, "
                f"this GPU against the table: validate {summary(group['validate'])}")
        if group["bench"]:
            text += f"; bench {summary(group['bench'])}"
        print(text)
    if bench_vs_validate:
        print(f"bench against validate, the same rows: {summary(bench_vs_validate)}")
    if len(runs) > 1:
        print(f"run to run (largest / smallest - 1): validate median {100 * statistics.median(v_spread):.2f}%, "
              f"max {100 * max(v_spread):.2f}%")
    if len(bench_runs) > 1:
        print(f"run to run (largest / smallest - 1): bench median {100 * statistics.median(b_spread):.2f}%, "
              f"max {100 * max(b_spread):.2f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", help="print the experts rows (N A) a validate run re-measured")
    ap.add_argument("--validate", nargs="+", help="validate --format json runs of the same rows")
    ap.add_argument("--bench", nargs="*", default=[], help="bench --csv runs at those rows")
    args = ap.parse_args()
    if bool(args.points) == bool(args.validate):
        fail("give --points or --validate")
    if args.points:
        rows, _, _ = experts_rows(args.points)
        for n, a, _ in sorted(p for p in rows if p[1] > 0):
            print(n, a)
        return
    compare(args.validate, args.bench)


if __name__ == "__main__":
    main()
