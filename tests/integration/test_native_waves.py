"""tools/native-waves.py without a GPU: its restated tile rule steps where `harness plan` says the
native tile rule does; its tile and wave counts equal ones worked out by hand from the block sizes
(docs/native-backend.md); its fit recovers known per-wave costs exactly and shows a time that does
not follow the waves as a residual; leaving points out, the waves' fit interpolates them exactly
where the time alone does not; its error paths."""
import csv
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

from harness_test_lib import HARNESS, SOURCE_DIR, run

TOOL_PATH = os.path.join(SOURCE_DIR, "tools/native-waves.py")
sys.path.insert(0, os.path.dirname(TOOL_PATH))  # the tool imports tools/bench_csv.py
spec = importlib.util.spec_from_file_location("native_waves", TOOL_PATH)
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def waves_tool(*args):
    return subprocess.run([sys.executable, TOOL_PATH] + list(args), capture_output=True, text=True)


def write_table(path, points):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["component", "tokens", "activated_experts", "local_assignments", "time_us"])
        w.writerow(["gate_routing", 64, 0, 0, 7.0])  # not an experts row: ignored
        for n, a, m, t in points:
            w.writerow(["experts", n, a, m, t])


# 1. The restated rule steps where the C++ tile rule does (harness plan, native, up to 8192 rows).
plan = run([HARNESS, "plan", os.path.join(SOURCE_DIR, "jobs/qwen3-30b-a3b.yaml"), "--backend", "native"]).stdout
line = re.search(r"experts time steps of native \(rows per active expert\): ([0-9 ]+)", plan)
assert line, plan
p = waves_tool("--steps", "8192")
assert p.returncode == 0, p.stderr
assert p.stdout.split(":", 1)[1].split() == line.group(1).split(), (p.stdout[:300], line.group(1)[:300])

# 1b. The gate's declared steps (both CUDA backends; the nominal H200's 132 SMs in `plan`): every
# multiple of 132 x 4 rows below the job's 8192 tokens and every multiple of 64 from 256 to 2048,
# and the gate's grid holds both sides of each; the host backends declare none.
gate = re.search(r"gate_routing time steps of native \(rows, for the 132 SMs of [^)]*\): ([0-9 ]+)", plan)
assert gate, plan
want = sorted(set(range(528, 8192, 528)) | set(range(256, 2049, 64)))
assert [int(b) for b in gate.group(1).split()] == want, gate.group(0)
plan_json = json.loads(run([HARNESS, "plan", os.path.join(SOURCE_DIR, "jobs/qwen3-30b-a3b.yaml"),
                            "--backend", "cublas_grouped", "--format", "json"]).stdout)
assert plan_json["gate_time_steps"] == want and plan_json["device_model"]["sm_count"] == 132, plan_json["gate_time_steps"]
(gate_grid,) = [c for t in plan_json["targets"] for c in t["components"] if c["component"] == "gate_routing"]
gate_rows = {p["tokens"] for p in gate_grid["points"]}
assert all(b in gate_rows and b + 1 in gate_rows for b in want), sorted(gate_rows)
assert set(gate_grid["step_token_rows"]) <= gate_rows and 7921 in gate_grid["step_token_rows"], gate_grid["step_token_rows"]
host = run([HARNESS, "plan", os.path.join(SOURCE_DIR, "jobs/qwen3-30b-a3b.yaml"), "--backend", "cpu_reference"]).stdout
assert "gate_routing time steps of cpu_reference (rows): none declared" in host, host

# 2. Tiles and waves by hand (Qwen3-30B-A3B, 132 SMs; wgmma blocks: 256 weight rows, one per SM,
# so W13 = 6 and W2 = 8 blocks per tile; narrow: 64 rows, two per SM, 24 and 32 per tile).
by_hand = {
    (1024, 8, 8192): ("wide", 64, 3, 4),  # 1024 rows: 8 wide tiles each; 384 / 132, 512 / 132
    (1024, 9, 8192): ("wide", 72, 4, 5),  # 910-911 rows: 8 tiles each; 432 / 132, 576 / 132
    (216, 22, 1728): ("wide80", 22, 1, 2),  # 78-79 rows: one 80-row tile; 132 / 132, 176 / 132
    (216, 23, 1728): ("wide80", 23, 2, 2),  # 75-76 rows: 138 / 132, 184 / 132
    (64, 64, 512): ("narrow", 64, 6, 8),  # 8 rows: 1536 / 264, 2048 / 264
    (5, 3, 10): ("narrow", 3, 1, 1),  # 3-4 rows: a narrow tile each
    (1100, 2, 2049): ("wide", 17, 1, 2),  # 1025 rows: 9 wide tiles, 1024: 8; 102 / 132, 136 / 132
    # 144-145 rows: two wide80 tiles each for W13 (1536 / 132); W2 on one tall tile of 160 rows
    # per expert, 16 blocks of 128 features (2048 / 132)
    (2314, 128, 18512): ("wide80", 256, 12, 16),
}
for (n, a, m), want in by_hand.items():
    got = tool.waves(a, m, 132, 2048, 768)
    assert got == want, ((n, a, m), got, want)

