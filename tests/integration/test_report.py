"""harness report: one self-contained HTML page with one inline SVG plot per published table (plus
the co-location plot), rendered in headless Chromium; the screenshot must not be blank. Skipped
(77) only when Chromium is not installed."""
import os
import re
import shutil
import subprocess
import tempfile
import zlib
import struct

import yaml

from harness_test_lib import HARNESS, SOURCE_DIR, mpirun_cmd, run

chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
if not chromium:
    print("skipped: Chromium is not installed")
    raise SystemExit(77)


def png_colors(path):
    """Distinct RGB colors of an 8-bit RGB/RGBA PNG (decoded with zlib, no imaging library)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    bpp = 3 if ctype == 2 else 4
    raw, stride, prev, colors = zlib.decompress(idat), width * bpp, bytearray(width * bpp), set()
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:
            for x in range(0, width, 4):
                colors.add(bytes(line[x * bpp:x * bpp + 3]))
        prev = line
    return colors


job = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")
with tempfile.TemporaryDirectory() as tmp:
    root = os.path.join(tmp, "bundles")
    run(mpirun_cmd(2, "acquire", "--unverified", job, "--out", os.path.join(tmp, "acq"), "--out-root", root, "--quiet"))
    p = run(mpirun_cmd(2, "colocate", job, "--out", os.path.join(tmp, "acq"), "--out-root", root, "--quick"),
            check=False)
    assert p.returncode in (0, 3), p.stderr  # passed, or stopped: the report shows either
    html = os.path.join(tmp, "report.html")
    p = run([HARNESS, "report", os.path.join(root, "micro"), "--out", html])
    page = open(html).read()
    tables = len(re.findall(r"<svg class=\"plot\" data-table=\"moe_components/|<svg class=\"plot\" data-table=\"collectives/",
                            page))
    csvs = [f for _, _, fs in os.walk(os.path.join(root, "micro")) for f in fs
            if f in ("components.csv", "collectives.csv")]
    assert tables == len(csvs) == 5, (tables, csvs)
    # Predicted against measured held-out points: one plot per component table, with y = x.
    held_out_plots = re.findall(r"<svg class=\"plot\" data-table=\"held_out/moe_components/.*?</svg>", page)
    assert len(held_out_plots) == 3, len(held_out_plots)
    assert all('class="diagonal"' in p and "<circle" in p for p in held_out_plots)
    # Each component table states the clock its rows ran at; the CPU backend has none to state.
    assert page.count('<p class="clock">mean SM clock of the rows: ') == 3, page.count('class="clock"')
    assert "gate_routing not recorded;" in page and "experts not recorded;" in page
    assert 'data-table="row_clocks/' not in page  # no row has a clock to plot
    assert page.count('data-table="colocation"') == 1
    # A series keeps its colour across plots: every legend entry of one name has one colour.
    legend = {}
    for colour, name in re.findall(r'<rect x="[^"]+" y="[^"]+" width="10" height="10" fill="([^"]+)"/>'
                                   r'<text x="[^"]+" y="[^"]+">([^<]+)</text>', page):
        legend.setdefault(name, set()).add(colour)
    assert {"gate_routing", "wrapper"} <= legend.keys() and any(n.startswith("experts A=") for n in legend), legend
    assert all(len(c) == 1 for c in legend.values()), legend
    assert sum(1 for n in legend if n == "gate_routing") == 1 and page.count(">gate_routing</text>") >= 3
    # The header says what the page shows, and that a CPU run is not GPU data.
    assert "backend cpu_reference · device host CPU · geometry tiny (H=64, I=32, E=8, k=2)" in page, page[:600]
    assert "CPU RUN: host-side figures of the cpu_reference backend" in page
    assert "<h2>Sanity</h2>" in page and "http" not in page.replace("http://www.w3.org/2000/svg", "")
    # A left-out point breaks its experts line (a gap), instead of a step to a smaller M.
    meta_path = os.path.join(root, "micro", "meta.yaml")
    meta_text = open(meta_path).read()
    meta = yaml.safe_load(meta_text)
    entry = meta["per_tp"][1]["moe_components"]["entries"][0]
    rows = [r.split(",") for r in open(os.path.join(root, "micro", "tp1", entry["path"])).read().splitlines()[1:]]
    by_a = {}
    for r in rows:
        if r[0] == "experts" and int(r[3]) > 0:
            by_a.setdefault(int(r[3]), {}).setdefault(int(r[2]), []).append(int(r[4]))
    # A CPU run on shared cores can fail B/2B checks of its own; mark a point on a line that has none.
    experts_fidelity = entry["coverage"]["fidelity"]["components"]["experts"]
    already_failed = {f[1] for f in experts_fidelity["failed_points"]}
    a, ns = max(((a, ns) for a, ns in by_a.items() if a not in already_failed), key=lambda kv: len(kv[1]))
    n = sorted(ns)[len(ns) // 2]
    def series_lines(html_text, table, name):
        svg = re.search(r'<svg class="plot" data-table="' + re.escape(table) + r'".*?</svg>', html_text, re.S).group(0)
        return len(re.findall(r'<polyline class="series" data-series="' + re.escape(name) + '"', svg))
    assert series_lines(page, entry["path"], f"experts A={a}") == 1
    experts_fidelity["failed_points"].append([n, a, max(ns[n]) + 1])
    with open(meta_path, "w") as f:
        yaml.safe_dump(meta, f, sort_keys=False)
    run([HARNESS, "report", os.path.join(root, "micro"), "--out", html])
    gapped = open(html).read()
    assert series_lines(gapped, entry["path"], f"experts A={a}") == 2, (a, n)
    open(meta_path, "w").write(meta_text)
    shot = os.path.join(tmp, "report.png")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1000,1600", f"file://{html}"], check=True, capture_output=True, timeout=120)
    colors = png_colors(shot)
    assert len(colors) > 8, f"screenshot looks blank ({len(colors)} colors)"
    # A backend with a device clock (the staircase model's, 1980 - 5 N MHz): each table also plots
    # the clock of its rows against tokens, on a linear axis with whole-MHz ticks.
    run(mpirun_cmd(1, "acquire", os.path.join(SOURCE_DIR, "tests/data/staircase.yaml"), "--out-root", root,
                   "--quiet"))
    run([HARNESS, "report", os.path.join(root, "staircase"), "--out", html])
    clock_page = open(html).read()
    (svg,) = re.findall(r'<svg class="plot" data-table="row_clocks/moe_components/.*?</svg>', clock_page, re.S)
    assert "mean SM clock of each row" in svg and "mean SM clock (MHz)" in svg
    series = set(re.findall(r'<polyline class="series" data-series="([^"]+)"', svg))
    assert {"gate_routing", "wrapper"} <= series and any(n.startswith("experts A=") for n in series), series
    ticks = [int(t) for t in re.findall(r'<text class="y-tick"[^>]*>(-?\d+)</text>', svg)]
    assert len(ticks) >= 3 and ticks == sorted(ticks), ticks
    assert 1600 <= ticks[0] and ticks[-1] <= 2000 and len({b - a for a, b in zip(ticks, ticks[1:])}) == 1, ticks
print(f"ok: {tables} table plots, screenshot with {len(colors)} colors")
