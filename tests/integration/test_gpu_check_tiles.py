"""tools/gpu-check.sh's tiles step without a GPU: a stand-in `harness` writes each sweep's CSV as
`harness bench experts --sweep --csv` would, with the tile that HARNESS_NATIVE_TILE forces (or the
rule's, unforced) and exit status 3 as a sweep whose own checks failed. The step must run the rule's
sweep and one per tile of $TILES, tolerate exit 3, check the rule (tools/tile-rule-check.py) and
fail when the rule's tile is not the fastest, or when a sweep fails otherwise."""
import csv
import os
import tempfile

from harness_test_lib import gpu_check, write_executable

FAKE = """#!/usr/bin/env python3
# Stand-in for `harness bench experts --sweep --csv FILE`: two points; the rule picks medium at
# N = 64 and $RULE_AT_4096 at N = 4096; wide is the fastest there. Exits 3 (the sweep's own checks)
# always, and 5 for the tile named in $CRASH_TILE.
import os, sys
args = sys.argv[1:]
assert args[:3] == ["bench", "experts", "--sweep"], args
path = args[args.index("--csv") + 1]
tile = os.environ.get("HARNESS_NATIVE_TILE")
times = {"medium": (300.0, 900.0), "wide": (320.0, 700.0)}
with open(path, "w") as f:
    f.write("component,model,backend,tokens,activated,assignments,median_us,floor_us,configuration\\n")
    for i, n in enumerate((64, 4096)):
        ran = tile or ("medium" if n == 64 else os.environ["RULE_AT_4096"])
        f.write(f"experts,qwen3-30b-a3b,native,{n},128,{8 * n},{times[ran][i]},280,{ran} tile (x)\\n")
print(f"sweep {tile or 'rule'}")
sys.exit(5 if tile is not None and tile == os.environ.get("CRASH_TILE") else 3)
"""

with tempfile.TemporaryDirectory() as tmp:
    build = os.path.join(tmp, "build")
    write_executable(os.path.join(build, "harness", "harness"), FAKE)

    # The rule picks wide at 4096, the fastest: ok, although every sweep exited 3.
    out = os.path.join(tmp, "ok")
    p = gpu_check(build, out, "tiles", TILES="medium wide", RULE_AT_4096="wide")
    assert p.returncode == 0 and "== tiles ok" in p.stdout, (p.stdout, p.stderr)
    for name in ("rule", "medium", "wide"):
        rows = list(csv.DictReader(open(os.path.join(out, f"tiles-{name}.csv"))))
        assert len(rows) == 2, rows
    assert not os.path.exists(os.path.join(out, "tiles-narrow.csv"))  # not in $TILES
    log = open(os.path.join(out, "tiles.log")).read()
    assert "sweep rule" in log and "sweep medium" in log and "at 2 of 2 compared points" in log, log

    # The rule picks medium at 4096, 900 / 700 - 1 = 29% slower than wide: the step fails.
    out = os.path.join(tmp, "slow")
    p = gpu_check(build, out, "tiles", TILES="medium wide", RULE_AT_4096="medium")
    assert p.returncode != 0 and "== tiles FAILED" in p.stdout, (p.stdout, p.stderr)
    assert "N=4096: the rule's medium took 28.6% longer than wide" in p.stdout, p.stdout

    # A sweep that fails other than by its checks fails the step, and the others still run.
    out = os.path.join(tmp, "crash")
    p = gpu_check(build, out, "tiles", TILES="medium wide", RULE_AT_4096="wide", CRASH_TILE="medium")
    assert p.returncode != 0 and "== tiles FAILED" in p.stdout, (p.stdout, p.stderr)
    assert os.path.exists(os.path.join(out, "tiles-wide.csv"))
print("ok")
