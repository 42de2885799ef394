"""tools/tile-rule-check.py on bench CSVs written here with known times: a rule sweep and one
forced sweep per tile. Where the rule's tile is the fastest forced tile (or within the tolerance)
it passes and prints every point with the right fastest tile and ratio; where it is slower by more
it exits 3 naming the point; a tile the rule picks but nobody swept is listed as not compared; and
the error paths (a forced file that ran several tiles, a tile forced twice, a forced sweep missing
one of the rule's points, not a bench CSV)."""
import csv
import os
import subprocess
import sys
import tempfile

from harness_test_lib import SOURCE_DIR, on_gpu

TOOL = [sys.executable, os.path.join(SOURCE_DIR, "tools/tile-rule-check.py")]
HEADER = ["component", "model", "backend", "tokens", "activated", "assignments", "median_us", "floor_us",
          "configuration"]
NS = [16, 1024, 2314, 4096]
# Per forced tile, its time at each N (made up; medium fastest at 1024, wide96 at 2314, wide at 4096).
TIMES = {"narrow": [190.0, 900.0, 2000.0, 3000.0],
         "medium": [214.0, 340.0, 620.0, 1100.0],
         "wide96": [230.0, 360.0, 535.0, 800.0],
         "wide": [240.0, 400.0, 600.0, 620.0]}


def config(tile):
    return f"{tile} tile (tokens, wgmma, pipelined)"


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows(rows)


def sweep(tiles_by_n, times_by_n):
    return [["experts", "qwen3-30b-a3b", "native", n, 128, 8 * n, f"{times_by_n[i]}", "100", config(tiles_by_n[i])]
            for i, n in enumerate(NS)]


def check(*args):
    return subprocess.run(TOOL + list(args), capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    p = lambda name: os.path.join(tmp, name)
    forced = []
    for tile, times in TIMES.items():
        write(p(f"{tile}.csv"), sweep([tile] * len(NS), times))
        forced.append(p(f"{tile}.csv"))

    # The rule picks the fastest tile everywhere (its own run's times differ: not what is compared).
    write(p("rule.csv"), sweep(["narrow", "medium", "wide96", "wide"], [1.0, 1.0, 1.0, 1.0]))
    r = check(p("rule.csv"), *forced)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    lines = {int(line.split()[0]): line.split() for line in r.stdout.splitlines() if line.split()[0].isdigit()}
    assert sorted(lines) == NS, r.stdout
    # N, rows/expert (assignments / activated = 8N / 128), the four times, fastest, rule, ratio.
    assert lines[2314] == ["2314", f"{8 * 2314 / 128:.1f}", "2000.0", "620.0", "535.0", "600.0", "wide96", "wide96",
                           "1.000"], lines[2314]
    assert "within 2.0% of it at 4 of 4 compared points" in r.stdout, r.stdout

    # The rule's wide at 2314 is 600 / 535 - 1 = 12% slower than wide96: exit 3, the point named;
    # with a tolerance above that it passes.
    write(p("rule2.csv"), sweep(["narrow", "medium", "wide", "wide"], [1.0] * 4))
    r = check(p("rule2.csv"), *forced)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "N=2314: the rule's wide took 12.1% longer than wide96" in r.stdout, r.stdout
    assert "at 3 of 4 compared points" in r.stdout, r.stdout
    assert check(p("rule2.csv"), *forced, "--tolerance", "0.15").returncode == 0

    # Narrow not swept: its points are listed as not compared, the rest still checked.
    r = check(p("rule.csv"), *forced[1:])
    assert r.returncode == 0 and "not compared (the rule's tile was not swept): N = 16" in r.stdout, r.stdout
    assert "at 3 of 3 compared points" in r.stdout, r.stdout

    # Every sweep from one GPU (device_uuid): said where the files record it, refused where one
    # ran on another GPU or records none beside files that do; files without the column say so.
    assert "GPU not checked: the sweeps record none (device_uuid)" in check(p("rule.csv"), *forced).stdout

    gpu_a = [on_gpu(p(f"{t}.csv"), "GPU-a") for t in TIMES]
    r = check(on_gpu(p("rule.csv"), "GPU-a"), *gpu_a)
    assert r.returncode == 0 and "GPU GPU-a" in r.stdout, (r.returncode, r.stdout, r.stderr)

    # Errors: one line naming the problem, exit 1.
    def expect_error(args, needle):
        r = check(*args)
        assert r.returncode == 1 and needle in r.stderr and r.stderr.count("\n") == 1, (args, r.returncode, r.stderr)

    expect_error([p("rule.csv"), p("rule.csv")], "rule.csv: not a forced-tile sweep: it ran tiles medium, narrow, wide, wide96")
    expect_error([p("rule.csv"), forced[0], forced[0]], "narrow.csv: tile narrow is forced in two files")
    write(p("short.csv"), sweep(["wide"] * len(NS), TIMES["wide"])[:3])
    expect_error([p("rule.csv"), p("short.csv")], "short.csv: no point at N=4096 of the rule's sweep")
    with open(p("notbench.csv"), "w") as f:
        f.write("component,tokens,median_us\nexperts,1,2\n")
    expect_error([p("notbench.csv"), forced[0]], "notbench.csv: no column model")
    expect_error([p("rule.csv"), p("missing.csv")], "missing.csv")
    expect_error([on_gpu(p("rule.csv"), "GPU-a"), gpu_a[0], on_gpu(p("wide.csv"), "GPU-b")],
                 "GPU-b-wide.csv ran on GPU-b, " + p("GPU-a-rule.csv") + " on GPU-a: compare runs of one GPU")
    expect_error([on_gpu(p("rule.csv"), "GPU-a"), gpu_a[0], forced[-1]],
                 "wide.csv records no GPU (device_uuid), " + p("GPU-a-rule.csv") + " on GPU-a")
print("ok")
