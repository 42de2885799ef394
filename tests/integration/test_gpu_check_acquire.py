"""tools/gpu-check.sh's acquire step without a GPU: a stand-in `harness` appends one line per call
to the campaign's acquisition file (beside a crash snapshot) and exits with $FAKE_EXIT. The step
runs it under mpirun where mpirun is installed and as one rank without a launcher where it is not
or where OMPI_MCA_ess_singleton_isolated=1 (the runtime bundle's exports) says so;
with $CAMPAIGN_ARCHIVE it starts a new campaign when the archive does not exist, resumes the
archived one when it does, packs the campaign (without snapshots) into OUT/campaign.tgz after
every run, finished or stopped, and refuses when both the archive and OUT/acquire exist."""
import os
import shutil
import sys
import tarfile
import tempfile

from harness_test_lib import gpu_check, write_executable

FAKE = """#!/usr/bin/env python3
import os, sys
args = sys.argv[1:]
assert args[0] == "acquire", args
root = args[args.index("--out-root") + 1]
campaign = os.path.join(root, "acquisitions", "qwen3-30b-a3b")
os.makedirs(campaign, exist_ok=True)
with open(os.path.join(campaign, "acquisition.h5"), "a") as f:
    f.write(f"call launched={'OMPI_COMM_WORLD_SIZE' in os.environ} "
            f"isolated={os.environ.get('OMPI_MCA_ess_singleton_isolated')} args={' '.join(args[1:])}\\n")
open(os.path.join(campaign, "acquisition.h5.snapshot"), "w").write("copy\\n")
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""
CAMPAIGN = "acquire/acquisitions/qwen3-30b-a3b/acquisition.h5"


def calls_in(archive):
    with tarfile.open(archive) as t:
        names = t.getnames()
        assert not any(n.endswith(".snapshot") for n in names), names
        return t.extractfile(CAMPAIGN).read().decode().splitlines()


with tempfile.TemporaryDirectory() as tmp:
    build = os.path.join(tmp, "build")
    write_executable(os.path.join(build, "harness", "harness"), FAKE)
    # A PATH without Open MPI's launcher: only the tools the step and the stand-in use.
    bare = os.path.join(tmp, "bare-bin")
    os.makedirs(bare)
    for tool in ("bash", "env", "date", "mkdir", "tail", "dirname", "tar", "gzip", "cat"):
        os.symlink(shutil.which(tool), os.path.join(bare, tool))
    os.symlink(sys.executable, os.path.join(bare, "python3"))
    archive = os.path.join(tmp, "kept", "campaign.tgz")
    os.makedirs(os.path.dirname(archive))

    # A new campaign, no mpirun, stopped by its time limit (exit 4): packed all the same.
    out = os.path.join(tmp, "out1")
    p = gpu_check(build, out, "acquire", PATH=bare, CAMPAIGN_ARCHIVE=archive, FAKE_EXIT="4",
                  ACQUIRE_ARGS="--rounds 1 --time-limit 480")
    log = open(os.path.join(out, "acquire.log")).read()
    assert p.returncode != 0 and "== acquire FAILED" in p.stdout, (p.stdout, p.stderr)
    assert "mpirun not installed: one rank without a launcher" in log and "a new campaign" in log, log
    assert "campaign packed into" in log and "(acquire exit 4)" in log, log
    packed = calls_in(os.path.join(out, "campaign.tgz"))
    assert packed == ["call launched=False isolated=1 args=jobs/qwen3-30b-a3b.yaml --tp 1 --dp 1 --backend native "
                      f"--out-root {out}/acquire --rounds 1 --time-limit 480"], packed
    print("ok: a new campaign without a launcher, packed after a stop")

    # The next call resumes the archive in a fresh OUT and packs both calls' work.
    shutil.copy(os.path.join(out, "campaign.tgz"), archive)
    out2 = os.path.join(tmp, "out2")
    p = gpu_check(build, out2, "acquire", PATH=bare, CAMPAIGN_ARCHIVE=archive)
    assert p.returncode == 0 and "== acquire ok" in p.stdout, (p.stdout, p.stderr)
    assert f"resuming the campaign archived in {archive}" in open(os.path.join(out2, "acquire.log")).read()
    packed = calls_in(os.path.join(out2, "campaign.tgz"))
    assert len(packed) == 2 and packed[1].startswith("call launched=False isolated=1"), packed
    print("ok: resumed from the archive")

    # Both an archive and a campaign in OUT: refused, the stand-in not called, nothing changed.
    before = open(os.path.join(out2, CAMPAIGN)).read()
    p = gpu_check(build, out2, "acquire", PATH=bare, CAMPAIGN_ARCHIVE=archive)
    log = open(os.path.join(out2, "acquire.log")).read()
    assert p.returncode != 0 and f"both {out2}/acquire and the archive {archive} exist" in log, log
    assert open(os.path.join(out2, CAMPAIGN)).read() == before
    print("ok: an archive and a campaign in OUT refused")

    # With mpirun installed: one rank under it; no archive asked for, none written.
    if shutil.which("mpirun"):
        out3 = os.path.join(tmp, "out3")
        p = gpu_check(build, out3, "acquire", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        assert p.returncode == 0, (p.stdout, p.stderr, open(os.path.join(out3, "acquire.log")).read())
        assert open(os.path.join(out3, CAMPAIGN)).read().startswith("call launched=True isolated=None"), \
            open(os.path.join(out3, CAMPAIGN)).read()
        assert not os.path.exists(os.path.join(out3, "campaign.tgz"))
        print("ok: under mpirun where it is installed")

        # mpirun installed, but the runtime bundle's exports ask for isolated singletons: another
        # installation's launcher must not start the bundle's Open MPI.
        out4 = os.path.join(tmp, "out4")
        p = gpu_check(build, out4, "acquire", OMPI_MCA_ess_singleton_isolated="1")
        log = open(os.path.join(out4, "acquire.log")).read()
        assert p.returncode == 0, (p.stdout, p.stderr, log)
        assert "OMPI_MCA_ess_singleton_isolated=1, the runtime bundle's Open MPI: one rank without a launcher" in log, log
        assert open(os.path.join(out4, CAMPAIGN)).read().startswith("call launched=False isolated=1"), \
            open(os.path.join(out4, CAMPAIGN)).read()
        print("ok: no launcher where the runtime bundle asks for isolated singletons")
