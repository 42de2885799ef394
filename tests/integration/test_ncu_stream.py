"""tools/ncu-stream.py on Nsight Compute CSVs of the profile step (tests/data/ncu: two
Qwen3-30B-A3B points measured on an H200, trimmed to the metrics it reads): the figures per
launch follow from the metric values and units, and its error paths (no ncu header, a header
without the metric columns, a launch missing a metric, a unit it does not know, a value that is
not a number, no file) name what is wrong; a launch that read nothing from DRAM gets no
L2 -> SM ratio."""
import os
import subprocess
import sys
import tempfile

from harness_test_lib import SOURCE_DIR

TOOL = [sys.executable, os.path.join(SOURCE_DIR, "tools/ncu-stream.py")]
DATA = os.path.join(SOURCE_DIR, "tests/data/ncu")
MEDIUM = os.path.join(DATA, "profile-qwen3-30b-a3b-1024.csv")
NARROW = os.path.join(DATA, "profile-qwen3-30b-a3b-256.csv")


def run(*args):
    return subprocess.run(TOOL + list(args), capture_output=True, text=True)


def rewritten(tmp, name, source, edit):
    path = os.path.join(tmp, name)
    with open(source) as f, open(path, "w") as g:
        g.write(edit(f.read()))
    return path


metrics = run("--metrics")
assert metrics.returncode == 0, metrics.stderr
names = metrics.stdout.strip().split(",")
assert "dram__bytes_read.sum" in names and "gpu__time_duration.sum" in names, names

r = run(MEDIUM, NARROW)
assert r.returncode == 0, r.stderr
lines = r.stdout.splitlines()
assert len(lines) == 1 + 4, lines  # the header, then two launches per file
# W13 of the medium tile: 209,024 ns; 3,977,684,017,146 byte/s; 35,679,264 sectors of 32 bytes
# over 831,431,424 bytes read from DRAM = 1.373; 1,272,914,941 Hz.
assert lines[1] == (f"{MEDIUM} | expert_gemm_pipelined<WgmmaConfig<64, 5>, 1, 1> | 209.0 | 3.98 | "
                    "84.0 | 93.5 | 1.37 | 35.8 | 1.27"), lines[1]
assert lines[2].startswith(f"{MEDIUM} | expert_gemm_pipelined<WgmmaConfig<64, 5>, 0, 1> | 124.5 | 3.34 |")
assert lines[3].startswith(f"{NARROW} | expert_gemm<TileConfig<2, 1, 2, 2, 2, 128, 4, 2>, 1, 0, 1> | "
                           "201.0 | 4.01 |"), lines[3]

with tempfile.TemporaryDirectory() as tmp:
    # Scaled units: the same duration in usecond and the rate in Tbyte/s give the same figures.
    scaled = rewritten(tmp, "scaled.csv", MEDIUM, lambda t: t.replace(
        '"ns","209,024"', '"usecond","209.024"').replace(
        '"byte/s","3,977,684,017,146.36"', '"Tbyte/s","3.97768401714636"'))
    r = run(scaled)
    assert r.returncode == 0 and " | 209.0 | 3.98 | 84.0 |" in r.stdout.splitlines()[1], (r.stdout, r.stderr)

    # No header row: not an ncu CSV.
    bare = rewritten(tmp, "bare.csv", MEDIUM, lambda t: "\n".join(
        line for line in t.splitlines() if not line.startswith('"ID"')))
    r = run(bare)
    assert r.returncode == 1 and "no Nsight Compute CSV header" in r.stderr, r.stderr

    # A header without the metric columns (another ncu page).
    r = run(rewritten(tmp, "page.csv", MEDIUM, lambda t: t.replace('"Metric Unit"', '"Unit"')))
    assert r.returncode == 1 and 'no column "Metric Unit"' in r.stderr, r.stderr

    # Launch 1 lacks the fabric metric.
    def drop_fabric_of_launch_1(text):
        return "\n".join(line for line in text.splitlines()
                         if not (line.startswith('"1",') and "ltcfabric2ltc" in line))
    r = run(rewritten(tmp, "missing.csv", MEDIUM, drop_fabric_of_launch_1))
    assert r.returncode == 1, r.stdout
    assert "launch 1 (" in r.stderr and "lacks lts__ltcfabric2ltc_cycles_active" in r.stderr, r.stderr

    # A unit it does not know.
    r = run(rewritten(tmp, "unit.csv", MEDIUM, lambda t: t.replace('"ns","209,024"', '"fortnight","1"')))
    assert r.returncode == 1 and "unit 'fortnight'" in r.stderr and "gpu__time_duration.sum" in r.stderr, r.stderr

    # A value that is not a number.
    r = run(rewritten(tmp, "nan.csv", MEDIUM, lambda t: t.replace('"ns","209,024"', '"ns","n/a"')))
    assert r.returncode == 1 and "value 'n/a' is not a number" in r.stderr, r.stderr

    # No byte read from DRAM: the L2 -> SM ratio is left out, the rest is printed.
    r = run(rewritten(tmp, "l2.csv", MEDIUM, lambda t: t.replace('"byte","831,431,424"', '"byte","0"')))
    assert r.returncode == 0 and " | 93.5 | - | 35.8 | 1.27" in r.stdout.splitlines()[1], (r.stdout, r.stderr)

    # No metric of the list at all (ncu run without --metrics).
    r = run(rewritten(tmp, "none.csv", MEDIUM, lambda t: t.replace("dram__", "x__").replace("lts__", "x__")
                      .replace("gpu__", "x__").replace("sm__", "x__")))
    assert r.returncode == 1 and "no launch with the stream metrics" in r.stderr, r.stderr

    # A file that cannot be read fails the run, and the files after it are still summarised.
    r = run(os.path.join(tmp, "absent.csv"), NARROW)
    assert r.returncode == 1 and "absent.csv" in r.stderr, r.stderr
    assert len(r.stdout.splitlines()) == 1 + 2 and NARROW in r.stdout, r.stdout
    r = run()
    assert r.returncode == 2, r.stderr
print("ncu-stream: ok")
