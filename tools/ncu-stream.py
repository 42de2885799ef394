#!/usr/bin/env python3
"""How the native GEMMs stream, from Nsight Compute: one line per profiled kernel launch.

    tools/ncu-stream.py PROFILE.csv [PROFILE.csv ...]
    tools/ncu-stream.py --metrics        # the --metrics list for ncu

Each file is what `ncu --csv --page details --metrics $(tools/ncu-stream.py --metrics) ...`
printed (tools/gpu-check.sh's profile step writes profile-MODEL-N.csv); lines before ncu's
header row (the profiler's and the application's own output) are skipped. Per launch it prints
the duration, the DRAM read rate, the share of cycles the DRAM was active, the share the link
between the two halves of L2 was active (on the H200 the busiest unit of a weight stream), the
bytes L2 sent to the SMs per byte read from DRAM, the SM throughput and the SM clock
(docs/native-backend.md#what-the-medium-tiles-stream-rate-is-not; "-" where a launch read
nothing from DRAM). Exit status 1 when a file cannot be read, has no header or no column of the
details page, has no launch, lacks one of the metrics, or has a value that is not a number or a
unit this does not know (naming the file, the launch and the metric; the other files are still
summarised), else 0.
"""
import argparse
import csv
import sys

DURATION = "gpu__time_duration.sum"
DRAM_BYTES = "dram__bytes_read.sum"
DRAM_RATE = "dram__bytes_read.sum.per_second"
DRAM_ACTIVE = "dram__cycles_active.avg.pct_of_peak_sustained_elapsed"
FABRIC = "lts__ltcfabric2ltc_cycles_active.avg.pct_of_peak_sustained_elapsed"
L2_TO_SM_SECTORS = "lts__t_sectors_srcunit_tex_op_read.sum"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
SM_CLOCK = "sm__cycles_elapsed.avg.per_second"
METRICS = [DURATION, DRAM_BYTES, DRAM_RATE, DRAM_ACTIVE, FABRIC, L2_TO_SM_SECTORS, SM, SM_CLOCK]
SECTOR_BYTES = 32
COLUMNS = ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")

# Nsight Compute's units (it scales them to the value unless told --print-units base) and what
# one of each is in the unit this prints: µs, bytes, bytes per second, Hz, percent, sectors.
SCALES = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
TIME_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1, "usecond": 1, "ms": 1e3, "msecond": 1e3,
           "s": 1e6, "second": 1e6}


def to_base(value, unit, where):
    """The metric's value in this tool's unit for its kind."""
    try:
        number = float(value.replace(",", ""))
    except ValueError:
        raise ValueError(f"{where}: value '{value}' is not a number") from None
    if unit in TIME_US:
        return number * TIME_US[unit]
    if unit in ("%", "sector"):
        return number
    for base in ("byte/second", "byte/s", "byte", "hz"):
        prefix = unit[: len(unit) - len(base)] if unit.lower().endswith(base) else None
        if prefix is not None and prefix.upper() in SCALES:
            return number * SCALES[prefix.upper()]
    raise ValueError(f"{where}: unit '{unit}' is not one this knows")


def read(path):
    """The launches of one file, in order: (kernel name, {metric: value})."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        raise ValueError(f"{path}: no Nsight Compute CSV header (\"ID\",...)")
    rows = csv.DictReader(lines[start:])
    absent = [c for c in COLUMNS if c not in rows.fieldnames]
    if absent:
        raise ValueError(f"{path}: the Nsight Compute CSV has no column \"{absent[0]}\" "
                         f"(run ncu with --csv --page details)")
    launches = {}
    for row in rows:
        name = row.get("Metric Name")
        if not name or name not in METRICS:
            continue
        where = f"{path}: launch {row['ID']} ({row['Kernel Name'][:60]}), {name}"
        _, metrics = launches.setdefault(row["ID"], (row["Kernel Name"], {}))
        metrics[name] = to_base(row["Metric Value"], row["Metric Unit"], where)
    if not launches:
        raise ValueError(f"{path}: no launch with the stream metrics (run ncu with --metrics "
                         f"$(tools/ncu-stream.py --metrics))")
    for launch, (kernel, metrics) in launches.items():
        missing = [m for m in METRICS if m not in metrics]
        if missing:
            raise ValueError(f"{path}: launch {launch} ({kernel[:60]}) lacks {missing[0]}")
    return [launches[k] for k in sorted(launches, key=int)]


def short_name(kernel):
    """The kernel's name and template arguments, without namespaces and the parameter list."""
    # Nsight Compute prints the anonymous namespace as "unnamed>::" (its "<" lost).
    for prefix in ("void ", "(anonymous namespace)::", "unnamed>::", "moe::cuda::"):
        kernel = kernel.replace(prefix, "")
    depth = 0
    for i, c in enumerate(kernel):
        depth += (c == "<") - (c == ">")
        if c == "(" and depth == 0:
            return kernel[:i]
    return kernel


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="ncu --csv --page details output")
    ap.add_argument("--metrics", action="store_true", help="print the --metrics list for ncu")
    args = ap.parse_args()
    if args.metrics:
        print(",".join(METRICS))
        return 0
    if not args.files:
        ap.error("name at least one profile CSV (or --metrics)")
    print("file | kernel | µs | DRAM read TB/s | DRAM active % | L2 fabric % | L2 -> SM / DRAM bytes "
          "| SM % | SM GHz")
    status = 0
    for path in args.files:
        try:
            launches = read(path)
        except (OSError, ValueError) as e:
            print(f"ncu-stream: {e}", file=sys.stderr)
            status = 1  # the other files are still summarised
            continue
        for kernel, m in launches:
            # A launch that read nothing from DRAM (all of it in L2) has no such ratio.
            per_dram_byte = (f"{m[L2_TO_SM_SECTORS] * SECTOR_BYTES / m[DRAM_BYTES]:.2f}"
                             if m[DRAM_BYTES] > 0 else "-")
            print(f"{path} | {short_name(kernel)} | {m[DURATION]:.1f} | {m[DRAM_RATE] / 1e12:.2f} | "
                  f"{m[DRAM_ACTIVE]:.1f} | {m[FABRIC]:.1f} | {per_dram_byte} | {m[SM]:.1f} | "
                  f"{m[SM_CLOCK] / 1e9:.2f}")
    return status


if __name__ == "__main__":
    sys.exit(main())
