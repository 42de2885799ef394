"""tools/gpu-check.sh's acquire step without a GPU: a stand-in `harness` appends one line per call
to the campaign's acquisition file (beside a crash snapshot) and exits with $FAKE_EXIT. The step
runs it under mpirun where mpirun is installed and as one rank without a launcher where it is not
or where OMPI_MCA_ess_singleton_isolated=1 (the runtime bundle's exports) says so;
with $CAMPAIGN_ARCHIVE it starts a new campaign when the archive does not exist, resumes the
archived one when it does, packs the campaign (without snapshots) into OUT/campaign.tgz after
every run, finished or stopped, and refuses when both the archive and OUT/acquire exist. A call
cut off by SIGTERM (to its process group, as a machine's time limit sends it, or to the script
alone) stops the run and packs what it wrote with its crash snapshots."""
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

from harness_test_lib import SOURCE_DIR, gpu_check, write_executable

FAKE = """#!/usr/bin/env python3
import os, sys, time
args = sys.argv[1:]
assert args[0] == "acquire", args
root = args[args.index("--out-root") + 1]
campaign = os.path.join(root, "acquisitions", "qwen3-30b-a3b")
os.makedirs(campaign, exist_ok=True)
with open(os.path.join(campaign, "acquisition.h5"), "a") as f:
    f.write(f"call launched={'OMPI_COMM_WORLD_SIZE' in os.environ} "
            f"isolated={os.environ.get('OMPI_MCA_ess_singleton_isolated')} args={' '.join(args[1:])}\\n")
open(os.path.join(campaign, "acquisition.h5.snapshot"), "w").write("copy\\n")
if "FAKE_PID_FILE" in os.environ:  # a long run, until a signal ends it
    open(os.environ["FAKE_PID_FILE"], "w").write(str(os.getpid()))
    time.sleep(120)
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
    for tool in ("bash", "env", "date", "mkdir", "tail", "dirname", "tar", "gzip", "cat", "mv", "sleep"):
        os.symlink(shutil.which(tool), os.path.join(bare, tool))
    os.symlink(sys.executable, os.path.join(bare, "python3"))
    archive = os.path.join(tmp, "kept", "campaign.tgz")
    os.makedirs(os.path.dirname(archive))

    # A new campaign, no mpirun, stopped by its time limit (exit 4): packed all the same.
    out = os.path.join(tmp, "out1")
    p = gpu_check(build, out, "acquire", PATH=bare, CAMPAIGN_ARCHIVE=archive, FAKE_EXIT="4",
                  ACQUIRE_ARGS="--rounds 1 --time-limit 480")
    log = open(os.path.join(out, "acquire.log")).read()
    # Not a failure: said as a stop, exit 4 (the same command resumes).
    assert p.returncode == 4 and "== acquire stopped at its time limit" in p.stdout, (p.returncode, p.stdout, p.stderr)
    assert "FAILED" not in p.stdout, p.stdout
    assert "mpirun not installed: one rank without a launcher" in log and "a new campaign" in log, log
    assert "campaign packed into" in log and "(acquire exit 4)" in log, log
    packed = calls_in(os.path.join(out, "campaign.tgz"))
    assert packed == ["call launched=False isolated=1 args=jobs/qwen3-30b-a3b.yaml --tp 1 --dp 1 --backend native "
                      f"--out-root {out}/acquire --rounds 1 --time-limit 480"], packed
    print("ok: a new campaign without a launcher, packed after a stop")
    # A budget stop (exit 3) needs the user (raise the budget): a failure.
    p = gpu_check(build, os.path.join(tmp, "out-budget"), "acquire", PATH=bare, FAKE_EXIT="3")
    assert p.returncode == 1 and "== acquire FAILED" in p.stdout, (p.returncode, p.stdout, p.stderr)

    # The next call resumes the archive in a fresh OUT and packs both calls' work.
    shutil.copy(os.path.join(out, "campaign.tgz"), archive)
    out2 = os.path.join(tmp, "out2")
    p = gpu_check(build, out2, "acquire", PATH=bare, CAMPAIGN_ARCHIVE=archive)
    assert p.returncode == 0 and "== acquire ok" in p.stdout, (p.stdout, p.stderr)
    assert f"resuming the campaign archived in {archive}" in open(os.path.join(out2, "acquire.log")).read()
    packed = calls_in(os.path.join(out2, "campaign.tgz"))
    assert len(packed) == 2 and packed[1].startswith("call launched=False isolated=1"), packed
    print("ok: resumed from the archive")
    # Another job (a larger refinement cap, say) through ACQUIRE_JOB.
    shutil.copy(os.path.join(out2, "campaign.tgz"), archive)
    out_job = os.path.join(tmp, "out-job")
    p = gpu_check(build, out_job, "acquire", PATH=bare, CAMPAIGN_ARCHIVE=archive, ACQUIRE_JOB="kept/raised-cap.yaml")
    assert p.returncode == 0, (p.stdout, p.stderr)
    packed = calls_in(os.path.join(out_job, "campaign.tgz"))
    assert len(packed) == 3 and "args=kept/raised-cap.yaml --tp 1 --dp 1 --backend native" in packed[2], packed

    # Both an archive and a campaign in OUT: refused, the stand-in not called, nothing changed.
    before = open(os.path.join(out2, CAMPAIGN)).read()
    p = gpu_check(build, out2, "acquire", PATH=bare, CAMPAIGN_ARCHIVE=archive)
    log = open(os.path.join(out2, "acquire.log")).read()
    assert p.returncode != 0 and f"both {out2}/acquire and the archive {archive} exist" in log, log
    assert open(os.path.join(out2, CAMPAIGN)).read() == before
    print("ok: an archive and a campaign in OUT refused")

    # Cut off mid-run by SIGTERM, to the whole process group (a machine's time limit) or to the
    # script alone: the run is stopped, and what it wrote is packed with its crash snapshots.
    # Under mpirun too where it is installed: a second SIGTERM right after the first makes mpirun
    # exit without stopping its rank, which must not outlive the call.
    launchers = [("without a launcher", bare)] + ([("under mpirun", os.environ["PATH"])] if shutil.which("mpirun") else [])
    for (launcher, path), target in [(l, t) for l in launchers for t in ("process group", "script")]:
        cut = os.path.join(tmp, "cut-" + target.replace(" ", "-") + "-" + launcher.replace(" ", "-"))
        pid_file = os.path.join(tmp, "fake.pid")
        if os.path.exists(pid_file):
            os.remove(pid_file)
        p = subprocess.Popen(["bash", os.path.join(SOURCE_DIR, "tools/gpu-check.sh"), build, cut, "acquire"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                             env=dict(os.environ, PATH=path, CAMPAIGN_ARCHIVE=os.path.join(tmp, "none.tgz"),
                                      FAKE_PID_FILE=pid_file, OMPI_ALLOW_RUN_AS_ROOT="1",
                                      OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
        deadline = time.monotonic() + 60
        while not os.path.exists(pid_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(pid_file), "the stand-in never started"
        time.sleep(0.2)
        fake_pid = int(open(pid_file).read())
        if target == "process group":
            os.killpg(p.pid, signal.SIGTERM)
        else:
            os.kill(p.pid, signal.SIGTERM)
        stdout, _ = p.communicate(timeout=60)
        log = open(os.path.join(cut, "acquire.log")).read()
        said = f"cut off by SIGTERM: the campaign packed with its crash snapshots into {cut}/campaign.tgz"
        assert p.returncode == 143 and f"== acquire {said}" in stdout and said in log, (p.returncode, stdout, log)
        with tarfile.open(os.path.join(cut, "campaign.tgz")) as t:
            assert CAMPAIGN + ".snapshot" in t.getnames(), t.getnames()
            assert t.extractfile(CAMPAIGN).read().decode().startswith(
                f"call launched={launcher == 'under mpirun'}"), t.getnames()
        assert not os.path.exists(os.path.join(cut, "campaign.tgz.packing"))
        # mpirun may exit a moment before its rank does.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(fake_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(fake_pid, signal.SIGKILL)
            raise AssertionError(f"the run ({fake_pid}) outlived its cut-off call")
        print(f"ok: cut off by SIGTERM to the {target} {launcher}, packed with snapshots")

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
