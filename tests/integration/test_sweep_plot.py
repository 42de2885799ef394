"""tools/sweep-plot.py on bench CSVs written here (the bench's columns) with known times: every run
is a line through its points, the points sit where their N, time and ratio to the floor put them
on the logarithmic and linear axes, they are marked by configuration (a colour per tile, a shape
per configuration of the tile), and its error paths
(not a bench CSV, several models unpicked, no rows for the pick, a repeated N, a non-positive
time, an unreadable file)."""
import csv
import math
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from harness_test_lib import SOURCE_DIR, on_gpu

TOOL = [sys.executable, os.path.join(SOURCE_DIR, "tools/sweep-plot.py")]
HEADER = ["component", "model", "backend", "tokens", "activated", "assignments", "median_us", "floor_us",
          "configuration"]
SVG = "{http://www.w3.org/2000/svg}"
NS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def floor_us(n):
    return 20.0 * n ** 0.5


def ratio(n, run):
    return 1.1 + 0.1 * math.log2(n) / 10 + 0.05 * run


def tile(n):
    if n <= 2:
        return "narrow tile (16 tokens, routes planned in the W13 blocks)"
    return "narrow tile (16 tokens)" if n <= 16 else "wide tile (128 tokens, wgmma)"


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for r in rows:
            w.writerow(r)


def sweep_rows(run, model="qwen3-30b-a3b"):
    return [["experts", model, "native", n, 8, 8 * n, f"{floor_us(n) * ratio(n, run):.6f}", f"{floor_us(n):.6f}",
             tile(n)] for n in NS]


