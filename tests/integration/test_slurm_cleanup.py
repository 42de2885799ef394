"""A test killed with its Slurm cluster up (a ctest timeout sends SIGKILL, so no __exit__ runs)
leaves nothing behind: the cluster's reaper stops the detached daemons, the nodes' namespaces and
the bridge, and removes the cluster's folder. A child process starts a two-node cluster, says what
it owns, and is killed; every piece must be gone within 30 s.
Exits 77 (skipped) when Slurm or munge is not installed or we are not root."""
import json
import os
import signal
import subprocess
import sys
import time

from slurm_cluster import process_alive, release, require_slurm

require_slurm()
here = os.path.dirname(os.path.abspath(__file__))
CHILD = """
import json, sys, time
from slurm_cluster import SlurmCluster
with SlurmCluster(nodes=["node-a", "node-b"]) as cluster:
    print(json.dumps({"tmp": cluster.tmp, "daemons": cluster.pids, "holders": [h.pid for h in cluster.holders],
                      "links": cluster.links, "reaper": cluster.reaper.pid}), flush=True)
    time.sleep(600)
"""
child = subprocess.Popen([sys.executable, "-c", CHILD], cwd=here, stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=here))
try:
    line = child.stdout.readline()
    assert line, f"the cluster did not start (exit {child.wait()})"
    owned = json.loads(line)
    assert len(owned["daemons"]) == 4 and len(owned["holders"]) == 2 and len(owned["links"]) == 1, owned
    assert all(process_alive(p) for p in owned["daemons"] + owned["holders"] + [owned["reaper"]]), owned
finally:
    child.send_signal(signal.SIGKILL)
    child.wait()


def leftovers():
    left = [f"process {p}" for p in owned["daemons"] + owned["holders"] if process_alive(p)]
    left += [f"link {link}" for link in owned["links"]
             if subprocess.run(["ip", "link", "show", link], capture_output=True).returncode == 0]
    return left + ([f"folder {owned['tmp']}"] if os.path.exists(owned["tmp"]) else [])


end = time.time() + 30
while leftovers() and time.time() < end:
    time.sleep(0.5)
left = leftovers()
if left:  # clean up by hand for the next test, then fail
    release({k: owned[k] for k in ("daemons", "holders", "links")}, owned["tmp"])
assert not left, f"left behind after the test was killed: {left}"
assert not process_alive(owned["reaper"]), "the reaper did not end"
print(f"ok: nothing left {time.time() - end + 30:.1f} s after the kill")
