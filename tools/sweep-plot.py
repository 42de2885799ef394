#!/usr/bin/env python3
"""A plot of `harness bench experts --sweep` runs: time and floor against N, and the ratio to the
floor, as one self-contained SVG (for docs/native-backend.md).

    tools/sweep-plot.py RUN.csv [RUN.csv ...] --out sweep.svg [--model M] [--backend B]
                        [--title TEXT]

Each CSV is one run (the bench's --csv). The rows of `experts` for one model and backend are
plotted (--model / --backend pick them when a CSV holds several); every run is a line, each
point is marked by the configuration it ran (the CSV's `configuration`: the colour says the tile,
the shape which of that tile's configurations — schedule, pairs, hints), and the floor
(`floor_us`, the larger of the bytes and flops bounds) is a dashed line. Top panel: time against N,
both axes logarithmic; bottom panel: time / floor against N (logarithmic N, linear ratio).
A run that records its GPU (the CSV's `device_uuid`) is named with the end of its UUID. Prints
one summary line per run. Exit status 1 on an error (named), else 0.
"""
import argparse
import math
import sys
from xml.sax.saxutils import escape, quoteattr

from bench_csv import component_rows, one_gpu

RUN_COLOURS = ("#333333", "#888888", "#1f77b4", "#9467bd")
TILE_COLOURS = ("#d62728", "#2ca02c", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#bcbd22",
                "#7f7f7f")
SHAPES = ("circle", "square", "triangle", "diamond")
WIDTH, LEFT, RIGHT = 760, 70, 230
CHAR_W = 6.5  # px per character of 11 px sans-serif, generously: the legend must not be cut
TOP_H, BOTTOM_H, GAP, MARGIN = 300, 170, 60, 30


def read_run(path, model, backend):
    """{N: (median_us, floor_us, configuration)} of the run's experts rows for model and backend."""
    rows = component_rows(path, model, backend, columns=("floor_us",), positive=("median_us", "floor_us"))
    return {n: (float(r["median_us"]), float(r["floor_us"]), r["configuration"]) for n, r in rows.items()}


class Axis:
    """Maps a data range onto pixels, logarithmically or linearly."""

    def __init__(self, lo, hi, p0, p1, log):
        self.log = log
        self.lo, self.hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)
        if self.hi <= self.lo:
            self.hi = self.lo + 1
        self.p0, self.p1 = p0, p1

    def __call__(self, v):
        v = math.log10(v) if self.log else v
        return self.p0 + (v - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)

    def ticks(self):
        if self.log:  # decades, and 2x and 5x between them over at most 3 decades
            steps = (1, 2, 5) if self.hi - self.lo <= 3 else (1,)
            return [m * 10.0 ** d for d in range(math.floor(self.lo), math.ceil(self.hi) + 1) for m in steps
                    if self.lo - 1e-9 <= math.log10(m * 10.0 ** d) <= self.hi + 1e-9]
        step = 0.25 if self.hi - self.lo <= 1.5 else 0.5 if self.hi - self.lo <= 3 else 1.0
        first = math.ceil(self.lo / step) * step
        return [first + i * step for i in range(int((self.hi - first) / step + 1e-9) + 1)]


def label(v, log):
    return f"{v:g}" if not log or 1e-3 <= v < 1e5 else f"1e{round(math.log10(v))}"


def panel(out, title, x, y, y_log, ylabel):
    top, bottom = min(y.p0, y.p1), max(y.p0, y.p1)
    out.append(f'<text x="{LEFT}" y="{top - 8}" font-weight="bold">{escape(title)}</text>')
    out.append(f'<rect x="{LEFT}" y="{top}" width="{WIDTH - LEFT - RIGHT}" height="{bottom - top}" '
               'fill="none" stroke="#333"/>')
    for v in x.ticks():
        out.append(f'<line x1="{x(v):.1f}" x2="{x(v):.1f}" y1="{top}" y2="{bottom}" stroke="#ddd"/>'
                   f'<text x="{x(v):.1f}" y="{bottom + 14}" text-anchor="middle">{label(v, x.log)}</text>')
    for v in y.ticks():
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
                   f'<text x="{LEFT - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{label(v, y_log)}</text>')
    mid = (top + bottom) / 2
    out.append(f'<text x="16" y="{mid}" transform="rotate(-90 16 {mid})" text-anchor="middle">'
               f'{escape(ylabel)}</text>')


def tile_of(configuration):
    """The tile a configuration names ("wide96" of "wide96 tile (96 tokens, ...)")."""
    return configuration.split(" tile", 1)[0]


def marker_styles(configurations):
    """{configuration: (colour, shape)}: a colour per tile, a shape per configuration of that tile,
    so that no two configurations look alike (up to len(SHAPES) of one tile)."""
    tiles = sorted({tile_of(c) for c in configurations})
    styles = {}
    for i, t in enumerate(tiles):
        mine = sorted(c for c in configurations if tile_of(c) == t)
        for j, c in enumerate(mine):
            styles[c] = (TILE_COLOURS[i % len(TILE_COLOURS)], SHAPES[j % len(SHAPES)])
    return styles


