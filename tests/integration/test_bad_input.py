"""Bad input: each error gets one clear message, a non-zero exit, and nothing measured is lost."""
import os
import tempfile

import h5py

from harness_test_lib import HARNESS, SOURCE_DIR, file_sha, mpirun_cmd, run

job = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")
qwen = os.path.join(SOURCE_DIR, "jobs/qwen3-30b-a3b.yaml")


def expect_error(cmd, needle):
    p = run(cmd, check=False)
    assert p.returncode != 0, f"{cmd} exited 0"
    assert needle in p.stderr, f"{cmd}: expected '{needle}' in:\n{p.stderr}"


# Ranks whose contracts differ are refused before any work, naming what differs: the ranks whose
# backend or device differ from rank 0's (an MPMD launch with two backends), else the job.
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "never")
    common = ["acquire", "--unverified", job, "--tp", "1,2", "--dp", "1", "--out", out]
    two_backends = (mpirun_cmd(1, *common, "--backend", "cpu_reference") + [":", "-np", "1", HARNESS]
                    + common + ["--backend", "staircase_model"])
    expect_error(two_backends, "ranks disagree on the contract: rank 0 plans for cpu_reference (host_clock, "
                 "0 SMs, 0 MiB cache), rank 1 staircase_model (modeled_clock, 0 SMs, 0 MiB cache)")
    two_jobs = (mpirun_cmd(1, *common, "--rounds", "1") + [":", "-np", "1", HARNESS] + common
                + ["--rounds", "2"])
    expect_error(two_jobs, "although every rank plans for cpu_reference (host_clock, 0 SMs, 0 MiB cache): "
                 "the job differs between ranks")
    assert not os.path.exists(out), "work started before the contract check"

# EP mismatch fails before any work (no output directory is created).
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "never")
    expect_error(mpirun_cmd(2, "acquire", "--unverified", qwen, "--tp", "1,2", "--dp", "1,2", "--ep", "3", "--out", out), "EP 3")
    assert not os.path.exists(out), "work started before the EP check"
expect_error([HARNESS, "plan", qwen, "--tp", "1,2", "--dp", "1,2", "--ep", "3"], "EP 3")
expect_error([HARNESS, "plan", "/nonexistent.yaml"], "cannot open job file")
expect_error([HARNESS, "plan", job, "--backend", "cuda"], "unknown backend 'cuda'")
expect_error([HARNESS, "nonsense"], "unknown command")
# plan: a summary by default (DeepSeek-V3 used to print 541 lines of (A, M) pairs), every point
# with --verbose, durations a reader takes in.
deepseek = os.path.join(SOURCE_DIR, "jobs/deepseek-v3.yaml")
short, full = run([HARNESS, "plan", deepseek]).stdout, run([HARNESS, "plan", deepseek, "--verbose"]).stdout
assert len(short.splitlines()) < 150 and "N=" not in short and "(--verbose lists every grid point)" in short
assert "N=1 (A,M):" in full and len(full.splitlines()) > len(short.splitlines())
assert " of device time held (one H200)" in short and (" min " in short or " h " in short), short[-400:]
# Geometry from a Hugging Face config.json.
p = run([HARNESS, "plan", job, "--tp", "1", "--dp", "1", "--model-config",
         os.path.join(SOURCE_DIR, "tests/data/hf/mixtral.json")])
assert "mixtral (H=4096 I=14336 E=8 k=2" in p.stdout, p.stdout
expect_error([HARNESS, "plan", job, "--model-config", "/nonexistent/config.json"],
             "--model-config: cannot read '/nonexistent/config.json'")
expect_error([HARNESS, "plan", job, "--components", "gate_routng"], "did you mean 'gate_routing'")
expect_error([HARNESS, "plan", job, "--tp", "1", "--dp", "1", "--components", "finalize_copy"],
             "selects no component of any target")
