"""A real Slurm cluster on this machine for the integration tests: munge, slurmctld and slurmd
(Debian's slurm-wlm) with a generated configuration in a temporary directory. With `nodes`, every
node is its own slurmd in its own UTS and network namespace (its own hostname and address), joined
to the controller by a veth pair on a bridge: ranks on different nodes are on different hosts as
far as Slurm, PMIx and MPI can tell, and share only the filesystem. Exits 77 (skipped) when Slurm or
munge is not installed or we are not root.

The daemons detach, and the bridge and namespaces outlive a killed test (a ctest timeout kills with
SIGKILL, so no __exit__ runs): a reaper in its own session, started first, watches the test process
and, once it is gone without having cleaned up, stops what `owned.json` in the cluster's folder
lists. Run as `slurm_cluster.py --reap PID DIR`."""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77
# The states of a job that has ended (Slurm keeps it MinJobAge, 300 s, after that).
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
         "PREEMPTED"}


def require_slurm():
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


def process_alive(pid):
    """True while `pid` runs (a zombie, killed and not yet reaped by its parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def send(pids, sig):
    """`sig` to each of `pids` that still exists."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def release(owned, tmp):
    """Stops the daemons (SIGTERM, then waits up to 5 s each), kills the namespaces' holders,
    deletes the links and the cluster's folder: what __exit__ and the reaper both do."""
    send(reversed(owned["daemons"]), signal.SIGTERM)
    for pid in owned["daemons"]:
        for _ in range(50):
            if not process_alive(pid):
                break
            time.sleep(0.1)
    send(owned["holders"], signal.SIGKILL)  # the namespaces (and the veth ends inside) go with them
    for link in owned["links"]:
        subprocess.run(["ip", "link", "del", link], capture_output=True)
    shutil.rmtree(tmp, ignore_errors=True)


def reap(test_pid, tmp):
    """The reaper's loop: done when the folder is gone (the test cleaned up); releases what the
    folder's owned.json lists once the test process has ended without doing so."""
    while os.path.isdir(tmp):
        if not process_alive(test_pid):
            try:
                owned = json.load(open(os.path.join(tmp, "owned.json")))
            except (OSError, ValueError):
                owned = {"daemons": [], "holders": [], "links": []}
            release(owned, tmp)
            return
        time.sleep(0.5)


