"""tools/gpu-check.sh's sanitizer step without a GPU: a stand-in `compute-sanitizer` first on PATH
records every run (tool and test filter) and fails the one named in $FAIL_FILTER. Every run must
happen whichever fails, each must say its exit status and time, and a failure of any run, the
first as much as the last, must fail the step."""
import glob
import os
import shutil
import tempfile

from harness_test_lib import gpu_check, write_executable

FAKE = """#!/usr/bin/env python3
import os, sys
args = sys.argv[1:]
tool = args[args.index("--tool") + 1]
flt = next(a for a in args if a.startswith("--gtest_filter=")).split("=", 1)[1]
assert args[args.index("--error-exitcode") + 1] == "9", args
assert args[-2].endswith("kernels/kernels_gpu_tests"), args
with open(os.environ["RUNS_FILE"], "a") as f:
    f.write(f"{tool} {flt}\\n")
sys.exit(9 if os.environ.get("FAIL_FILTER") == flt else 0)
"""


def sanitizer_step(out, path, **env):
    return gpu_check(os.path.join(tmp, "build"), out, "sanitizer", PATH=path, **env)


with tempfile.TemporaryDirectory() as tmp:
    bindir = os.path.join(tmp, "bin")
    write_executable(os.path.join(bindir, "compute-sanitizer"), FAKE)
    path = bindir + os.pathsep + os.environ["PATH"]

    # Every run passes: the step is ok, and the log says each run's status.
    runs_ok = os.path.join(tmp, "runs-ok")
    p = sanitizer_step(os.path.join(tmp, "ok"), path, RUNS_FILE=runs_ok)
    assert p.returncode == 0 and "== sanitizer ok" in p.stdout, (p.stdout, p.stderr)
    runs = open(runs_ok).read().splitlines()
    tools = [r.split()[0] for r in runs]
    assert len(runs) >= 5 and "racecheck" in tools and "memcheck" in tools, runs
    log = open(os.path.join(tmp, "ok", "sanitizer.log")).read()
    for r in runs:
        assert f"-- {r}: exit 0 (" in log, (r, log)

    # The first run fails (the last passes): the step fails, and every later run still happens.
    first = runs[0].split(" ", 1)[1]
    runs_fail = os.path.join(tmp, "runs-fail")
    p = sanitizer_step(os.path.join(tmp, "fail"), path, RUNS_FILE=runs_fail, FAIL_FILTER=first)
    assert p.returncode != 0 and "== sanitizer FAILED" in p.stdout, (p.stdout, p.stderr)
    assert open(runs_fail).read().splitlines() == runs
    assert f"-- {runs[0]}: exit 9 (" in open(os.path.join(tmp, "fail", "sanitizer.log")).read()

    # A failing middle run fails the step as well.
    middle = runs[len(runs) // 2].split(" ", 1)[1]
    p = sanitizer_step(os.path.join(tmp, "middle"), path, RUNS_FILE=os.path.join(tmp, "runs-middle"),
                  FAIL_FILTER=middle)
    assert p.returncode != 0 and "== sanitizer FAILED" in p.stdout, (p.stdout, p.stderr)

    # Without compute-sanitizer the step says so and passes (where none is installed here).
    if not shutil.which("compute-sanitizer") and not glob.glob("/usr/local/cuda*/bin/compute-sanitizer"):
        p = sanitizer_step(os.path.join(tmp, "none"), os.environ["PATH"])
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert "compute-sanitizer not installed: skipped" in open(os.path.join(tmp, "none", "sanitizer.log")).read()
print("ok")
