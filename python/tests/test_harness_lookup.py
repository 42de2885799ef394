"""The Python package against the CLI: the same answers at every published row and at random
points, NaN in a batch exactly where the CLI refuses, explain's vertices, collectives, errors."""
import json
import math
import os
import random
import shutil

import numpy as np
import pytest

import harness_lookup as hl
from conftest import harness


def rows(variant, dp):
    path = os.path.join(variant, "tp1", "moe_components", f"dp{dp}_ep{dp}_rank0_sp0", "components.csv")
    return [r.split(",") for r in open(path).read().splitlines()[1:]]


def cli(variant, dp, component, n, a=0, m=0):
    args = ["lookup", variant, "--tp", "1", "--dp", str(dp), "--component", component, "--tokens", str(n),
            "--format", "json"]
    if component == "experts":
        args += ["--activated", str(a), "--assignments", str(m)]
    p = harness(*args, check=False)
    return json.loads(p.stdout)["time_us"] if p.returncode == 0 else None


def points(variant, dp, count=60, seed=3):
    published = [(r[0], int(r[2]), int(r[3]), int(r[4])) for r in rows(variant, dp)]
    rng = random.Random(seed)
    experts = [p for p in published if p[0] == "experts"]
    n_max, a_max = max(p[1] for p in experts), max(p[2] for p in experts)
    bundle = hl.Bundle(variant, 1, dp)
    g = json.loads(bundle.contract_json)
    e, k, l = g["geometry"]["num_experts"], g["geometry"]["top_k"], g["expert_ownership"]["local_experts"]
    random_points = []
    for _ in range(count):
        n, a = rng.randint(1, n_max), rng.randint(1, a_max)
        lo, hi = max(a, n * max(0, k - (e - l))), n * min(k, a)
        random_points.append(("experts", n, a, rng.randint(lo, hi) if lo <= hi else lo))
    random_points += [("gate_routing", rng.randint(1, 40), 0, 0) for _ in range(10)]
    return published + random_points


@pytest.mark.parametrize("dp", [1, 2])
def test_answers_equal_the_cli(variant, dp):
    bundle = hl.Bundle(variant, 1, dp)
    answered = 0
    for c, n, a, m in points(variant, dp):
        want = cli(variant, dp, c, n, a, m)
        if want is None:
            with pytest.raises(hl.LookupError):
                bundle.query(c, n, a, m)
        else:
            assert bundle.query(c, n, a, m) == pytest.approx(want, rel=1e-12)
            answered += 1
    assert answered >= 20


def test_batch_is_the_single_queries_with_nan_where_refused(variant):
    bundle = hl.Bundle(variant, 1, 2)
    pts = [p for p in points(variant, 2) if p[0] == "experts"]
    n = np.array([p[1] for p in pts], dtype=np.int64)
    a = np.array([p[2] for p in pts], dtype=np.int64)
    m = np.array([p[3] for p in pts], dtype=np.int64)
    got = bundle.query_batch("experts", n, a, m)
    assert got.shape == (len(pts),)
    refused = 0
    for value, (c, ni, ai, mi) in zip(got, pts):
        try:
            assert value == bundle.query(c, ni, ai, mi)
        except hl.LookupError:
            assert math.isnan(value)
            refused += 1
    assert 0 < refused < len(pts)
    local = bundle.query_batch("gate_routing", np.array([1, 2, 3], dtype=np.int64))
    assert list(local) == [bundle.query("gate_routing", t) for t in (1, 2, 3)]
    with pytest.raises(hl.LookupError, match="same length"):
        bundle.query_batch("experts", n, a[:-1], m)


def test_explain_collectives_and_errors(variant):
    bundle = hl.Bundle(variant, 1, 2)
    assert set(bundle.components) >= {"gate_routing", "experts"}
    r = [row for row in rows(variant, 2) if row[0] == "experts" and int(row[3]) > 0][0]
    ex = bundle.explain("experts", int(r[2]), int(r[3]), int(r[4]))
    assert ex["exact"] and ex["vertices"][0]["weight"] == 1.0 and ex["time_us"] == float(r[5])
    c = bundle.collective("ep_dispatch", 3)
    assert c["time_us"] > 0 and c["bytes"] > 0
    with pytest.raises(hl.LookupError, match="unknown component 'shared'"):
        bundle.query("shared", 1)
    with pytest.raises(hl.LookupError, match="outside the measured support"):
        bundle.query("experts", 100000, 1, 1)
    with pytest.raises(ValueError):  # LookupError is a ValueError
        hl.Bundle(variant, 1, 7)
    with pytest.raises(hl.LookupError, match="measured"):
        hl.Bundle(variant, 1, 2, expect_device="H200")


@pytest.mark.parametrize("dp", [1, 2])
def test_held_out_errors_are_the_clis(variant, dp):
    bundle = hl.Bundle(variant, 1, dp)
    for c, n, a, m in points(variant, dp, count=12, seed=4):
        args = ["lookup", variant, "--tp", "1", "--dp", str(dp), "--component", c, "--tokens", str(n),
                "--format", "json"] + (["--activated", str(a), "--assignments", str(m)] if c == "experts" else [])
        p = harness(*args, check=False)
        if p.returncode != 0:
            continue
        assert bundle.held_out(c, n, a, m) == json.loads(p.stdout)["held_out"], (c, n, a, m)
    assert bundle.held_out("gate_routing", 3)["count"] > 0
    with pytest.raises(hl.LookupError, match="unknown component 'shared'"):
        bundle.held_out("shared", 1)