# The wave count along A at N = 256 (M = 2048, A from 8), by hand: A = 8 runs 16 wide tiles (1 + 1
# waves), A = 9 and 10 run 18 and 20 (1 + 2), A = 15 runs 30 wide80 tiles (2 + 2), A = 16 16 wide
# tiles (1 + 1), A = 17 17 wide tiles (1 + 2): it changes after 8, 15 and 16, not after 9.
p = waves_tool("--activated-steps", "256")
assert p.returncode == 0, p.stderr
got = [int(a) for a in p.stdout.rsplit(":", 1)[1].split()]
assert got[0] == 8 and 15 in got and 16 in got and 9 not in got, got
assert all(tool.waves(a, 2048, 132, 2048, 768)[2:] != tool.waves(a + 1, 2048, 132, 2048, 768)[2:] for a in got)

with tempfile.TemporaryDirectory() as tmp:
    # 3. Times that follow the waves exactly: the fit gives back the costs and no residual; the
    # listing of one N shows the hand-counted waves.
    a0, b13, c2 = 12.0, 31.0, 19.0
    points = []
    for n in (512, 1024, 2048, 4096):
        for a in range(8, 40):
            _, _, w13, w2 = tool.waves(a, n * 8, 132, 2048, 768)
            points.append((n, a, n * 8, a0 + b13 * w13 + c2 * w2))
    exact = os.path.join(tmp, "exact.csv")
    write_table(exact, points)
    p = waves_tool(exact, "--tokens", "1024")
    assert p.returncode == 0, p.stderr
    assert "N=1024 A=8 M=8192 rows/expert=1024.0 tile=wide tiles=64 waves=3+4" in p.stdout, p.stdout
    assert "N=1024 A=9 M=8192 rows/expert=910.2 tile=wide tiles=72 waves=4+5" in p.stdout, p.stdout
    wide = [l for l in p.stdout.splitlines() if l.startswith("wide:")]
    assert wide and "time = 12.00 + 31.00 * W13 waves + 19.00 * W2 waves" in wide[0], p.stdout
    assert "median 0.0% p95 0.0% max 0.0%" in wide[0], wide
    # Leaving each point out of its row: interpolating the time misses the wave steps, the time
    # over the waves' fit does not.
    p = waves_tool(exact, "--leave-one-out")
    assert p.returncode == 0, p.stderr
    inner = sum(len(range(8, 40)) - 2 for _ in (512, 1024, 2048, 4096))
    plain = re.search(r"interpolating the time: (\d+) points, \|error\| median [0-9.]+% p95 [0-9.]+% max ([0-9.]+)%",
                      p.stdout)
    assert plain and int(plain.group(1)) == inner and float(plain.group(2)) > 5, p.stdout
    # (points whose row neighbours run a tile with too few points to fit are left out)
    scaled = re.search(r"over the waves' fit: (\d+) points, \|error\| median 0.0% p95 0.0% max 0.0%", p.stdout)
    assert scaled and inner // 2 < int(scaled.group(1)) <= inner, p.stdout
    # Whole over filled waves of one point: (1024, 9, 8192) runs 432 and 576 blocks on 132 SMs.
    one = os.path.join(tmp, "one.csv")
    write_table(one, [(1024, 9, 8192, 250.0)])
    p = waves_tool(one)
    want = 9 / ((432 + 576) / 132)
    assert f"1 experts points; whole waves / filled waves: median {want:.3f}, p90 {want:.3f}, max {want:.3f}" \
        in p.stdout, (want, p.stdout)
    # 4. One point 20% off the waves shows as the largest residual.
    off = os.path.join(tmp, "off.csv")
    write_table(off, points[:-1] + [points[-1][:3] + (points[-1][3] * 1.2,)])
    p = waves_tool(off)
    assert p.returncode == 0, p.stderr
    fitted = [l for l in p.stdout.splitlines() if l.startswith(tool.waves(points[-1][1], points[-1][2], 132, 2048,
                                                                          768)[0] + ":")]
    mx = float(re.search(r"max ([0-9.]+)%", fitted[0]).group(1))
    assert 10 < mx < 25, fitted
    # 5. Errors: a missing file, a table without experts rows, no table at all.
    p = waves_tool(os.path.join(tmp, "missing.csv"))
    assert p.returncode == 2 and "cannot read experts rows" in p.stderr, (p.returncode, p.stderr)
    empty = os.path.join(tmp, "empty.csv")
    write_table(empty, [])
    p = waves_tool(empty)
    assert p.returncode == 2 and "has no experts rows" in p.stderr, (p.returncode, p.stderr)
    p = waves_tool()
    assert p.returncode == 2 and "a table CSV is needed" in p.stderr, (p.returncode, p.stderr)
print("native-waves: ok")
