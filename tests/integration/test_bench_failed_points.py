"""`harness bench experts` on a GPU: a point that fails costs no other point. The points that
measured are written, each failed one is named with its reason, the exit status is 1, and where
nothing measured an earlier CSV stays as it was. The failures are real ones: HARNESS_NATIVE_TILE
names no tile, which the native experts refuse when they build their workload (the gate does not
read it); and a model (`--model-config`) whose expert weights no GPU holds (275 GB of W13 per
bank), whose points fail where their weights are made. Exits 77 (skipped) without a CUDA device.
Standalone (no h5py), so that it runs on a GPU node beside a build:
HARNESS_BIN=BUILD/harness/harness python3 THIS_FILE."""
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


def bench(*args, env=ENV):
    return subprocess.run([HARNESS, "bench", "experts", *COMMON, *args], capture_output=True,
                          text=True, env=env)


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

    # Weights the device cannot give: that model's points fail, the other model's are measured.
    huge = os.path.join(tmp, "huge-moe", "config.json")
    os.makedirs(os.path.dirname(huge))
    with open(huge, "w") as f:
        f.write('{"model_type": "qwen3_moe", "hidden_size": 8192, "moe_intermediate_size": 8192, '
                '"num_experts": 1024, "num_experts_per_tok": 8, "num_hidden_layers": 1}')
    p = bench("--model-config", huge, "--tokens", "16", "--components", "experts", "--csv", out,
              env=dict(os.environ))
    assert p.returncode == 1, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert "harness bench: 1 of 2 points failed" in p.stderr, p.stderr
    listed = p.stdout.split("1 point failed (measured no time, not in the CSV):\n")
    assert len(listed) == 2, p.stdout
    failed = [line.strip() for line in listed[1].splitlines() if line.strip()]
    assert len(failed) == 1 and failed[0].startswith("experts huge-moe N=16 A="), failed
    assert " native: its weights (" in failed[0] and "out of memory" in failed[0], failed
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["model"], int(r["tokens"])) for r in rows] == [("qwen3-30b-a3b", 16)], rows
print("bench failed points: ok")