def test_launch_wave_steps_are_the_clis(staircase, variant):
    """explain says whether an answer's rows run different launch waves, and held_out_across_wave_steps
    gives the errors that then apply: both what `harness lookup --explain --format json` says."""
    bundle = hl.Bundle(staircase, 1, 1)
    seen = set()
    for n in range(3, 60, 2):
        for a in (2, 3, 5, 7):
            m = 2 * n  # EP1: every route local, M = N*k
            p = harness("lookup", staircase, "--tp", "1", "--dp", "1", "--component", "experts", "--tokens", str(n),
                        "--activated", str(a), "--assignments", str(m), "--explain", "--format", "json", check=False)
            if p.returncode != 0:
                continue
            want = json.loads(p.stdout)
            ex = bundle.explain("experts", n, a, m)
            assert ex["spans_launch_wave_step"] == want.get("spans_launch_wave_step"), (n, a, m, ex, want)
            seen.add(ex["spans_launch_wave_step"])
            if ex["spans_launch_wave_step"]:
                assert bundle.held_out_across_wave_steps("experts") == want["held_out_across_wave_steps"]
    assert {True, False} <= seen, seen
    assert bundle.explain("gate_routing", 7)["spans_launch_wave_step"] is None
    assert bundle.held_out_across_wave_steps("gate_routing") is None
    # The host backend declares no waves: nothing to say.
    micro = hl.Bundle(variant, 1, 1)
    assert micro.held_out_across_wave_steps("experts") is None
    with pytest.raises(hl.LookupError, match="unknown component 'shared'"):
        bundle.held_out_across_wave_steps("shared")


def test_device_spread_is_the_clis(staircase, variant, tmp_path):
    """device_spread gives what `harness lookup --explain --format json` says: None where the
    table records no split by device (no point measured twice), count 0 where one device measured
    every such point, else the spread with the largest offset among pairs of at least 5 points."""
    assert hl.Bundle(staircase, 1, 1).device_spread("experts") is None  # unrefined: none measured twice

    def cli(bundle, component):
        query = ["--tokens", "4"] + (["--activated", "2", "--assignments", "8"] if component == "experts" else [])
        return json.loads(harness("lookup", bundle, "--tp", "1", "--dp", "1", "--component", component, *query,
                                  "--explain", "--format", "json").stdout)["device_spread"]

    def as_module(spread):
        return None if spread is None else {
            "count": spread["count"], "median": spread.get("median_abs_relative_difference", 0.0),
            "max": spread.get("max_abs_relative_difference", 0.0), "largest_offset": spread["largest_offset"]}

    said = []
    for component in ("experts", "gate_routing"):
        want = cli(variant, component)
        assert hl.Bundle(variant, 1, 1).device_spread(component) == as_module(want), (component, want)
        said.append(want)
    # Refined on one host: a table with re-measured points has them all on its own device.
    assert any(w is not None and w["count"] == 0 and w["pairs"] == 0 for w in said), said
    spread_dir = str(tmp_path / "spread")
    shutil.copytree(variant, spread_dir)
    meta_path = os.path.join(spread_dir, "meta.yaml")
    # Every table's repeatability gets a split measured on two devices (a flow mapping, which YAML
    # reads as the publisher's block), in place of the one it has, if any (cut by indentation).
    lines, out, i = open(meta_path).read().splitlines(keepends=True), [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if line.strip() != "repeatability:":
            continue
        indent = len(line) - len(line.lstrip()) + 2
        out.append(" " * indent + "by_device: {same_device: {count: 1, median_abs_relative_difference: 0.001, "
                   "max_abs_relative_difference: 0.001}, across_devices: {count: 9, median_abs_relative_difference: "
                   "0.03, max_abs_relative_difference: 0.06}, device_pairs: [{grid_device: 1, held_out_device: 0, "
                   "count: 9, median_signed_relative_difference: 0.028}]}\n")
        if i < len(lines) and lines[i].strip() == "by_device:":
            i += 1
            while i < len(lines) and len(lines[i]) - len(lines[i].lstrip()) > indent:
                i += 1
    open(meta_path, "w").write("".join(out))
    want = cli(spread_dir, "experts")
    assert want == {"count": 9, "median_abs_relative_difference": 0.03, "max_abs_relative_difference": 0.06,
                    "largest_offset": 0.028, "pairs": 1}, want
    assert hl.Bundle(spread_dir, 1, 1).device_spread("experts") == as_module(want)


def without_held_out_errors(meta_text):
    """meta.yaml without its entries' coverage.fidelity blocks (a bundle published before held-out
    validation), cut by indentation: the block is the `fidelity:` key whose first child is
    `components:` (the contract's own `fidelity:` holds the job's settings)."""
    lines, out, i = meta_text.splitlines(keepends=True), [], 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == "fidelity:" and i + 1 < len(lines) and lines[i + 1].strip() == "components:":
            indent = len(line) - len(line.lstrip())
            i += 1
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                i += 1
            continue
        out.append(line)
        i += 1
    return "".join(out)


def test_a_bundle_without_held_out_errors_has_none_to_give(variant, tmp_path):
    old = str(tmp_path / "micro")
    shutil.copytree(variant, old)
    meta = os.path.join(old, "meta.yaml")
    text = open(meta).read()
    stripped = without_held_out_errors(text)
    assert "median_abs_relative_error" in text and "median_abs_relative_error" not in stripped
    assert "schema_version" in stripped and stripped.count("contract:") == text.count("contract:")
    open(meta, "w").write(stripped)
    for dp in (1, 2):
        bundle = hl.Bundle(old, 1, dp)
        assert bundle.held_out("gate_routing", 3) is None
        assert bundle.held_out("experts", 3, 2, 4) is None
        p = harness("lookup", old, "--tp", "1", "--dp", str(dp), "--component", "gate_routing", "--tokens", "3",
                    "--format", "json")
        assert json.loads(p.stdout)["held_out"] is None, p.stdout
