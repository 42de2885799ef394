"""`harness bench experts` on a GPU: a point that fails costs no other point. The points that
measured are written, each failed one is named with its reason, the exit status is 1, and where
nothing measured an earlier CSV stays as it was. The failure is a real one: HARNESS_NATIVE_TILE
names no tile, which the native experts refuse when they build their workload (the gate does not
read it). Exits 77 (skipped) without a CUDA device. Standalone (no h5py), so that it runs on a
GPU node beside a build: HARNESS_BIN=BUILD/harness/harness python3 THIS_FILE."""
import csv
import os
import subprocess
import sys
import tempfile

HARNESS = os.environ["HARNESS_BIN"]
COMMON = ["--models", "qwen3-30b-a3b", "--backends", "native", "--iterations", "2",
          "--settle-ms", "0", "--capped-settle-ms", "0"]
ENV = dict(os.environ, HARNESS_NATIVE_TILE="no-such-tile")
REASON = "HARNESS_NATIVE_TILE=no-such-tile: expected one of narrow, medium"


def bench(*args):
    return subprocess.run([HARNESS, "bench", "experts", *COMMON, *args], capture_output=True,
                          text=True, env=ENV)


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "bench.csv")
    p = bench("--tokens", "16,64", "--components", "experts,gate_routing", "--csv", out)
    if "no CUDA device" in p.stderr:
        print("no CUDA device: skipped")
        sys.exit(77)
    assert p.returncode == 1, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert "harness bench: 2 of 4 points failed" in p.stderr, p.stderr
    listed = p.stdout.split("2 points failed (measured no time, not in the CSV):\n")
    assert len(listed) == 2, p.stdout
    failed = [line.strip() for line in listed[1].splitlines() if line.strip()]
    assert len(failed) == 2, failed
    for line, n in zip(failed, (16, 64)):
        assert line.startswith(f"experts qwen3-30b-a3b N={n} A="), line
        assert f" native: {REASON}" in line, line
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["component"], int(r["tokens"])) for r in rows] == \
        [("gate_routing", 16), ("gate_routing", 64)], rows
    assert all(float(r["median_us"]) > 0 and r["device_uuid"].startswith("GPU-") for r in rows), rows

    # Nothing measured: the CSV of an earlier run is not replaced.
    with open(out, "rb") as f:
        earlier = f.read()
    p = bench("--tokens", "16", "--components", "experts", "--csv", out)
    assert p.returncode == 1, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert f"no point measured: {out} not written" in p.stdout, p.stdout
    assert "experts qwen3-30b-a3b N=16 A=" in p.stdout and REASON in p.stdout, p.stdout
    with open(out, "rb") as f:
        assert f.read() == earlier, "the earlier CSV was replaced"
print("bench failed points: ok")
