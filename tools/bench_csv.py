"""The rows of one component of a `harness bench experts --csv` file, for the tools that plot and
check sweeps and tables (tools/sweep-plot.py, tools/tile-rule-check.py, tools/step-rows-check.py),
the quantile the tools report, and the one GPU runs compared with each other came from
(tools/bench-ab.py, tools/tile-rule-check.py). Errors are ValueErrors naming the file and the problem."""
import csv

BASE = ("component", "model", "backend", "tokens", "median_us", "configuration")


def quantile(sorted_values, q):
    """The q-quantile of ascending values, interpolated between order statistics (as
    core/statistics.h)."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo])


def component_rows(path, model=None, backend=None, columns=(), positive=("median_us",), component="experts"):
    """{N: row} of the file's rows of `component` (default `experts`) of one model and backend
    (`model` / `backend` pick them where the file holds several), one row per N; `columns` are
    needed besides BASE, and the `positive` ones must be numbers above zero."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in BASE + tuple(columns) if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: no column {missing[0]} (is it a `harness bench experts --csv` file?)")
        rows = [r for r in reader if r["component"] == component]
    for name, value in (("model", model), ("backend", backend)):
        present = sorted({r[name] for r in rows})
        if value is None and len(present) > 1:
            raise ValueError(f"{path}: several {name}s ({', '.join(present)}): pick one with --{name}")
        rows = [r for r in rows if value is None or r[name] == value]
    if not rows:
        raise ValueError(f"{path}: no {component} rows" + (f" of model {model}" if model else "") +
                         (f" and backend {backend}" if backend else ""))
    points = {}
    for r in rows:
        n = int(r["tokens"])
        if n < 1 or not all(float(r[c]) > 0 for c in positive):
            names = ", ".join(positive[:-1]) + " and " + positive[-1] if len(positive) > 1 else positive[0]
            raise ValueError(f"{path}: N={n}: tokens, {names} must be positive")
        if n in points:
            raise ValueError(f"{path}: N={n} appears twice (one sweep per file)")
        points[n] = r
    return points


def one_gpu(paths):
    """The GPU (`device_uuid`) every one of `paths` ran on; None where none of them records it
    (files written before the bench wrote the column). A ValueError names the first file that ran
    on another GPU than the first, or records none beside files that do: runs compared with each
    other must come from one GPU, since GPUs of one kind differ by a few percent."""
    seen = []
    for path in paths:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            uuids = sorted({r["device_uuid"] for r in reader} if "device_uuid" in (reader.fieldnames or []) else set())
        if len(uuids) > 1:
            raise ValueError(f"{path}: rows of several GPUs ({', '.join(uuids)})")
        seen.append((path, uuids[0] if uuids and uuids[0] else None))
    if not any(uuid for _, uuid in seen):
        return None
    first_path, first = next((path, uuid) for path, uuid in seen if uuid)
    for path, uuid in seen:
        if uuid != first:
            where = f"ran on {uuid}" if uuid else "records no GPU (device_uuid)"
            raise ValueError(f"{path} {where}, {first_path} on {first}: compare runs of one GPU")
    return first