def marker(shape, cx, cy, size, fill, attributes="", title=None):
    """An SVG element of `shape` centred on (cx, cy), with data-x / data-y saying the centre and
    `title` as its tooltip."""
    common = f'{attributes} data-x="{cx:.1f}" data-y="{cy:.1f}" fill="{fill}"'
    if shape == "circle":
        tag, geometry = "circle", f'cx="{cx:.1f}" cy="{cy:.1f}" r="{size:.1f}"'
    elif shape == "square":
        tag, geometry = "rect", (f'x="{cx - size:.1f}" y="{cy - size:.1f}" width="{2 * size:.1f}" '
                                 f'height="{2 * size:.1f}"')
    else:
        r = size * 1.3
        corners = ([(cx, cy - r), (cx + r, cy + r * 0.8), (cx - r, cy + r * 0.8)] if shape == "triangle"
                   else [(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)])
        tag, geometry = "polygon", 'points="' + " ".join(f"{px:.1f},{py:.1f}" for px, py in corners) + '"'
    if title is None:
        return f"<{tag} {common} {geometry}/>"
    return f"<{tag} {common} {geometry}><title>{escape(title)}</title></{tag}>"


def polyline(out, cls, series, colour, coords, dashed=False):
    dash = ' stroke-dasharray="5 3"' if dashed else ""
    pts = " ".join(f"{px:.1f},{py:.1f}" for px, py in coords)
    out.append(f'<polyline class={quoteattr(cls)} data-series={quoteattr(series)} fill="none" '
               f'stroke="{colour}" stroke-width="1.2"{dash} points="{pts}"/>')


def render(runs, names, title):
    ns = sorted({n for run in runs for n in run})
    times = [v for run in runs for us, floor, _ in run.values() for v in (us, floor)]
    ratios = [us / floor for run in runs for us, floor, _ in run.values()]
    configurations = sorted({c for run in runs for _, _, c in run.values()})
    style = marker_styles(configurations)
    top0 = MARGIN + 20
    x = Axis(ns[0], ns[-1], LEFT, WIDTH - RIGHT, True)
    y_time = Axis(min(times), max(times), top0 + TOP_H, top0, True)
    b0 = top0 + TOP_H + GAP
    y_ratio = Axis(min(1.0, min(ratios)), max(ratios) * 1.05, b0 + BOTTOM_H, b0, False)
    height = b0 + BOTTOM_H + 40
    legend = [("line", "#1f77b4", "floor", True)] + [
        ("line", RUN_COLOURS[i % len(RUN_COLOURS)], name, False) for i, name in enumerate(names)] + [
        ("dot", style[c], c, False) for c in configurations]
    lx = WIDTH - RIGHT + 12
    # Wide enough for the longest legend entry (configurations name tile, schedule and pairs).
    width = max(WIDTH, math.ceil(lx + 22 + CHAR_W * max(len(text) for *_, text, _ in legend) + 8))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{LEFT}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>']
    panel(out, "time (us) against tokens N", x, y_time, True, "us")
    panel(out, "time / floor", x, y_ratio, False, "ratio to the floor")
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{height - 8}" text-anchor="middle">'
               'tokens N (log)</text>')
    floor = {}
    for run in runs:
        for n, (_, f, _) in run.items():
            floor.setdefault(n, f)
    polyline(out, "floor", "floor", "#1f77b4", [(x(n), y_time(floor[n])) for n in sorted(floor)], True)
    for i, (run, name) in enumerate(zip(runs, names)):
        colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        pts = sorted(run.items())
        polyline(out, "time", name, colour, [(x(n), y_time(us)) for n, (us, _, _) in pts])
        polyline(out, "ratio", name, colour, [(x(n), y_ratio(us / f)) for n, (us, f, _) in pts])
        for n, (us, f, c) in pts:
            fill, shape = style[c]
            tip = f"{name}: N={n} {us:g} us, {us / f:.2f}x the floor, {c}"
            for cls, py in (("time", y_time(us)), ("ratio", y_ratio(us / f))):
                attributes = f'class="{cls}" data-run={quoteattr(name)} data-tokens="{n}" data-us="{us:g}"'
                out.append(marker(shape, x(n), py, 2.4, fill, attributes, tip))
    for i, (kind, look, text, dashed) in enumerate(legend):  # look: a line's colour, a dot's style
        ly = top0 + 14 * i
        if kind == "line":
            dash = ' stroke-dasharray="5 3"' if dashed else ""
            out.append(f'<line x1="{lx}" x2="{lx + 16}" y1="{ly}" y2="{ly}" stroke="{look}"{dash}/>')
        else:
            fill, shape = look
            out.append(marker(shape, lx + 8, ly, 3.2, fill))
        out.append(f'<text x="{lx + 22}" y="{ly + 4}">{escape(text)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="bench CSVs, one sweep each")
    ap.add_argument("--out", required=True, help="the SVG to write")
    ap.add_argument("--model")
    ap.add_argument("--backend")
    ap.add_argument("--title")
    args = ap.parse_args()
    try:
        runs = [read_run(p, args.model, args.backend) for p in args.runs]
        gpus = [one_gpu([p]) for p in args.runs]
    except (OSError, ValueError) as e:
        print(f"sweep-plot: {e}", file=sys.stderr)
        return 1
    # Runs on two GPUs of one kind differ by a few percent: each run names its GPU where it
    # records one (the end of its UUID).
    names = [f"run {i + 1}" + (f", GPU …{gpu[-8:]}" if gpu else "") for i, gpu in enumerate(gpus)]
    title = args.title or "harness bench experts --sweep"
    with open(args.out, "w") as f:
        f.write(render(runs, names, title))
    for name, path, run in zip(names, args.runs, runs):
        ratios = [us / f for us, f, _ in run.values()]
        print(f"{name} ({path}): {len(run)} points, N {min(run)}-{max(run)}, "
              f"{min(ratios):.2f}-{max(ratios):.2f}x the floor")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
