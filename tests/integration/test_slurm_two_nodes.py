"""Slurm as clusters run it, on this machine: two nodes (node-a, node-b: one slurmd each, each in its
own UTS and network namespace; slurm_cluster.py) and slurm/multi-node.sbatch with one task per
node. The co-location gate runs on every node (COLOCATE=1, quick profile) and the verdict holds
both; acquire launches its ranks across both nodes (srun + PMIx), they write one shared HDF5 file,
the DP2 collectives cross the node boundary, and rank 0 publishes one bundle whose provenance
names both hosts. Exits 77 (skipped) when Slurm is not installed or we are not root."""
import json
import os

import h5py
import yaml

from harness_test_lib import HARNESS, SOURCE_DIR
from slurm_cluster import SlurmCluster

with SlurmCluster(nodes=["node-a", "node-b"]) as cluster:
    tmp = cluster.tmp
    root = os.path.join(tmp, "bundles")
    acq = os.path.join(tmp, "acq")
    job_env = dict(JOB=os.path.join(SOURCE_DIR, "jobs/tiny.yaml"), BACKEND="cpu_reference", GPUS_PER_TASK="0",
                   OUT_ROOT=root, OUT=acq, HARNESS=HARNESS, ROUNDS="2", TP_DEGREES="1", DP_DEGREES="1,2",
                   COLOCATE="1", COLOCATE_ARGS=f"--quick --out {acq}")
    job_id, log = cluster.submit(os.path.join(SOURCE_DIR, "slurm/multi-node.sbatch"),
                                 ["--nodes=2", "--gpus-per-task=0", "--ntasks-per-node=1", "--cpus-per-task=1"],
                                 job_env)
    assert "harness: job" in log and "node-a,node-b" in log, log
    assert "published" in log, log + cluster.logs()
    assert "3 component tables and 2 collective tables published" in log, log

    # The gate ran on both nodes: one entry per host, each its own node.
    verdict = yaml.safe_load(open(os.path.join(root, "tiny", "colocation.yaml")))
    assert sorted(n["host"] for n in verdict["nodes"]) == ["node-a", "node-b"], verdict["nodes"]
    assert all(n["ranks_on_node"] == 1 and n["allowed_regime"] == 1 for n in verdict["nodes"])

    # One shared file, written by ranks on both hosts; every round complete.
    with h5py.File(os.path.join(acq, "acquisition.h5"), "r") as f:
        ranks = json.loads(f["provenance"].attrs["run_0"])
        assert sorted((r["rank"], r["host"]) for r in ranks) == [(0, "node-a"), (1, "node-b")], ranks
        assert all(r["placement"]["gate"].startswith("not needed") for r in ranks), ranks
        assert all(all(c["rounds_done"][()] == 1) for c in f["cells"].values())

    # One bundle; its entries say where they were measured and how they were placed.
    meta = yaml.safe_load(open(os.path.join(root, "tiny", "meta.yaml")))
    entries = meta["per_tp"][1]["moe_components"]["entries"]
    assert len(entries) == 3 and all(e["coverage"]["completed_rounds"] == 2 for e in entries)
    hosts = {d["host"] for d in entries[0]["provenance"]["hardware"]["devices"]}
    assert hosts == {"node-a", "node-b"}, hosts
    assert all(e["contract"]["placement"]["verified"] is True for e in entries)
    collectives = meta["per_tp"][1]["collectives"]["entries"]
    assert len(collectives) == 2, collectives
    print(f"ok: Slurm job {job_id} on 2 nodes published {len(entries)} targets and {len(collectives)} "
          "collective tables")
