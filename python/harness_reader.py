"""A pure-Python reader of harness bundles: loads one deployment's component table and answers
queries exactly as the lookup library does, following docs/bundle-format.md#interpolation and
#held-out-errors and nothing else (no harness code, no Qhull). Needs PyYAML for meta.yaml.

    from harness_reader import ComponentTable
    t = ComponentTable("out/qwen3-30b-a3b", tp=1, dp=1)
    t.query("experts", tokens=1500, activated=128, assignments=12000)   # microseconds
    t.held_out("experts", tokens=1500, activated=128, assignments=12000)  # its held-out errors
    t.spans_launch_wave_step("experts", 1500, 128, 12000)  # its vertices run different waves?
"""
import csv
import hashlib
import io
import json
import math
import os
import re

import yaml

HULL_TOLERANCE = 1e-6      # |frame(y) - q/scale|, normalized coordinates
WEIGHT_TOLERANCE = 1e-9    # barycentric weights down to -1e-9 count as inside
NEGLIGIBLE_WEIGHT = 1e-12  # weights at or below it are round-off of a query on a face


class LookupError(Exception):
    pass


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


_WHOLE = re.compile(r"-?[0-9]+")
_REAL = re.compile(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?")


def _whole(field, where):
    """A table's count, read whole ("16abc", " 16" and "1e3" are not 16 or 1000)."""
    if not _WHOLE.fullmatch(field):
        raise LookupError(f"{where}: malformed number: '{field}' is not a whole number")
    return int(field)


def _real(field, where):
    """A table's time: the whole field, finite."""
    if not _REAL.fullmatch(field) or not math.isfinite(float(field)):
        raise LookupError(f"{where}: malformed number: '{field}' is not a finite number")
    return float(field)


def _round(x):
    """Nearest integer, halves away from zero (as C's llround), for x >= 0."""
    return int(math.floor(x + 0.5))


def _invert(d, m):
    """The inverse of a d x d row-major matrix (d <= 3) by the explicit formulas; None if flat."""
    if d == 1:
        return None if abs(m[0]) < 1e-14 else [1.0 / m[0]]
    if d == 2:
        det = m[0] * m[3] - m[1] * m[2]
        if abs(det) < 1e-14:
            return None
        return [m[3] / det, -m[1] / det, -m[2] / det, m[0] / det]
    det = (m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6])
           + m[2] * (m[3] * m[7] - m[4] * m[6]))
    if abs(det) < 1e-14:
        return None
    return [(m[4] * m[8] - m[5] * m[7]) / det, (m[2] * m[7] - m[1] * m[8]) / det,
            (m[1] * m[5] - m[2] * m[4]) / det, (m[5] * m[6] - m[3] * m[8]) / det,
            (m[0] * m[8] - m[2] * m[6]) / det, (m[2] * m[3] - m[0] * m[5]) / det,
            (m[3] * m[7] - m[4] * m[6]) / det, (m[1] * m[6] - m[0] * m[7]) / det,
            (m[0] * m[4] - m[1] * m[3]) / det]


class _Mesh:
    """The stored triangulation over the experts rows with A > 0."""

    def __init__(self, points, t):
        self.points = points
        self.d = t["dimension"]
        self.scale, self.origin, self.basis = t["scale"], t["origin"], t["basis"]
        self.projected = [self.project(p) for p in points]
        self.simplices = []
        for v in t["simplices"]:
            if len(v) != self.d + 1 or any(not 0 <= i < len(points) for i in v):
                raise LookupError("triangulation: a simplex does not index the points")
            v0 = self.projected[v[0]]
            m = [self.projected[v[c + 1]][r] - v0[r] for r in range(self.d) for c in range(self.d)]
            inverse = _invert(self.d, m)
            if inverse is None:
                raise LookupError("triangulation: a simplex is flat")
            self.simplices.append((v, inverse))

    def project(self, p):
        d = [p[a] / self.scale[a] - self.origin[a] for a in range(3)]
        return [d[0] * b[0] + d[1] * b[1] + d[2] * b[2] for b in self.basis]

    def locate(self, q):
        y = self.project(q)
        back = list(self.origin)
        for b, yb in zip(self.basis, y):
            for a in range(3):
                back[a] += yb * b[a]
        if any(abs(back[a] - q[a] / self.scale[a]) > HULL_TOLERANCE for a in range(3)):
            return None  # off the points' affine hull
        if self.d == 0:
            return [(0, 1.0)] if tuple(q) == tuple(self.points[0]) else None
        for v, inverse in self.simplices:  # the first simplex, in file order, that holds q
            v0 = self.projected[v[0]]
            lam, rest, inside = [0.0] * (self.d + 1), 1.0, True
            for r in range(self.d):
                l = 0.0
                for c in range(self.d):
                    l += inverse[r * self.d + c] * (y[c] - v0[c])
                lam[r + 1] = l
                rest -= l
                if l < -WEIGHT_TOLERANCE:
                    inside = False
                    break
            if not inside or rest < -WEIGHT_TOLERANCE:
                continue
            lam[0] = rest
            total = 0.0
            for l in lam:
                total += max(0.0, l)
            return [(v[k], max(0.0, lam[k]) / total) for k in range(self.d + 1) if max(0.0, lam[k]) > 0]
        return None


