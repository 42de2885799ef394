"""Real Slurm end to end (slurm_cluster.py: munge, slurmctld and one slurmd on this host): submit
slurm/single-node.sbatch with the tiny job on the CPU backend, two tasks on the node (UNVERIFIED=1:
the gate's CPU verdict is not the subject here), wait, check the published bundle and that acquire
was told the allocation's time limit.
Exits 77 (skipped) when Slurm or munge is not installed or we are not root."""
import csv
import os
import re

import yaml

from harness_test_lib import HARNESS, SOURCE_DIR
from slurm_cluster import SlurmCluster

with SlurmCluster() as cluster:
    tmp = cluster.tmp
    root = os.path.join(tmp, "bundles")
    job_env = dict(JOB=os.path.join(SOURCE_DIR, "jobs/tiny.yaml"), BACKEND="cpu_reference", GPUS_PER_TASK="0",
                   OUT_ROOT=root, OUT=os.path.join(tmp, "acq"), HARNESS=HARNESS, ROUNDS="2",
                   TP_DEGREES="1", DP_DEGREES="1,2", UNVERIFIED="1")
    job_id, log = cluster.submit(os.path.join(SOURCE_DIR, "slurm/single-node.sbatch"),
                                 ["--gpus-per-task=0", "--ntasks-per-node=2", "--cpus-per-task=1"], job_env)
    assert "harness: job" in log and "--tp 1 --dp 1,2" in log and "--rounds 2" in log, log
    # acquire may start no wave that would outlast the allocation (8 h in the template, less the
    # 300 s margin for the collectives and the publisher, from what squeue says is left).
    limit = re.search(r"--time-limit (\d+)", log)
    assert limit and 8 * 3600 - 300 - 600 < int(limit.group(1)) <= 8 * 3600 - 300, log
    assert "3 component tables and 2 collective tables published" in log, log
    meta = yaml.safe_load(open(os.path.join(root, "tiny", "meta.yaml")))
    entries = meta["per_tp"][1]["moe_components"]["entries"]
    assert len(entries) == 3 and all(e["coverage"]["completed_rounds"] == 2 for e in entries)
    for e in entries:
        rows = list(csv.reader(open(os.path.join(root, "tiny", "tp1", e["path"]))))
        assert rows[0] == ["component", "mode", "tokens", "activated_experts", "local_assignments", "time_us"]
        assert len(rows) > 10
    print(f"ok: Slurm job {job_id} published {len(entries)} targets")