def plot(*args):
    return subprocess.run(TOOL + list(args), capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    p = lambda name: os.path.join(tmp, name)
    # The bench also writes gate_routing rows and other backends' rows; only experts of the pick plot.
    write(p("r1.csv"), sweep_rows(0) + [["gate_routing", "qwen3-30b-a3b", "native", 4, 0, 0, "9", "1", "cuBLAS"]])
    write(p("r2.csv"), sweep_rows(1))
    r = plot(p("r1.csv"), p("r2.csv"), "--out", p("s.svg"), "--title", "a <sweep>")
    assert r.returncode == 0, r.stderr
    assert f"run 1 ({p('r1.csv')}): 11 points, N 1-1024, 1.10-1.20x the floor" in r.stdout, r.stdout
    assert f"run 2 ({p('r2.csv')}): 11 points, N 1-1024, 1.15-1.25x the floor" in r.stdout, r.stdout

    svg = ET.parse(p("s.svg")).getroot()
    assert any(t.text == "a <sweep>" for t in svg.iter(SVG + "text")), "title"
    lines = {(e.get("class"), e.get("data-series")): e.get("points").split() for e in svg.iter(SVG + "polyline")}
    assert set(lines) == {("floor", "floor"), ("time", "run 1"), ("time", "run 2"), ("ratio", "run 1"),
                          ("ratio", "run 2")}, set(lines)
    assert all(len(pts) == len(NS) for pts in lines.values()), {k: len(v) for k, v in lines.items()}

    dots = [c for c in svg.iter() if c.get("data-run")]
    assert len(dots) == 2 * 2 * len(NS), len(dots)
    for cls in ("time", "ratio"):
        for run in (0, 1):
            mine = sorted((int(c.get("data-tokens")), float(c.get("data-x")), float(c.get("data-y")), c)
                          for c in dots if c.get("class") == cls and c.get("data-run") == f"run {run + 1}")
            assert [n for n, *_ in mine] == NS
            # The polyline of the run passes through its points, in order of N.
            assert [f"{cx:.1f},{cy:.1f}" for _, cx, cy, _ in mine] == lines[(cls, f"run {run + 1}")]
            # x is logarithmic in N: equal steps for the doublings (to the SVG's 0.1 px rounding).
            steps = [b[1] - a[1] for a, b in zip(mine, mine[1:])]
            assert max(steps) - min(steps) <= 0.2 and min(steps) > 0, steps
            # y: logarithmic in time (top panel), linear in the ratio (bottom panel); higher is up.
            value = (lambda n: math.log10(floor_us(n) * ratio(n, run))) if cls == "time" else (lambda n: ratio(n, run))
            (n0, _, y0, _), (n1, _, y1, _) = mine[0], mine[-1]
            scale = (y1 - y0) / (value(n1) - value(n0))
            assert scale < 0, scale
            for n, _, y, _ in mine:
                assert abs(y0 + (value(n) - value(n0)) * scale - y) <= 0.15, (cls, run, n, y)
    # The ratio panel is below the time panel.
    assert min(float(c.get("data-y")) for c in dots if c.get("class") == "ratio") > \
        max(float(c.get("data-y")) for c in dots if c.get("class") == "time")
    # One marker (colour and shape) per configuration, the same in both runs and panels; the two
    # narrow configurations share the tile's colour and differ in shape, the wide tile has another.
    looks = {}
    for c in dots:
        looks.setdefault(tile(int(c.get("data-tokens"))), set()).add((c.get("fill"), c.tag))
    assert all(len(v) == 1 for v in looks.values()) and len(looks) == 3, looks
    look = {k: v.pop() for k, v in looks.items()}
    planned, narrow, wide = tile(1), tile(8), tile(64)
    assert look[planned][0] == look[narrow][0] != look[wide][0], look
    assert look[planned][1] != look[narrow][1], look
    # The legend shows each configuration with its marker.
    legend = {t.text: t for t in svg.iter(SVG + "text")}
    assert {planned, narrow, wide} <= set(legend), sorted(legend)

    # The legend is not cut: the plot is as wide as its longest entry needs (at a generous 6.5 px
    # per character of the 11 px font), so a longer configuration widens it.
    def legend_fits(path):
        root = ET.parse(path).getroot()
        width = float(root.get("width"))
        for t in root.iter(SVG + "text"):
            assert float(t.get("x", 0)) + 6.5 * len(t.text or "") <= width or t.get("text-anchor"), \
                (t.text, t.get("x"), width)
        return width
    short_width = legend_fits(p("s.svg"))
    long_tile = "wide96 tile (96 tokens, wgmma, clustered in 66 pairs of SMs, routes planned elsewhere)"
    write(p("long.csv"), [r[:8] + [long_tile if r[3] > 16 else r[8]] for r in sweep_rows(0)])
    r = plot(p("long.csv"), "--out", p("long.svg"))
    assert r.returncode == 0, r.stderr
    assert legend_fits(p("long.svg")) > short_width >= 760

    # Runs that record their GPU (device_uuid) name it, by the end of its UUID: the legend, the
    # lines and the summary; a run that records none stays "run N".
    r = plot(on_gpu(p("r1.csv"), "GPU-f24dca47-f6fd-fca5-5e33-e14e7c0364b6"), p("r2.csv"), "--out", p("g.svg"))
    assert r.returncode == 0, r.stderr
    assert "run 1, GPU …7c0364b6 (" in r.stdout and "run 2 (" in r.stdout, r.stdout
    svg = ET.parse(p("g.svg")).getroot()
    assert {"run 1, GPU …7c0364b6", "run 2"} <= {t.text for t in svg.iter(SVG + "text")}
    assert ("time", "run 1, GPU …7c0364b6") in {(e.get("class"), e.get("data-series"))
                                                for e in svg.iter(SVG + "polyline")}

    # Errors: one line naming the problem, exit 1, no plot written.
    def expect_error(args, needle):
        out = p("err.svg")
        r = plot(*args, "--out", out)
        assert r.returncode == 1 and needle in r.stderr, (args, r.returncode, r.stderr)
        assert not os.path.exists(out), args

    with open(p("notbench.csv"), "w") as f:
        f.write("component,tokens,median_us\nexperts,1,2\n")
    expect_error([p("notbench.csv")], "no column model")
    write(p("two.csv"), sweep_rows(0) + sweep_rows(0, model="deepseek-v3"))
    expect_error([p("two.csv")], "several models (deepseek-v3, qwen3-30b-a3b): pick one with --model")
    expect_error([p("r1.csv"), "--model", "qwen3-235b-a22b"], "no experts rows of model qwen3-235b-a22b")
    write(p("twice.csv"), sweep_rows(0) + sweep_rows(0)[:1])
    expect_error([p("twice.csv")], "N=1 appears twice")
    bad = sweep_rows(0)
    bad[3][7] = "0"
    write(p("bad.csv"), bad)
    expect_error([p("bad.csv")], "N=8: tokens, median_us and floor_us must be positive")
    expect_error([p("missing.csv")], "missing.csv")
    # --model picks one of several.
    r = plot(p("two.csv"), "--model", "deepseek-v3", "--out", p("ds.svg"))
    assert r.returncode == 0 and "11 points" in r.stdout, r.stderr
print("ok")
