"""tools/alignment-comb.py on component tables written here with a known comb: rows whose N is a
multiple of 8 run 0.8x a smooth curve, others 1.0x, so classes 8 and up report 0.800 and classes
1, 2 and 4 report 1.000 in every range; the other modes are reported apart; and its error paths
(unreadable file, missing column, absent component, rows varying in A, a bad --split)."""
import csv
import os
import re
import subprocess
import sys
import tempfile

from harness_test_lib import SOURCE_DIR

TOOL = [sys.executable, os.path.join(SOURCE_DIR, "tools/alignment-comb.py")]
HEADER = ["component", "mode", "tokens", "activated_experts", "local_assignments", "time_us"]


def write(path, rows, header=HEADER):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def comb(*args):
    return subprocess.run(TOOL + list(args), capture_output=True, text=True)


def smooth(n):
    return 6.0 + 0.002 * n  # linear: a row's odd neighbours straddle it, so their median is its value


with tempfile.TemporaryDirectory() as tmp:
    p = lambda name: os.path.join(tmp, name)
    tokens = list(range(1, 600)) + list(range(600, 5000, 7)) + list(range(2048, 5000, 64))
    rows = [["gate_routing", "eager", n, 0, 0, smooth(n) * (0.8 if n % 8 == 0 else 1.0)] for n in sorted(set(tokens))]
    rows += [["gate_routing", "graph", n, 0, 0, smooth(n)] for n in range(1, 200)]
    rows += [["experts", "eager", 64, 8, 512, 100.0], ["experts", "eager", 64, 9, 512, 110.0]]
    write(p("t.csv"), rows)
    r = comb(p("t.csv"), "--split", "512,2048")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    section = lines.index(next(l for l in lines if l.startswith("gate_routing eager:")))
    eager = lines[section:lines.index(next(l for l in lines if l.startswith("gate_routing graph:")))]
    found = {}
    for line in eager:
        m = re.match(r"\s+(\S+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", line)
        if m:
            found[(m[1], int(m[2]))] = (int(m[3]), float(m[4]), float(m[5]), float(m[6]))
    assert {r for r, _ in found} == {"1-511", "512-2047", "2048-"}, found
    for (span, c), (count, median, low, high) in found.items():
        want = 0.8 if c >= 8 else 1.0
        assert count > 0 and abs(median - want) < 0.002 and abs(low - want) < 0.03 and abs(high - want) < 0.03, (span, c, found[(span, c)])
    assert ("2048-", 64) in found and ("1-511", 8) in found, found
    # The graph mode has no comb: every class at 1.000.
    graph = [l for l in lines[lines.index(next(l for l in lines if l.startswith("gate_routing graph:"))):]]
    assert graph and all(" 1.000 " in l for l in graph if re.match(r"\s+1-511\s", l)), graph

    # Error paths: one line on stderr naming the problem, exit 1.
    write(p("cols.csv"), [["gate_routing", 8, 1.0]], header=["component", "tokens", "time_us"])
    for args, needle in (([p("none.csv")], "cannot read"),
                         ([p("cols.csv")], "no column mode, activated_experts, local_assignments"),
                         ([p("t.csv"), "--component", "finalize_copy"], "has no rows of component finalize_copy"),
                         ([p("t.csv"), "--component", "experts"], "vary in activated experts"),
                         ([p("t.csv"), "--split", "x"], "--split x")):
        r = comb(*args)
        assert r.returncode == 1 and needle in r.stderr and r.stdout == "", (args, r.stdout, r.stderr)
print("ok")