def _token_table(rows, tokens, what):
    """Piecewise linear over tokens; exact at a row; refuses outside the rows."""
    rows = sorted(rows)
    for n, t in rows:
        if n == tokens:
            return t
    if not rows or tokens < rows[0][0] or tokens > rows[-1][0]:
        raise LookupError(f"{what}: tokens={tokens} is outside the measured support")
    hi = next(i for i, (n, _) in enumerate(rows) if n > tokens)
    (n0, t0), (n1, t1) = rows[hi - 1], rows[hi]
    w = (tokens - n0) / (n1 - n0)
    return (1 - w) * t0 + w * t1


def _errors(held):
    """A held-out statistics block of coverage.fidelity as {count, median, p95, max}."""
    return {"count": held["count"], "median": held["median_abs_relative_error"],
            "p95": held["p95_abs_relative_error"], "max": held["max_abs_relative_error"]}


class ComponentTable:
    def __init__(self, variant_dir, tp, dp, rank=0, sp=None):
        meta = yaml.safe_load(open(os.path.join(variant_dir, "meta.yaml")))
        entries = [e for e in meta["per_tp"].get(tp, {}).get("moe_components", {}).get("entries", [])
                   if e["target"]["dp"] == dp and e["target"]["rank"] == rank
                   and (sp is None or e["target"]["sp"] == bool(sp))]
        if len(entries) != 1:
            raise LookupError(f"{len(entries)} entries for TP{tp} DP{dp} rank {rank}")
        entry = entries[0]
        path = os.path.join(variant_dir, f"tp{tp}", entry["path"])
        data = open(path, "rb").read()
        if _sha256(data) != entry["coverage"]["table_sha256"]:
            raise LookupError(f"{path}: checksum mismatch")
        geometry, ownership = entry["contract"]["geometry"], entry["contract"]["expert_ownership"]
        self.e, self.k, self.l = geometry["num_experts"], geometry["top_k"], ownership["local_experts"]
        self.local, self.all_remote, experts = {}, [], []
        for line, r in enumerate(csv.DictReader(io.StringIO(data.decode())), start=2):
            where = f"{path}:{line}"
            n, a, m = (_whole(r[c], where) for c in ("tokens", "activated_experts", "local_assignments"))
            t = _real(r["time_us"], where)
            if n < 1 or not t > 0:
                raise LookupError(f"{where}: non-positive tokens or time")
            # A row the deployment could not have measured is a corrupt table.
            if (r["component"] != "experts" and (a, m) != (0, 0)) or (
                    r["component"] == "experts" and not self._feasible(n, a, m)):
                raise LookupError(f"{where}: {r['component']}: the row at (N={n}, A={a}, M={m}) is impossible")
            if r["component"] != "experts":
                self.local.setdefault(r["component"], []).append((n, t))
            elif a == 0:
                self.all_remote.append((n, t))
            else:
                experts.append(((n, a, m), t))
        fidelity = entry["coverage"].get("fidelity")
        self.fidelity = fidelity["components"] if fidelity else None
        self._row_clocks = (os.path.dirname(path), fidelity.get("row_clocks_table")) if fidelity else None
        self._waves = None  # experts (N, A, M) -> launch_waves, read on first use
        self.exact = {p: t for p, t in experts}
        self.times = [t for _, t in experts]
        self.mesh = None
        if experts:
            cov = entry["coverage"]["triangulation"]
            tri = open(os.path.join(os.path.dirname(path), cov["file"]), "rb").read()
            if _sha256(tri) != cov["sha256"]:
                raise LookupError("triangulation checksum mismatch")
            self.mesh = _Mesh([tuple(float(c) for c in p) for p, _ in experts], json.loads(tri))

    def _feasible(self, n, a, m):
        e, k, l = self.e, self.k, self.l
        if n < 1:
            return False
        if a == 0 and m == 0:
            return e - l >= k
        return 1 <= a <= l and m >= a and m >= n * max(0, k - (e - l)) and m <= n * min(k, a)

    def balanced_point(self, tokens):
        """(N, A, M) of balanced routing at N (docs/bundle-format.md#held-out-errors), or None."""
        e, k, l, n = self.e, self.k, self.l, tokens
        a_lo, a_hi = max(1, k - (e - l)), min(l, n * k)
        if n < 1 or a_lo > a_hi:
            return None
        a = min(max(_round(l * (1.0 - (1.0 - k / e) ** n)), a_lo), a_hi)
        m_lo, m_hi = max(a, n * max(0, k - (e - l))), n * min(k, a)
        if m_lo > m_hi:
            return None
        return (n, a, min(max(_round(n * k * l / e), m_lo), m_hi))

    def held_out(self, component, tokens, activated=0, assignments=0):
        """How well the table predicted points it was not built from: {count, median, p95, max,
        routing} (routing "balanced" / "off_balance" for experts where the entry has both, else
        None); None when the entry records no held-out errors for the component."""
        if self.fidelity is None or component not in self.fidelity:
            return None
        held, routing = self.fidelity[component]["held_out"], None
        if component == "experts" and "by_routing" in held:
            balanced = self.balanced_point(tokens) == (tokens, activated, assignments)
            routing = "balanced" if balanced else "off_balance"
            held = held["by_routing"][routing]
        return dict(_errors(held), routing=routing)

    def held_out_across_wave_steps(self, component):
        """The held-out errors over the points whose prediction spanned a launch-wave step
        (held_out.by_waves.across_waves) as {count, median, p95, max}; None where not recorded."""
        if self.fidelity is None or component not in self.fidelity:
            return None
        held = self.fidelity[component]["held_out"].get("by_waves")
        if held is None:
            return None
        return _errors(held["across_waves"])

    def device_spread(self, component):
        """How far apart GPUs of the kind measured the same points (repeatability.by_device and
        device_anchors): {count, median, max, largest_offset}, count/median/max over the held-out
        points measured on two devices, largest_offset the signed median of the device pair
        furthest apart among pairs of at least 5 points of either record (0 where none); None
        where neither is recorded."""
        if self.fidelity is None or component not in self.fidelity:
            return None
        by_device = self.fidelity[component].get("repeatability", {}).get("by_device")
        anchors = self.fidelity[component].get("device_anchors")
        if by_device is None and anchors is None:
            return None
        across = by_device["across_devices"] if by_device is not None else {"count": 0}
        # (pair, its two devices); a device against itself (an anchor pair whose row and anchor
        # device are one) is no spread.
        pairs = []
        if by_device is not None:
            pairs += [(p, p["grid_device"], p["held_out_device"]) for p in by_device["device_pairs"]]
        if anchors is not None:
            pairs += [(p, p["row_device"], p["anchor_device"]) for p in anchors["device_pairs"]]
        offsets = [p["median_signed_relative_difference"] for p, a, b in pairs if p["count"] >= 5 and a != b]
        return {"count": across["count"],
                "median": across.get("median_abs_relative_difference", 0.0),
                "max": across.get("max_abs_relative_difference", 0.0),
                "largest_offset": max(offsets, key=abs, default=0.0)}

    def spans_launch_wave_step(self, component, tokens, activated, assignments):
        """Whether an experts answer's vertices run different launch waves (row_clocks.csv's
        launch_waves, docs/bundle-format.md#row_clockscsv); None for another component, an exact
        row, or a vertex whose waves are not recorded."""
        if component != "experts" or activated == 0 or (tokens, activated, assignments) in self.exact:
            return None
        self._require_feasible(tokens, activated, assignments)
        kept = self._kept_vertices(tokens, activated, assignments)
        if self._waves is None:
            self._waves = self._read_waves()
        waves = [self._waves.get(tuple(int(c) for c in self.mesh.points[v]), "") for v, _ in kept]
        if not waves or "" in waves:
            return None
        return len(set(waves)) > 1

    def _read_waves(self):
        if self._row_clocks is None or self._row_clocks[1] is None:
            return {}
        folder, named = self._row_clocks
        data = open(os.path.join(folder, named["file"]), "rb").read()
        if _sha256(data) != named["sha256"]:
            raise LookupError(f"{named['file']}: checksum mismatch")
        return {(int(r["tokens"]), int(r["activated_experts"]), int(r["local_assignments"])):
                r.get("launch_waves") or "" for r in csv.DictReader(io.StringIO(data.decode()))
                if r["component"] == "experts"}

    def query(self, component, tokens, activated=0, assignments=0):
        if component != "experts":
            if component not in self.local:
                raise LookupError(f"{component}: no measured rows")
            return _token_table(self.local[component], tokens, component)
        self._require_feasible(tokens, activated, assignments)
        if activated == 0:
            return _token_table(self.all_remote, tokens, "experts (all remote)")
        if (tokens, activated, assignments) in self.exact:
            return self.exact[(tokens, activated, assignments)]
        kept = self._kept_vertices(tokens, activated, assignments)
        total = 0.0
        for _, weight in kept:
            total += weight
        value = 0.0
        for v, weight in kept:
            value += weight / total * self.times[v]
        return value

    def _require_feasible(self, tokens, activated, assignments):
        if not self._feasible(tokens, activated, assignments):
            raise LookupError(f"experts: ({tokens}, {activated}, {assignments}) is impossible here")

    def _kept_vertices(self, tokens, activated, assignments):
        """(vertex, weight) of an off-row experts query, the weights of round-off left out
        (docs/bundle-format.md#interpolation, step 4); refused outside the measured support."""
        w = self.mesh.locate((float(tokens), float(activated), float(assignments))) if self.mesh else None
        if w is None:
            raise LookupError("experts: outside the measured support")
        return [(v, weight) for v, weight in w if weight > NEGLIGIBLE_WEIGHT]
