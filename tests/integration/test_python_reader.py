"""Reproducible interpolation: python/harness_reader.py, written from docs/bundle-format.md's
interpolation section alone (the stored triangulation, no harness code, no Qhull), answers like
the lookup library (through its C API) within 1e-12 relative at every published row and at
random feasible queries between them, and refuses the same queries; an edited triangulation.json
is refused by both."""
import os
import random
import subprocess
import sys
import tempfile

import yaml

from harness_test_lib import HARNESS, SOURCE_DIR, mpirun_cmd, run

sys.path.insert(0, os.path.join(SOURCE_DIR, "python"))
import harness_reader  # noqa: E402

CONSUMER = os.path.join(os.path.dirname(os.path.dirname(HARNESS)), "lookup", "lookup_c_consumer")


def library(variant, tp, dp, queries):
    answers = []
    for first in range(0, len(queries), 200):  # the consumer takes at most 256 queries a run
        chunk = queries[first:first + 200]
        lines = [f"component {c} {n} {a} {m}" for c, n, a, m in chunk]
        out = subprocess.run([CONSUMER, variant, str(tp), str(dp)], input="\n".join(lines) + "\n",
                             capture_output=True, text=True, check=True).stdout.splitlines()
        answers += [None if line.startswith("error") else float(line.split()[0]) for line in out[:len(chunk)]]
    return answers


def library_held_out(variant, tp, dp, queries):
    """The C API's held-out errors per query: (median, p95, max, count, routing class) or None."""
    lines = [f"held_out {c} {n} {a} {m}" for c, n, a, m in queries]
    out = subprocess.run([CONSUMER, variant, str(tp), str(dp)], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True).stdout.splitlines()
    answers = []
    for line in out[:len(queries)]:
        if line.startswith("error"):
            answers.append(None)
            continue
        median, p95, worst, count, balanced = line.split()
        answers.append((float(median), float(p95), float(worst), int(count),
                        {"1": "balanced", "0": "off_balance", "-1": None}[balanced]))
    return answers


def reader_held_out(table, query):
    h = table.held_out(*query)
    return None if h is None else (h["median"], h["p95"], h["max"], h["count"], h["routing"])