expect_error([HARNESS, "bench", "nope"], "unknown benchmark 'nope'")
expect_error([HARNESS, "bench", "experts", "--models", "gpt-9"], "unknown model preset 'gpt-9'")
expect_error([HARNESS, "bench", "experts", "--models", "qwen3-30b-a3b,qwen3-30b-a3b"],
             "model 'qwen3-30b-a3b' is given twice")
expect_error([HARNESS, "bench", "experts", "--model-config", "/nonexistent/config.json"],
             "--model-config: cannot read '/nonexistent/config.json'")
expect_error([HARNESS, "bench", "experts", "--model-config", job], "--model-config: model config " + job + ": not valid JSON")
with tempfile.TemporaryDirectory() as tmp:
    named_as_preset = os.path.join(tmp, "qwen3-30b-a3b", "config.json")
    os.makedirs(os.path.dirname(named_as_preset))
    with open(os.path.join(SOURCE_DIR, "tests/data/hf/mixtral.json")) as f, open(named_as_preset, "w") as g:
        g.write(f.read())
    expect_error([HARNESS, "bench", "experts", "--models", "qwen3-30b-a3b", "--model-config", named_as_preset],
                 f"model 'qwen3-30b-a3b' is given twice (--models and --model-config {named_as_preset})")
# A config the bench reads is checked as far as the device (none here).
expect_error([HARNESS, "bench", "experts", "--model-config", os.path.join(SOURCE_DIR, "tests/data/hf/mixtral.json")],
             "no CUDA device 0")
expect_error([HARNESS, "bench", "experts", "--tokens", "1,x"], "option --tokens: 'x' is not an integer")
expect_error([HARNESS, "bench", "experts", "--tokens", "16,0"], "--tokens: token counts must be positive")
# A CSV that could not be written is refused before anything is measured (here: before the device).
expect_error([HARNESS, "bench", "experts", "--sweep", "--csv", "/nonexistent-folder/sweep.csv"],
             "--csv /nonexistent-folder/sweep.csv: the folder '/nonexistent-folder' does not exist")
expect_error([HARNESS, "bench", "experts", "--components", "experts,gate"], "unknown component 'gate'")
expect_error([HARNESS, "bench", "experts", "--components", "wrapper"], "--components takes")
expect_error([HARNESS, "bench", "experts", "--iterations", "0"], "--iterations must be at least 1")
expect_error([HARNESS, "bench", "experts", "--settle-ms", "-1"], "--settle-ms must be between 0 and 60000")
expect_error([HARNESS, "bench", "experts", "--capped-settle-ms", "70000"], "--capped-settle-ms must be between 0 and 60000")
expect_error([HARNESS, "bench", "experts", "--backends", ","], "--backends is empty")
expect_error([HARNESS, "bench", "experts", "--device", "99"], "no CUDA device 99")

