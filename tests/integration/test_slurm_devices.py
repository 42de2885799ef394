"""Which GPU each rank takes, under the environments real Slurm produces (slurm_cluster.py with two
stand-in GPUs per node: Slurm's gres/gpu plugin allocates them and sets CUDA_VISIBLE_DEVICES, as on
a GPU cluster without device cgroups). device_selection_probe runs the harness's choice
(select_device on the node split make_rank_context uses) and maps it back to the node's GPU index.
Every mode must give the ranks of a node distinct GPUs; too few GPUs must be refused, not shared.
Exits 77 (skipped) when Slurm or munge is not installed or we are not root."""
import os
import re
import subprocess
import time

from harness_test_lib import SOURCE_DIR
from slurm_cluster import SlurmCluster

PROBE = os.environ["DEVICE_PROBE"]
LINE = re.compile(r"rank (\d+) host (\S+) local (\d+)/(\d+) CUDA_VISIBLE_DEVICES=(\S*) (.*)")


def parse(out):
    ranks = []
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            ranks.append(dict(rank=int(m[1]), host=m[2], local=int(m[3]), visible=m[5], result=m[6]))
    return ranks


def check_distinct(mode, ranks, nodes, per_node, output):
    """`output`: what the ranks printed, for the failure message."""
    assert len(ranks) == nodes * per_node, (mode, ranks, output)
    by_host = {}
    for r in ranks:
        assert r["result"].startswith("device ") and "SHARED" not in r["result"], (mode, r, output)
        by_host.setdefault(r["host"], []).append(r["result"].split(" gpu ")[1])
    assert len(by_host) == nodes, (mode, by_host)
    for host, gpus in by_host.items():
        assert sorted(gpus) == [str(i) for i in range(per_node)], (mode, host, gpus)
    print(f"ok: {mode}: " + "; ".join(f"{h} -> GPUs {sorted(g)}" for h, g in sorted(by_host.items())))


with SlurmCluster(nodes=["node-a", "node-b"], gpus=2) as cluster:
    # The sbatch templates' own launch (slurm/harness-env.sh), the probe in place of the harness.
    script = os.path.join(cluster.tmp, "probe.sbatch")
    open(script, "w").write(f"""#!/bin/bash
source {SOURCE_DIR}/slurm/harness-env.sh
launch {PROBE}
""")

    def batch(mode, sbatch_args, env, nodes=2, per_node=2, expect_distinct=True):
        job_id, log = cluster.submit(script, [f"--nodes={nodes}", f"--ntasks-per-node={per_node}",
                                              "--cpus-per-task=1", *sbatch_args], env)
        ranks = parse(log)
        if expect_distinct:
            check_distinct(mode, ranks, nodes, per_node, log)
        return ranks, log

    # srun --gpus-per-task=1 --gpu-bind=closest (the templates' default, GPUS_PER_TASK=1).
    batch("template srun --gpus-per-task=1", ["--gpus-per-task=1"], dict(GPUS_PER_TASK="1"))
    # --gpus-per-node: every task sees the node's GPUs and takes its local rank's.
    batch("template srun under --gpus-per-node=2", ["--gpus-per-node=2"], dict(GPUS_PER_TASK="0"))
    # mpirun inside the allocation (LAUNCHER=mpirun): the ranks inherit the job's GPUs.
    # (Open MPI refuses root without its two opt-in variables; CI exports them, a shell may not.)
    batch("template mpirun under --gpus-per-node=2", ["--gpus-per-node=2"],
          dict(GPUS_PER_TASK="0", LAUNCHER="mpirun", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"), nodes=1)

    # Direct sruns as the templates launch (harness-env.sh: PMIx's hash datastore).
    direct_env = dict(cluster.env, PMIX_MCA_gds="hash")
    # srun --gpus-per-task=1 without a binding: each task sees one GPU (its own) as device 0.
    out = subprocess.run(["srun", "--mpi=pmix", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
                          "--gpus-per-task=1", PROBE], capture_output=True, text=True, env=direct_env,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    ranks = parse(out.stdout)
    assert all("," not in r["visible"] and r["result"].startswith("device 0 ") for r in ranks), ranks
    check_distinct("srun --gpus-per-task=1 (one visible GPU per task)", ranks, 2, 2, out.stdout + out.stderr)

    # One GPU per node for two tasks: both would take it; refused (exit 2), never shared silently.
    out = subprocess.run(["srun", "--mpi=pmix", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
                          "--gpus-per-node=1", PROBE], capture_output=True, text=True, env=direct_env,
                         timeout=120)
    assert out.returncode != 0 and "SHARED" in out.stdout, out.stdout + out.stderr
    print("ok: two tasks on one allocated GPU refused")

    # A job that fails is an error with its output, never an empty log read as a result.
    failing = os.path.join(cluster.tmp, "failing.sbatch")
    open(failing, "w").write("#!/bin/bash\necho before the failure\nexit 3\n")
    try:
        cluster.submit(failing, ["--nodes=1"], {})
        raise AssertionError("a failed job was returned as a result")
    except RuntimeError as e:
        assert "ended FAILED with exit code 3:0" in str(e) and "before the failure" in str(e), e
    print("ok: a failed job raises with its output")

    # A rank that dies ends the job at once (the templates' srun --kill-on-bad-exit), instead of
    # leaving the others waiting in MPI until the allocation's time limit.
    crash = os.path.join(cluster.tmp, "crash.sbatch")
    open(crash, "w").write(f"""#!/bin/bash
source {SOURCE_DIR}/slurm/harness-env.sh
launch bash -c 'if [ "$SLURM_PROCID" = 0 ]; then kill -SEGV $$; fi; sleep 240'
""")
    t0 = time.time()
    try:
        cluster.submit(crash, ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1"], dict(GPUS_PER_TASK="0"),
                       timeout=120)
        raise AssertionError("a job whose rank died was returned as a result")
    except RuntimeError as e:
        assert "ended FAILED" in str(e) and "Segmentation fault" in str(e), e
    assert time.time() - t0 < 120, time.time() - t0
    print(f"ok: a rank that dies ends the job ({time.time() - t0:.0f} s)")
