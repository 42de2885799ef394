"""Concurrency: 8 processes publish 8 different targets into one variant at the same time,
repeated; no entry is lost and meta.yaml is always parseable while they run."""
import os
import subprocess
import tempfile
import threading

import yaml

from harness_test_lib import HARNESS, MPI_ENV, SOURCE_DIR, run

job = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")
targets = [(1, 1, 0), (1, 2, 0), (1, 2, 1), (2, 1, 0), (2, 1, 1), (1, 4, 0), (1, 4, 2), (1, 4, 3)]
REPEATS = 4

with tempfile.TemporaryDirectory() as tmp:
    files = []
    for i, (tp, dp, rank) in enumerate(targets):
        out = os.path.join(tmp, f"acq{i}")
        run([HARNESS, "acquire", job, "--tp", str(tp), "--dp", str(dp), "--rank", str(rank), "--out", out,
             "--no-publish", "--quiet"])
        files.append(os.path.join(out, "acquisition.h5"))
    for rep in range(REPEATS):
        root = os.path.join(tmp, f"root{rep}")
        meta = os.path.join(root, "shared", "meta.yaml")
        stop = threading.Event()
        bad_reads = []

        def reader():
            while not stop.is_set():
                if os.path.exists(meta):
                    try:
                        yaml.safe_load(open(meta))
                    except Exception as e:  # noqa: BLE001 - any parse failure is the defect
                        bad_reads.append(repr(e))

        t = threading.Thread(target=reader)
        t.start()
        procs = [subprocess.Popen([HARNESS, "publish", f, "--out-root", root, "--variant", "shared", "--accept-failures"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=MPI_ENV)
                 for f in files]
        results = [p.communicate() + (p.returncode,) for p in procs]
        stop.set()
        t.join()
        for out, err, rc in results:
            assert rc == 0, err
        assert not bad_reads, bad_reads[:3]
        doc = yaml.safe_load(open(meta))
        got = sorted((e["target"]["tp"], e["target"]["dp"], e["target"]["rank"])
                     for tp in doc["per_tp"].values() for e in tp["moe_components"]["entries"])
        assert got == sorted(targets), f"repeat {rep}: entries {got}"
print(f"ok: {REPEATS} repeats, 8 concurrent publishers each")