with tempfile.TemporaryDirectory() as tmp:
    bad = os.path.join(tmp, "bad.yaml")
    open(bad, "w").write("model:\n  preset: tiny\n  hiden_size: 3\n")
    expect_error([HARNESS, "plan", bad], "did you mean 'hidden_size'")
    # Values of the wrong YAML type (found by fuzz_job / fuzz_meta): the line and what was wrong,
    # never yaml-cpp's own exception text.
    for text, needle in (("? [a, b]\n: 1\n", "line 1, column 3: a value has the wrong type"),
                         ("model:\n  preset: [tiny]\n", "'model.preset' has an invalid value")):
        open(bad, "w").write(text)
        p = run([HARNESS, "plan", bad], check=False)
        assert p.returncode != 0 and needle in p.stderr and "yaml-cpp" not in p.stderr, p.stderr
    variant = os.path.join(tmp, "v")
    os.makedirs(variant)
    open(os.path.join(variant, "meta.yaml"), "w").write("schema_version: 1\nper_tp:\n  1: 5\n")
    p = run([HARNESS, "lookup", variant, "--tp", "1", "--dp", "1", "--component", "gate_routing", "--tokens", "1"],
            check=False)
    assert p.returncode != 0 and "corrupt meta.yaml" in p.stderr and "yaml-cpp" not in p.stderr, p.stderr
    # --out that cannot be a directory: the reason, never a claim that a lock is held.
    blocker = os.path.join(tmp, "a-file")
    open(blocker, "w").write("x")
    for out_dir, reason in ((blocker, "cannot use"), (os.path.join(tmp, "n" * 300), "cannot use")):
        p = run(mpirun_cmd(1, "acquire", job, "--out", out_dir, "--no-publish"), check=False)
        assert p.returncode != 0 and reason in p.stderr and "holds" not in p.stderr, p.stderr
    assert open(blocker).read() == "x"
    # An error every rank meets is printed once, by rank 0, not once per rank.
    p = run(mpirun_cmd(3, "acquire", "--unverified", job, "--out", blocker, "--no-publish"), check=False)
    errors = [line for line in p.stderr.splitlines() if "error:" in line]
    assert p.returncode != 0 and len(errors) == 1 and "(rank 0)" in errors[0], p.stderr
    escaping = os.path.join(tmp, "escaping.yaml")
    open(escaping, "w").write(open(job).read().replace("variant: micro", 'variant: ".."'))
    expect_error([HARNESS, "plan", escaping], "output.variant '..' names a directory above")

    out = os.path.join(tmp, "acq")
    run(mpirun_cmd(2, "acquire", "--unverified", job, "--out", out, "--out-root", os.path.join(tmp, "bundles")))
    h5 = os.path.join(out, "acquisition.h5")
    sha = file_sha(h5)
    # A changed semantic condition is a new contract: refused, file untouched.
    expect_error(mpirun_cmd(2, "acquire", "--unverified", job, "--out", out, "--iterations", "4", "--no-publish"),
                 "different contract (differs in: conditioning.iterations: 16 -> 4)")
    assert file_sha(h5) == sha, "existing file modified by a refused run"
    # A corrupt file is an error, never overwritten.
    corrupt = os.path.join(tmp, "corrupt")
    os.makedirs(corrupt)
    with open(os.path.join(corrupt, "acquisition.h5"), "wb") as f:
        f.write(b"this is not HDF5" * 100)
    sha = file_sha(os.path.join(corrupt, "acquisition.h5"))
    expect_error(mpirun_cmd(2, "acquire", "--unverified", job, "--out", corrupt, "--no-publish"), "corrupt")
    assert file_sha(os.path.join(corrupt, "acquisition.h5")) == sha
# Read-side commands: each bad input is one clear error.
with tempfile.TemporaryDirectory() as tmp:
    expect_error([HARNESS, "inspect", tmp], "no meta.yaml here")
    expect_error([HARNESS, "report", tmp, "--out", os.path.join(tmp, "r.html")], "no meta.yaml here")
    expect_error([HARNESS, "inspect", tmp, "--format", "xml"], "--format must be text or json")
    expect_error([HARNESS, "inspect"], "name an acquisition file or a bundle variant directory")
    expect_error([HARNESS, "inspect", os.path.join(tmp, "missing.h5")], "cannot open acquisition file")
    expect_error([HARNESS, "publish"], "name the acquisition file")
    expect_error([HARNESS, "lookup", tmp, "--tp", "1", "--dp", "1", "--sp", "2", "--component", "experts",
                  "--tokens", "1"], "--sp must be 0 or 1")
    expect_error([HARNESS, "lookup", tmp, "--tp", "1", "--dp", "1", "--component", "experts", "--tokens", "1",
                  "--format", "xml"], "--format must be text or json")
    expect_error([HARNESS, "lookup", tmp, "--tp", "1", "--dp", "1", "--component", "gate_routing", "--tokens", "1"],
                 "no bundle here")

