"""tools/nccl-tests-compare.py without a GPU: its parser on nccl-tests output recorded on an H200,
then the whole comparison against a bundle of real mpi_host collective tables, with stand-ins for
mpirun and the nccl-tests binaries that print nccl-tests' format (time = bytes / 1000 µs), and its
error paths."""
import csv
import importlib.util
import os
import stat
import subprocess
import sys
import tempfile

from harness_test_lib import SOURCE_DIR, mpirun_cmd, run

spec = importlib.util.spec_from_file_location("compare", os.path.join(SOURCE_DIR, "tools/nccl-tests-compare.py"))
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)
data = os.path.join(SOURCE_DIR, "tests/data/nccl-tests")

# 1. The recorded outputs: out-of-place time and bus bandwidth per size; in-place is ignored.
ar = compare.parse_nccl_tests(open(os.path.join(data, "all_reduce_perf-1xH200.out")).read())
assert ar == {1048576: (5.13, 0.0), 2097152: (7.94, 0.0), 4194304: (7.03, 0.0)}, ar
a2a = compare.parse_nccl_tests(open(os.path.join(data, "alltoall_perf-1xH200.out")).read())
assert a2a[2097152] == (5.72, 0.0) and len(a2a) == 3, a2a
for bad in ("# only comments\n", "     1048576   524288  bfloat16  sum\n"):
    try:
        compare.parse_nccl_tests(bad)
        raise AssertionError(f"accepted {bad!r}")
    except ValueError:
        pass
assert compare.parse_size("64M") == 64 << 20 and compare.parse_size("4096") == 4096

STAND_IN = '''#!/usr/bin/env python3
import sys
size = int(sys.argv[sys.argv.index("-b") + 1])
assert sys.argv[sys.argv.index("-e") + 1] == str(size) and sys.argv[sys.argv.index("-d") + 1] == "bfloat16"
print("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong")
print(f"{size:12d} {size // 2:12d}  bfloat16     sum      -1  {size / 1000:8.2f}    1.00    1.00       0  {size / 999:8.2f}    1.00    1.00       0")
'''

with tempfile.TemporaryDirectory() as tmp:
    root = os.path.join(tmp, "bundles")
    run(mpirun_cmd(2, "acquire", "--unverified", os.path.join(SOURCE_DIR, "tests/data/micro.yaml"), "--out",
                   os.path.join(tmp, "acq"), "--out-root", root, "--quiet"))
    bins = os.path.join(tmp, "bin")
    os.makedirs(bins)
    for name in compare.BINARIES.values():
        path = os.path.join(bins, name)
        open(path, "w").write(STAND_IN)
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    mpirun = os.path.join(tmp, "mpirun")
    open(mpirun, "w").write('#!/bin/sh\n[ "$1" = -np ] && shift 2\nexec "$@"\n')
    os.chmod(mpirun, 0o755)
    out = os.path.join(tmp, "compare.csv")
    tool = [sys.executable, os.path.join(SOURCE_DIR, "tools/nccl-tests-compare.py")]
    args = ["--no-build", "--build-dir", bins, "--np", "2", "--bundle", os.path.join(root, "micro"),
            "--out", out, "--min-bytes", "1", "--mpirun", mpirun]
    p = subprocess.run(tool + args, capture_output=True, text=True)
    assert p.returncode in (0, 1), p.stderr
    rows = list(csv.DictReader(open(out)))
    bundle = []
    for dirpath, _, files in os.walk(os.path.join(root, "micro")):
        if "collectives.csv" in files:
            bundle += [r for r in csv.DictReader(open(os.path.join(dirpath, "collectives.csv")))
                       if r["group_size"] == "2"]
    assert len(rows) == len(bundle) > 0, (len(rows), len(bundle))
    ops = {r["op"] for r in rows}
    assert "all_to_all" in ops and "all_gather" in ops, ops
    misses = 0
    for r in rows:
        ref = round(int(r["bytes"]) / 1000, 2)
        assert float(r["nccl_tests_us"]) == ref, r
        assert abs(float(r["steady_over_nccl_tests"]) - float(r["steady_time_us"]) / ref) < 1e-3, r
        assert abs(float(r["kernel_over_nccl_tests"]) - float(r["time_us"]) / ref) < 1e-3, r
        misses += r["within"] == "False"
    assert p.returncode == (1 if misses else 0), (p.returncode, misses)
    assert f"{len(rows)} rows, {misses} outside" in p.stdout, p.stdout

    # Error paths: one clear message each, non-zero exit.
    for extra, needle in ((["--bundle", tmp], "no tp*/collectives"),
                          (["--max-bytes", "0"], "no collective row of group size 2")):
        p = subprocess.run(tool + args + extra if extra[0] != "--bundle" else
                           tool + ["--no-build", "--build-dir", bins, "--np", "2", "--out", out] + extra,
                           capture_output=True, text=True)
        assert p.returncode != 0 and needle in p.stderr, (extra, p.stderr)
    p = subprocess.run(tool + [a for a in args if a != "--no-build"], capture_output=True, text=True)
    assert p.returncode != 0 and "--nccl-tests SRC is needed" in p.stderr, p.stderr
print(f"ok: parser on recorded H200 output; {len(rows)} bundle rows compared")
