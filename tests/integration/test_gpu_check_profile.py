"""tools/gpu-check.sh's profile step without a GPU: a stand-in `ncu` first on PATH records its
arguments and prints the stored profile of the point it is asked for (tests/data/ncu). The step
must profile every point of $PROFILE_POINTS with tools/ncu-stream.py's metrics and the bench
options of that point, write each CSV, summarise them, and fail when one ncu run fails while
still running the others."""
import os
import tempfile

from harness_test_lib import SOURCE_DIR, gpu_check, write_executable

FAKE = """#!/usr/bin/env python3
import os, sys
args = sys.argv[1:]
model = args[args.index("--models") + 1]
tokens = args[args.index("--tokens") + 1]
with open(os.environ["RUNS_FILE"], "a") as f:
    f.write(" ".join(args) + "\\n")
if os.environ.get("FAIL_TOKENS") == tokens:
    sys.exit(1)
sys.stdout.write(open(os.path.join(os.environ["DATA"], f"profile-{model}-{tokens}.csv")).read())
"""

with tempfile.TemporaryDirectory() as tmp:
    bindir = os.path.join(tmp, "bin")
    write_executable(os.path.join(bindir, "ncu"), FAKE)
    env = dict(PATH=bindir + os.pathsep + os.environ["PATH"], DATA=os.path.join(SOURCE_DIR, "tests/data/ncu"),
               PROFILE_POINTS="qwen3-30b-a3b:256 qwen3-30b-a3b:1024")
    build = os.path.join(tmp, "build")

    runs = os.path.join(tmp, "runs-ok")
    out = os.path.join(tmp, "ok")
    p = gpu_check(build, out, "profile", RUNS_FILE=runs, **env)
    assert p.returncode == 0 and "== profile ok" in p.stdout, (p.stdout, p.stderr)
    calls = open(runs).read().splitlines()
    assert len(calls) == 2, calls
    for call, tokens in zip(calls, ("256", "1024")):
        args = call.split()
        assert args[args.index("-k") + 1] == "regex:expert_gemm", args
        assert "--csv" in args and args[args.index("--page") + 1] == "details", args
        assert "gpu__time_duration.sum" in args[args.index("--metrics") + 1], args
        bench = args[args.index(os.path.join(build, "harness/harness")) + 1:]
        assert bench[:3] == ["bench", "experts", "--under-profiler"], bench
        assert bench[bench.index("--tokens") + 1] == tokens and bench[bench.index("--models") + 1] == "qwen3-30b-a3b"
        assert os.path.exists(os.path.join(out, f"profile-qwen3-30b-a3b-{tokens}.csv"))
    log = open(os.path.join(out, "profile.log")).read()
    assert "expert_gemm_pipelined<WgmmaConfig<64, 5>, 1, 1> | 209.0 | 3.98 |" in log, log
    assert "expert_gemm<TileConfig<2, 1, 2, 2, 2, 128, 4, 2>, 1, 0, 1> | 201.0 | 4.01 |" in log, log

    # The first point's ncu fails: the second still runs, and the step fails.
    runs = os.path.join(tmp, "runs-fail")
    p = gpu_check(build, os.path.join(tmp, "fail"), "profile", RUNS_FILE=runs, FAIL_TOKENS="256", **env)
    assert p.returncode != 0 and "== profile FAILED" in p.stdout, (p.stdout, p.stderr)
    assert len(open(runs).read().splitlines()) == 2
    log = open(os.path.join(tmp, "fail", "profile.log")).read()
    assert "expert_gemm_pipelined<WgmmaConfig<64, 5>, 1, 1> | 209.0 |" in log, log
print("ok")