# An HDF5 file the harness did not write: inspect names what it lacks; acquire refuses to resume it
# and leaves it as it was (h5py writes it, not the harness).
with tempfile.TemporaryDirectory() as tmp:
    foreign = os.path.join(tmp, "acq", "acquisition.h5")
    os.makedirs(os.path.dirname(foreign))
    with h5py.File(foreign, "w") as f:
        f["data"] = [1, 2, 3]
    expect_error([HARNESS, "inspect", foreign], f"'{foreign}': missing attribute 'schema_version'")
    with h5py.File(foreign, "a") as f:
        f.attrs["schema_version"] = 2
    expect_error([HARNESS, "inspect", foreign], f"'{foreign}': missing attribute 'contract'")
    before = file_sha(foreign)
    expect_error(mpirun_cmd(1, "acquire", "--unverified", job, "--tp", "1", "--dp", "1", "--out",
                            os.path.dirname(foreign), "--out-root", os.path.join(tmp, "b")),
                 f"'{foreign}' is damaged or corrupt ('{foreign}': missing attribute 'contract')")
    assert file_sha(foreign) == before, "the foreign file was changed"
    assert not os.path.exists(os.path.join(tmp, "b")), "something was published"
    # --out naming a file, not a directory: refused, the file as it was.
    expect_error(mpirun_cmd(1, "acquire", "--unverified", job, "--tp", "1", "--dp", "1", "--out", foreign,
                            "--out-root", os.path.join(tmp, "b")),
                 f"cannot use {foreign} as the acquisition directory: Not a directory")
    assert file_sha(foreign) == before, "the file named by --out was changed"

# Help: the command list is aligned in columns (no tabs), and each subcommand lists its own options.
top = run([HARNESS, "--help"]).stdout
assert "\t" not in top, top
starts = {line.index(line.split()[1]) for line in top.splitlines() if line.startswith("  ")}
assert len(starts) == 1, top  # every description starts in the same column
def options(*command):
    return set(w for w in run([HARNESS, *command, "--help"]).stdout.split() if w.startswith("--"))
colocate, plan, acquire = options("colocate"), options("plan"), options("acquire")
assert {"--quick", "--tp", "--backend"} <= colocate and not {"--rounds", "--gpu-hours", "--unverified"} & colocate
assert {"--verbose", "--rounds", "--campaign"} <= plan and not {"--unverified", "--quick"} & plan
assert {"--unverified", "--raise-budget", "--watchdog-floor", "--rounds"} <= acquire and "--quick" not in acquire
expect_error([HARNESS, "acquire", "--watchdog-factor", "0.5"], "--watchdog-factor must be >= 1")
expect_error([HARNESS, "acquire", "--verdict-max-age", "0"], "--verdict-max-age must be a positive")
expect_error([HARNESS, "acquire", "--time-limit", "-1"], "--time-limit must be a positive number of seconds")
expect_error([HARNESS, "acquire", "--time-limit", "nan"], "--time-limit must be a positive number of seconds")
expect_error([HARNESS, "colocate", "--intervals", "0"], "--intervals and --window >= 1")
expect_error([HARNESS, "bench", "experts", "--sweep", "--tokens", "4"], "--sweep chooses the token counts")
expect_error([HARNESS, "bench", "experts", "--sweep", "--activated", "8"], "leave out --tokens and --activated")
expect_error([HARNESS, "bench", "experts", "--under-profiler", "--sweep"], "--under-profiler measures no time: leave out --sweep")
expect_error([HARNESS, "bench", "experts", "--under-profiler", "--csv", "b.csv"], "--under-profiler measures no time: leave out --csv")
expect_error([HARNESS, "bench", "experts", "--models", "qwen3-30b-a3b", "--tokens", "16", "--activated", "4"],
             "--activated 4: qwen3-30b-a3b at N=16 with every route local needs k <= A <= min(E, N k), "
             "here 8 <= A <= 128")
expect_error([HARNESS, "bench", "experts", "--models", "qwen3-30b-a3b", "--tokens", "2", "--activated", "17"],
             "here 8 <= A <= 16")
expect_error([HARNESS, "colocate", "--min-clock-fraction", "1.5"], "--min-clock-fraction must be in [0, 1]")
print("ok")