with tempfile.TemporaryDirectory() as tmp:
    run(mpirun_cmd(2, "acquire", "--unverified", os.path.join(SOURCE_DIR, "tests/data/micro.yaml"), "--out",
                   os.path.join(tmp, "acq"), "--out-root", tmp, "--quiet"))
    variant = os.path.join(tmp, "micro")
    meta = yaml.safe_load(open(os.path.join(variant, "meta.yaml")))
    rng = random.Random(12)
    compared = refused = held_checked = 0
    worst = 0.0
    for entry in meta["per_tp"][1]["moe_components"]["entries"]:
        dp, rank = entry["target"]["dp"], entry["target"]["rank"]
        if rank != 0:
            continue
        table = harness_reader.ComponentTable(variant, tp=1, dp=dp)
        cov = entry["coverage"]["triangulation"]
        assert cov and cov["file"] == "triangulation.json" and cov["simplices"] >= 1, cov
        rows = [r.split(",") for r in open(os.path.join(variant, "tp1", entry["path"])).read().splitlines()[1:]]
        queries = [(r[0], int(r[2]), int(r[3]), int(r[4])) for r in rows]
        experts = [q for q in queries if q[0] == "experts" and q[2] > 0]
        n_max = max(q[1] for q in experts)
        a_max = max(q[2] for q in experts)
        for _ in range(400):  # feasible for the deployment: M in [max(A, N(k-(E-L))), N min(k, A)]
            n = rng.randint(1, n_max)
            a = rng.randint(1, a_max)
            lo, hi = max(a, n * max(0, table.k - (table.e - table.l))), n * min(table.k, a)
            queries.append(("experts", n, a, rng.randint(lo, hi) if lo <= hi else lo))
        for c in ("gate_routing", "finalize_copy"):
            queries += [(c, rng.randint(1, 40), 0, 0) for _ in range(20)]
        want = library(variant, 1, dp, queries)
        for q, w in zip(queries, want):
            try:
                got = table.query(*q)
            except harness_reader.LookupError:
                got = None
            assert (got is None) == (w is None), (dp, q, got, w)
            if w is None:
                refused += 1
                continue
            assert abs(got - w) <= 1e-12 * abs(w), (dp, q, got, w, abs(got - w) / w)
            worst = max(worst, abs(got - w) / abs(w))
            compared += 1
        interior = sum(1 for q, w in zip(queries[len(rows):], want[len(rows):]) if w is not None and q[0] == "experts")
        assert interior >= 20, f"DP{dp}: only {interior} interpolated experts queries"
        # Held-out errors: the reader's routing class (from the docs' definition of balanced
        # routing) and statistics equal the library's, at balanced points and off them.
        balanced = [("experts", *table.balanced_point(n)) for n in range(1, n_max + 1) if table.balanced_point(n)]
        held_queries = balanced + [q for q in queries[len(rows):] if q[0] == "experts"][:120] + [
            ("gate_routing", 5, 0, 0)]
        classes = set()
        for q, w in zip(held_queries, library_held_out(variant, 1, dp, held_queries)):
            assert w is not None and reader_held_out(table, q) == w, (dp, q, reader_held_out(table, q), w)
            classes.add(w[4])
        assert {"balanced", "off_balance", None} <= classes, classes
        held_checked += len(held_queries)
    assert compared > 200 and refused > 20, (compared, refused)

    # A bundle published without held-out errors: the reader has none to give, the library refuses.
    meta_path = os.path.join(variant, "meta.yaml")
    meta_text = open(meta_path).read()
    bare = yaml.safe_load(meta_text)
    entry = bare["per_tp"][1]["moe_components"]["entries"][0]
    del entry["coverage"]["fidelity"]
    with open(meta_path, "w") as f:
        yaml.safe_dump(bare, f, sort_keys=False)
    query = ("experts", *harness_reader.ComponentTable(variant, tp=1, dp=entry["target"]["dp"]).balanced_point(4))
    assert harness_reader.ComponentTable(variant, tp=1, dp=entry["target"]["dp"]).held_out(*query) is None
    assert library_held_out(variant, 1, entry["target"]["dp"], [query]) == [None]
    open(meta_path, "w").write(meta_text)

    # A table row either reader would half read, or one the deployment could not have measured,
    # is refused by both, naming the line (the checksum signed again, as a publisher would).
    entry = meta["per_tp"][1]["moe_components"]["entries"][0]
    csv_path = os.path.join(variant, "tp1", entry["path"])
    table_text = open(csv_path).read()
    lines = table_text.splitlines()
    first = lines[1].split(",")  # component,mode,tokens,activated_experts,local_assignments,time_us
    damaged_rows = {"tokens 16abc": 2, "time inf": 5, "activated -1": 3, "time 0": 5}
    for what, field in damaged_rows.items():
        row = list(first)
        row[field] = what.split()[1]
        damaged = "\n".join([lines[0], ",".join(row)] + lines[2:]) + "\n"
        open(csv_path, "w").write(damaged)
        signed = yaml.safe_load(meta_text)
        signed["per_tp"][1]["moe_components"]["entries"][0]["coverage"]["table_sha256"] = \
            harness_reader._sha256(damaged.encode())
        with open(meta_path, "w") as f:
            yaml.safe_dump(signed, f, sort_keys=False)
        p = run([HARNESS, "lookup", variant, "--tp", "1", "--dp", str(entry["target"]["dp"]), "--component",
                 "gate_routing", "--tokens", "3"], check=False)
        assert p.returncode != 0 and "components.csv:2: " in p.stderr, (what, p.stderr)
        try:
            harness_reader.ComponentTable(variant, tp=1, dp=entry["target"]["dp"])
            raise AssertionError(f"the Python reader accepted a row with {what}")
        except harness_reader.LookupError as e:
            assert "components.csv:2: " in str(e), (what, str(e))
    open(csv_path, "w").write(table_text)
    open(meta_path, "w").write(meta_text)

    # An edited triangulation is refused by both readers.
    entry = meta["per_tp"][1]["moe_components"]["entries"][0]
    tri = os.path.join(variant, "tp1", os.path.dirname(entry["path"]), "triangulation.json")
    text = open(tri).read()
    open(tri, "w").write(text.replace('"simplices":[[', '"simplices":[[0,', 1) if '"simplices":[[' in text
                         else text + " ")
    p = run([HARNESS, "lookup", variant, "--tp", "1", "--dp", str(entry["target"]["dp"]), "--component",
             "experts", "--tokens", "3", "--activated", "2", "--assignments", "4"], check=False)
    assert p.returncode != 0 and "triangulation.json: checksum mismatch" in p.stderr, p.stderr
    try:
        harness_reader.ComponentTable(variant, tp=1, dp=entry["target"]["dp"])
        raise AssertionError("the Python reader accepted an edited triangulation")
    except harness_reader.LookupError:
        pass
    os.remove(tri)
    p = run([HARNESS, "lookup", variant, "--tp", "1", "--dp", str(entry["target"]["dp"]), "--component",
             "experts", "--tokens", "3", "--activated", "2", "--assignments", "4"], check=False)
    assert p.returncode != 0 and "triangulation.json: triangulation missing" in p.stderr, p.stderr
print(f"python reader: {compared} answers equal the library's within 1e-12 (largest relative difference "
      f"{worst:.1e}), {refused} refusals agree, {held_checked} held-out answers equal")
