#!/usr/bin/env python3
"""Compares a bundle's collective tables with NVIDIA nccl-tests on the same machine.

    tools/nccl-tests-compare.py --nccl-tests SRC --build-dir DIR --np 2 \
        --bundle OUT_ROOT/VARIANT [--bundle ...] --out compare.csv

It fetches nothing: SRC is an nccl-tests source tree the user provides. It builds it with MPI into
DIR (beside the project, `make MPI=1`; `--no-build` uses DIR as it is), then, for every row of the
bundles' collectives.csv whose group has --np ranks and whose size is within [--min-bytes,
--max-bytes], runs the matching nccl-tests binary one process per GPU at exactly that size
(`mpirun -np NP BIN -b BYTES -e BYTES -g 1 -d bfloat16 -n ITERS -w WARMUP`) and records its
out-of-place time. Sizes are in nccl-tests' own convention, which the bundle uses (the whole buffer;
one rank's send buffer for all-to-all). Writes one CSV row per (collective, size): the bundle's
kernel time (time_us), its steady-state time (steady_time_us), nccl-tests' time, and the ratios; and
prints the same as a table. Exit status 1 when a row misses --steady-tolerance or
--kernel-tolerance.
"""
import argparse
import csv
import glob
import os
import shlex
import subprocess
import sys

BINARIES = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
            "reduce_scatter": "reduce_scatter_perf", "all_to_all": "alltoall_perf"}


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def parse_nccl_tests(output):
    """{size_bytes: (out_of_place_time_us, busbw_gbps)} from an nccl-tests run's stdout.

    Data lines: size count type redop root time algbw busbw #wrong (out-of-place), then the same
    for in-place. Lines starting with '#' are headers and comments."""
    rows = {}
    for line in output.splitlines():
        fields = line.split()
        if not fields or line.lstrip().startswith("#") or not fields[0].isdigit():
            continue
        if len(fields) < 9:
            raise ValueError(f"unexpected nccl-tests data line: {line!r}")
        rows[int(fields[0])] = (float(fields[5]), float(fields[7]))
    if not rows:
        raise ValueError("no data lines in the nccl-tests output (did it fail?)")
    return rows


def bundle_rows(variant):
    paths = sorted(glob.glob(os.path.join(variant, "tp*", "collectives", "*", "collectives.csv")))
    if not paths:
        sys.exit(f"nccl-tests-compare: no tp*/collectives/*/collectives.csv under {variant}")
    for path in paths:
        for row in csv.DictReader(open(path)):
            yield path, row


def build(src, build_dir):
    mpicc = subprocess.run(["which", "mpicc"], capture_output=True, text=True).stdout.strip()
    mpi_home = os.path.dirname(os.path.dirname(os.path.realpath(mpicc))) if mpicc else "/usr"
    show = subprocess.run(["mpicc", "--showme:incdirs"], capture_output=True, text=True)
    if show.returncode == 0 and show.stdout.strip():
        mpi_home = os.path.dirname(show.stdout.split()[0])
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cmd = ["make", "-C", os.path.join(src, "src"), f"-j{os.cpu_count()}", "MPI=1", f"MPI_HOME={mpi_home}",
           f"CUDA_HOME={cuda}", f"NCCL_HOME={os.environ.get('NCCL_HOME', cuda)}",
           f"BUILDDIR={os.path.abspath(build_dir)}"]
    if os.environ.get("NVCC_GENCODE"):
        cmd.append(f"NVCC_GENCODE={os.environ['NVCC_GENCODE']}")
    print("building nccl-tests:", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nccl-tests", help="nccl-tests source tree (not needed with --no-build)")
    ap.add_argument("--build-dir", required=True, help="where the nccl-tests binaries are built")
    ap.add_argument("--no-build", action="store_true", help="use --build-dir as it is")
    ap.add_argument("--bundle", action="append", required=True, help="OUT_ROOT/VARIANT (repeatable)")
    ap.add_argument("--np", type=int, required=True, help="processes (one per GPU)")
    ap.add_argument("--out", required=True, help="comparison CSV")
    ap.add_argument("--min-bytes", default="1M")
    ap.add_argument("--max-bytes", default="64M")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--mpirun", default="mpirun --allow-run-as-root -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE")
    ap.add_argument("--steady-tolerance", type=float, default=0.03)
    ap.add_argument("--kernel-tolerance", type=float, default=0.05)
    a = ap.parse_args()

    lo, hi = parse_size(a.min_bytes), parse_size(a.max_bytes)
    cases = {}  # (op, bytes) -> [(collective, time_us, steady_us, bundle csv)]
    skipped = 0
    for variant in a.bundle:
        for path, row in bundle_rows(variant):
            if "steady_time_us" not in row:
                sys.exit(f"nccl-tests-compare: {path} has no steady_time_us column (an older bundle)")
            size = int(row["bytes"])
            if int(row["group_size"]) != a.np or not lo <= size <= hi:
                skipped += 1
                continue
            cases.setdefault((row["op"], size), []).append(
                (row["collective"], float(row["time_us"]), float(row["steady_time_us"]), path))
    if not cases:
        sys.exit(f"nccl-tests-compare: no collective row of group size {a.np} within "
                 f"[{a.min_bytes}, {a.max_bytes}] ({skipped} rows outside)")
    if not a.no_build:
        if not a.nccl_tests:
            sys.exit("nccl-tests-compare: --nccl-tests SRC is needed to build (or pass --no-build)")
        build(a.nccl_tests, a.build_dir)

    out_rows, misses = [], 0
    for (op, size), rows in sorted(cases.items()):
        binary = os.path.join(a.build_dir, BINARIES[op])
        cmd = shlex.split(a.mpirun) + ["-np", str(a.np), binary, "-b", str(size), "-e", str(size),
                                       "-g", "1", "-d", "bfloat16", "-n", str(a.iters), "-w", str(a.warmup)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"nccl-tests-compare: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        parsed = parse_nccl_tests(p.stdout)
        if size not in parsed:
            sys.exit(f"nccl-tests-compare: nccl-tests reported sizes {sorted(parsed)}, not {size}")
        ref_us, ref_busbw = parsed[size]
        for collective, time_us, steady_us, path in rows:
            steady_ratio, kernel_ratio = steady_us / ref_us, time_us / ref_us
            ok = abs(steady_ratio - 1) <= a.steady_tolerance and abs(kernel_ratio - 1) <= a.kernel_tolerance
            misses += not ok
            out_rows.append({"collective": collective, "op": op, "group_size": a.np, "bytes": size,
                             "time_us": time_us, "steady_time_us": steady_us, "nccl_tests_us": ref_us,
                             "nccl_tests_busbw_gbps": ref_busbw, "steady_over_nccl_tests": round(steady_ratio, 4),
                             "kernel_over_nccl_tests": round(kernel_ratio, 4), "within": ok, "table": path})
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out_rows[0]))
        w.writeheader()
        w.writerows(out_rows)
    print("| collective | bytes | kernel µs | steady µs | nccl-tests µs | steady/ref | kernel/ref |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in out_rows:
        print(f"| {r['collective']} | {r['bytes']} | {r['time_us']:.1f} | {r['steady_time_us']:.1f} | "
              f"{r['nccl_tests_us']:.1f} | {r['steady_over_nccl_tests']:.3f} | {r['kernel_over_nccl_tests']:.3f} |")
    print(f"{len(out_rows)} rows, {misses} outside ±{a.steady_tolerance:.0%} (steady) / "
          f"±{a.kernel_tolerance:.0%} (kernel); {skipped} bundle rows outside the size range or group")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