class SlurmCluster:
    def __init__(self, nodes=None, gpus=0):
        require_slurm()
        self.gpus = gpus
        self.tmp = tempfile.mkdtemp(prefix="harness-slurm-")
        self.host = socket.gethostname()
        self.nodes = nodes
        self.pids = []        # daemons we started, stopped in reverse order
        self.holders = []     # processes that hold the nodes' namespaces
        self.links = []       # links we created in this namespace
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.tmp, "slurm.conf"))
        self.reaper = None

    def own(self, kind, item):
        """Records a daemon's pid, a holder or a link, here and in owned.json for the reaper."""
        getattr(self, kind).append(item)
        owned = {"daemons": self.pids, "holders": [h.pid for h in self.holders], "links": self.links}
        path = os.path.join(self.tmp, "owned.json")
        with open(path + ".tmp", "w") as f:
            json.dump(owned, f)
        os.replace(path + ".tmp", path)

    def run(self, *cmd, ns=None, **kw):
        prefix = ["nsenter", "-t", str(ns), "--net", "--uts"] if ns else []
        return subprocess.run(prefix + list(cmd), check=True, env=self.env, **kw)

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self):
        tmp = self.tmp
        self.reaper = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--reap", str(os.getpid()), tmp],
                                       start_new_session=True, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.makedirs(os.path.join(tmp, "state"))
        key = os.path.join(tmp, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = os.path.join(tmp, "munge.socket")
        self.run(sbin("munged"), "--force", f"--socket={sock}", f"--key-file={key}", f"--pid-file={tmp}/munged.pid",
                 f"--log-file={tmp}/munged.log", f"--seed-file={tmp}/munge.seed")
        self.own("pids", read_pid(f"{tmp}/munged.pid"))
        port = random.randint(20000, 40000)
        cpus = os.cpu_count()
        if self.nodes:
            subnet = f"10.{random.randint(64, 127)}.{random.randint(0, 255)}"
            bridge = f"hb{random.randint(0, 0xffff):04x}"
            self.run("ip", "link", "add", bridge, "type", "bridge")
            self.own("links", bridge)
            self.run("ip", "addr", "add", f"{subnet}.1/24", "dev", bridge)
            self.run("ip", "link", "set", bridge, "up")
            controller = f"{self.host}({subnet}.1)"
            node_lines = "\n".join(f"NodeName={n} NodeAddr={subnet}.{i + 2} CPUs={cpus} RealMemory=1000 State=UNKNOWN"
                                   for i, n in enumerate(self.nodes))
            partition = ",".join(self.nodes)
        else:
            controller = self.host
            node_lines = f"NodeName={self.host} CPUs={cpus} RealMemory=1000 State=UNKNOWN"
            partition = self.host
        gres = ""
        if self.gpus:
            # Stand-in GPUs: character devices (the null device's numbers) that Slurm's gres/gpu
            # plugin allocates and turns into CUDA_VISIBLE_DEVICES; nothing opens them.
            for i in range(self.gpus):
                self.run("mknod", os.path.join(tmp, f"gpu{i}"), "c", "1", "3")
            open(os.path.join(tmp, "gres.conf"), "w").write(
                f"AutoDetect=off\nName=gpu File={tmp}/gpu[0-{self.gpus - 1}]\n")
            node_lines = "\n".join(line + f" Gres=gpu:{self.gpus}" for line in node_lines.split("\n"))
            gres = "GresTypes=gpu\n"
        open(self.env["SLURM_CONF"], "w").write(f"""ClusterName=harness-test
{gres}
SlurmctldHost={controller}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool-%n
TmpFS={tmp}/tmp-%n
SlurmctldPidFile={tmp}/slurmctld.pid
SlurmdPidFile={tmp}/slurmd-%n.pid
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
SlurmdLogFile={tmp}/slurmd-%n.log
{node_lines}
PartitionName=debug Nodes={partition} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
        self.run(sbin("slurmctld"), "-f", self.env["SLURM_CONF"])
        self.own("pids", read_pid(f"{tmp}/slurmctld.pid"))
        for i, name in enumerate(self.nodes or [self.host]):
            os.makedirs(os.path.join(tmp, f"spool-{name}"))
            os.makedirs(os.path.join(tmp, f"tmp-{name}"))  # PMIx's per-node directories
            ns = None
            if self.nodes:
                holder = subprocess.Popen(["unshare", "--uts", "--net", "sleep", "infinity"])
                self.own("holders", holder)
                for _ in range(50):  # until the holder runs in its own namespace
                    if os.readlink(f"/proc/{holder.pid}/ns/net") != os.readlink("/proc/self/ns/net"):
                        break
                    time.sleep(0.05)
                ns = holder.pid
                outer, inner = f"{self.links[0]}a{i}", f"{self.links[0]}b{i}"
                self.run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
                self.run("ip", "link", "set", inner, "netns", str(ns))
                self.run("ip", "link", "set", outer, "master", self.links[0])
                self.run("ip", "link", "set", outer, "up")
                self.run("hostname", name, ns=ns)
                self.run("ip", "addr", "add", f"{subnet}.{i + 2}/24", "dev", inner, ns=ns)
                self.run("ip", "link", "set", inner, "up", ns=ns)
                self.run("ip", "link", "set", "lo", "up", ns=ns)
            self.run(sbin("slurmd"), "-f", self.env["SLURM_CONF"], ns=ns)
            self.own("pids", read_pid(f"{tmp}/slurmd-{name}.pid"))
        end = time.time() + 90
        while time.time() < end:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True,
                                 env=self.env).stdout
            if out.count("idle") == len(self.nodes or [self.host]):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the nodes never became idle ({out!r}):\n{self.logs()}")

    def submit(self, script, sbatch_args, job_env, timeout=150):
        """Submits `script`, waits until Slurm says the job has ended, returns (job id, its output).
        A job that ended in any state but COMPLETED with exit code 0 raises, with its output and
        the daemons' logs. The state comes from `scontrol show job`: a query that fails (the
        controller busy) is asked again, never taken for a job that left the queue."""
        sub = subprocess.run(["sbatch", "--parsable", *sbatch_args, f"--output={self.tmp}/job-%j.out", script],
                             capture_output=True, text=True, env=dict(self.env, **job_env),
                             cwd=os.path.dirname(os.path.dirname(script)), timeout=60)
        assert sub.returncode == 0, sub.stderr
        job_id = sub.stdout.strip().split(";")[0]
        end = time.time() + timeout
        state = "unknown"
        while time.time() < end:
            state, exit_code = self.job_state(job_id)
            if state in ENDED:
                break
            time.sleep(1)
        else:
            # (well inside the tests' 300 s, so that a hang reports itself instead of being killed)
            record = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True,
                                    env=self.env, timeout=30).stdout
            raise RuntimeError(f"job {job_id} did not end in {timeout} s (state {state}):\n{record}\n"
                               f"its output:\n{self.job_output(job_id)}\n{self.logs()}")
        log = self.job_output(job_id)
        if state != "COMPLETED" or exit_code != "0:0":
            raise RuntimeError(f"job {job_id} ended {state} with exit code {exit_code}; its output:\n"
                               f"{log}\n{self.logs()}")
        return job_id, log

    def job_state(self, job_id):
        """(JobState, ExitCode) of a job the controller knows; ("unknown", "") when the query fails."""
        try:
            q = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True,
                               env=self.env, timeout=30)
        except subprocess.TimeoutExpired:
            return "unknown", ""
        fields = dict(f.split("=", 1) for f in q.stdout.split() if "=" in f)
        if q.returncode != 0 or "JobState" not in fields:
            return "unknown", ""
        return fields["JobState"], fields.get("ExitCode", "")

    def job_output(self, job_id):
        path = f"{self.tmp}/job-{job_id}.out"
        return open(path).read() if os.path.exists(path) else f"(no output file {path})"

    def logs(self):
        """The tail of every daemon log, for a failure message."""
        return "".join(f"--- {f}\n" + open(os.path.join(self.tmp, f)).read()[-1500:]
                       for f in sorted(os.listdir(self.tmp)) if f.endswith(".log"))

    def __exit__(self, *exc):
        release({"daemons": self.pids, "holders": [h.pid for h in self.holders], "links": self.links}, self.tmp)
        for holder in self.holders:
            holder.wait()
        if self.reaper:  # it ends by itself once the folder is gone
            self.reaper.wait(timeout=10)
        return False


if __name__ == "__main__" and sys.argv[1:2] == ["--reap"]:
    reap(int(sys.argv[2]), sys.argv[3])
