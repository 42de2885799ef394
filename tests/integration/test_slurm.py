"""Real Slurm end to end: start munge, slurmctld and slurmd on localhost (Debian's slurm-wlm) with a
generated configuration in a temporary directory, submit slurm/single-node.sbatch with the tiny
job on the CPU backend, wait, check the published bundle, and stop the daemons we started (by pid).
Exits 77 (skipped) when Slurm or munge is not installed or we are not root."""
import csv
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import yaml

from harness_test_lib import HARNESS, SOURCE_DIR

SKIP = 77
for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue"):
    if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
        print(f"skipped: {tool} not installed")
        sys.exit(SKIP)
if os.geteuid() != 0:
    print("skipped: slurmd needs root")
    sys.exit(SKIP)


def sbin(tool):
    return shutil.which(tool) or f"/usr/sbin/{tool}"


def read_pid(path, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            return int(open(path).read().strip())
        except (OSError, ValueError):
            time.sleep(0.2)
    raise RuntimeError(f"no pid file {path}")


tmp = tempfile.mkdtemp(prefix="harness-slurm-")
pids = []
host = socket.gethostname()
port = random.randint(20000, 40000)
env = dict(os.environ, SLURM_CONF=os.path.join(tmp, "slurm.conf"))
try:
    os.makedirs(os.path.join(tmp, "state"))
    os.makedirs(os.path.join(tmp, "spool"))
    key = os.path.join(tmp, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = os.path.join(tmp, "munge.socket")
    subprocess.run([sbin("munged"), "--force", f"--socket={sock}", f"--key-file={key}",
                    f"--pid-file={tmp}/munged.pid", f"--log-file={tmp}/munged.log", f"--seed-file={tmp}/munge.seed"],
                   check=True)
    pids.append(read_pid(f"{tmp}/munged.pid"))
    open(env["SLURM_CONF"], "w").write(f"""ClusterName=harness-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool
SlurmctldPidFile={tmp}/slurmctld.pid
SlurmdPidFile={tmp}/slurmd.pid
SlurmctldPort={port}
SlurmdPort={port + 1}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmctldLogFile={tmp}/slurmctld.log
SlurmdLogFile={tmp}/slurmd.log
NodeName={host} CPUs={os.cpu_count()} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
    subprocess.run([sbin("slurmctld"), "-f", env["SLURM_CONF"]], check=True, env=env)
    pids.append(read_pid(f"{tmp}/slurmctld.pid"))
    subprocess.run([sbin("slurmd"), "-f", env["SLURM_CONF"]], check=True, env=env)
    pids.append(read_pid(f"{tmp}/slurmd.pid"))
    end = time.time() + 60
    while time.time() < end:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env).stdout
        if "idle" in out:
            break
        time.sleep(0.5)
    else:
        raise RuntimeError("the node never became idle:\n" + open(f"{tmp}/slurmd.log").read()[-2000:])

    root = os.path.join(tmp, "bundles")
    job_env = dict(env, JOB=os.path.join(SOURCE_DIR, "jobs/tiny.yaml"), BACKEND="cpu_reference", GPUS_PER_TASK="0",
                   OUT_ROOT=root, OUT=os.path.join(tmp, "acq"), HARNESS=HARNESS, ROUNDS="2",
                   TP_DEGREES="1", DP_DEGREES="1,2", UNVERIFIED="1")
    sub = subprocess.run(["sbatch", "--parsable", "--gpus-per-task=0", "--ntasks-per-node=2", "--cpus-per-task=1",
                          f"--output={tmp}/job-%j.out", os.path.join(SOURCE_DIR, "slurm/single-node.sbatch")],
                         capture_output=True, text=True, env=job_env, cwd=SOURCE_DIR)
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().split(";")[0]
    end = time.time() + 240
    while time.time() < end:
        q = subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True, env=env).stdout
        if not q.strip():
            break
        time.sleep(1)
    else:
        raise RuntimeError("the job did not finish in time")
    log = open(f"{tmp}/job-{job_id}.out").read()
    assert "harness: job" in log and "--tp 1 --dp 1,2 --rounds 2" in log, log
    assert "3 component tables and 2 collective tables published" in log, log
    meta = yaml.safe_load(open(os.path.join(root, "tiny", "meta.yaml")))
    entries = meta["per_tp"][1]["moe_components"]["entries"]
    assert len(entries) == 3 and all(e["coverage"]["completed_rounds"] == 2 for e in entries)
    for e in entries:
        rows = list(csv.reader(open(os.path.join(root, "tiny", "tp1", e["path"]))))
        assert rows[0] == ["component", "mode", "tokens", "activated_experts", "local_assignments", "time_us"]
        assert len(rows) > 10
    print(f"ok: Slurm job {job_id} published {len(entries)} targets")
finally:
    for pid in reversed(pids):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for pid in pids:
        for _ in range(50):
            try:
                os.kill(pid, 0)
                time.sleep(0.1)
            except ProcessLookupError:
                break
    shutil.rmtree(tmp, ignore_errors=True)
