"""tools/gpu-check.sh's sweep step without a GPU: a stand-in `harness` (a script in a build
directory of its own) writes each sweep's CSV as `harness bench experts --sweep --csv` would, and
the step must run it twice, plot both runs (tools/sweep-plot.py), and report a failed check of
either run as a failed step while still writing the plot; an unknown step is refused."""
import csv
import os
import tempfile
import xml.etree.ElementTree as ET

from harness_test_lib import gpu_check, write_executable

FAKE = """#!/usr/bin/env python3
# Stand-in for `harness bench experts --sweep --csv FILE`: three points; exits 3 (a failed sweep
# check) on the run named in $FAIL_RUN, counting runs in $COUNT_FILE.
import os, sys
args = sys.argv[1:]
assert args[:3] == ["bench", "experts", "--sweep"], args
path = args[args.index("--csv") + 1]
count_file = os.environ["COUNT_FILE"]
run = int(open(count_file).read() or 0) + 1 if os.path.exists(count_file) else 1
open(count_file, "w").write(str(run))
with open(path, "w") as f:
    f.write("component,model,backend,tokens,median_us,floor_us,configuration\\n")
    for n, us, floor in ((1, 28.0 + run, 17.8), (64, 290.0, 281.0), (4096, 800.0, 349.0)):
        f.write(f"experts,qwen3-30b-a3b,native,{n},{us},{floor},tile {n}\\n")
print(f"sweep run {run}")
sys.exit(3 if os.environ.get("FAIL_RUN") == str(run) else 0)
"""



with tempfile.TemporaryDirectory() as tmp:
    build = os.path.join(tmp, "build")
    write_executable(os.path.join(build, "harness", "harness"), FAKE)

    # Both runs pass: two CSVs, one plot with both runs, the step is ok.
    out = os.path.join(tmp, "ok")
    p = gpu_check(build, out, "sweep", COUNT_FILE=os.path.join(tmp, "count-ok"))
    assert p.returncode == 0 and "== sweep ok" in p.stdout, (p.stdout, p.stderr)
    for run in (1, 2):
        rows = list(csv.DictReader(open(os.path.join(out, f"sweep{run}.csv"))))
        assert rows[0]["median_us"] == f"{28.0 + run}", rows
    svg = ET.parse(os.path.join(out, "sweep.svg")).getroot()
    runs = {e.get("data-series") for e in svg.iter("{http://www.w3.org/2000/svg}polyline")
            if e.get("class") == "time"}
    assert runs == {"run 1", "run 2"}, runs
    log = open(os.path.join(out, "sweep.log")).read()
    assert "sweep run 1" in log and "sweep run 2" in log and "wrote" in log, log

    # The second run's check fails: the step fails, and both CSVs and the plot are still written.
    out = os.path.join(tmp, "fail")
    p = gpu_check(build, out, "sweep", COUNT_FILE=os.path.join(tmp, "count-fail"), FAIL_RUN="2")
    assert p.returncode != 0 and "== sweep FAILED" in p.stdout, (p.stdout, p.stderr)
    assert all(os.path.exists(os.path.join(out, f)) for f in ("sweep1.csv", "sweep2.csv", "sweep.svg"))

    p = gpu_check(build, os.path.join(tmp, "x"), "no_such_step")
    assert p.returncode == 2 and "unknown step 'no_such_step'" in p.stderr, (p.returncode, p.stderr)
print("ok")
