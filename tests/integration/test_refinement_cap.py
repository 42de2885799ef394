"""A campaign whose refinement stopped at fidelity.max_added_points goes on with a larger cap
(docs/measurement.md#fidelity, Refinement), on the staircase_model test double with two ranks:

1. With a cap of 3 points refinement ends at it ("fidelity.max_added_points is spent"); plan says
   so, and with a job of a larger cap previews the next stage.
2. A smaller cap, or a larger one beside any other change, is refused naming the difference, and
   the file is left as it was.
3. The same command with a cap of 200 is killed right before its first flush (the one that
   follows the raise of the stored contract), or inside it (the file torn: the resume restores
   its snapshot), each from a copy of the campaign, then run again without the kill: it completes,
   no round completed before was measured again, the file's contract says 200 under a valid
   SHA-256 and records the raise once, inspect prints it, and the bundle goes into another
   --out-root with --out naming the acquisition; the bundle published with the old cap is
   untouched, and publishing over it is refused naming the cap."""
import hashlib
import json
import os
import shutil
import tempfile

import h5py
import numpy
import yaml

from harness_test_lib import (HARNESS, MPIEXEC, SOURCE_DIR, check_complete, check_wave_accounting,
                              complete_rounds, run)

SHIM = os.environ["HDF5_KILL_SHIM"]


def write_job(path, cap, tolerance=0.02):
    job = yaml.safe_load(open(os.path.join(SOURCE_DIR, "tests/data/staircase.yaml")))
    job["fidelity"].update(max_added_points=cap, tolerance=tolerance)
    yaml.safe_dump(job, open(path, "w"))
    return path


def acquire(acq, job, out_root, *mpiexec_options):
    return run([MPIEXEC, "-np", "2", "--oversubscribe", *mpiexec_options, HARNESS, "acquire", "--unverified", job,
                "--out", acq, "--out-root", out_root, "--accept-failures"], check=False)


def stored_contract(h5):
    """The file's contract (checked against its SHA-256) and its record of cap raises (None: none)."""
    with h5py.File(h5, "r") as f:
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in f.attrs.items()}
    text = attrs["contract"]
    assert hashlib.sha256(text.encode()).hexdigest() == attrs["contract_sha256"], \
        "the stored contract fails its SHA-256"
    raises = attrs.get("refinement_cap_raises")
    return json.loads(text), json.loads(raises) if raises is not None else None


def stages(h5):
    with h5py.File(h5, "r") as f:
        return {json.loads(c.attrs["cell"]).get("stage", 0) for c in f["cells"].values()}


with tempfile.TemporaryDirectory() as tmp:
    acq = os.path.join(tmp, "acq")
    h5 = os.path.join(acq, "acquisition.h5")
    old_root = os.path.join(tmp, "bundles")
    old_meta = os.path.join(old_root, "staircase", "meta.yaml")

    # 1. Refinement ends at the small cap.
    p = acquire(acq, write_job(os.path.join(tmp, "cap3.yaml"), 3), old_root)
    assert p.returncode == 0, p.stderr
    assert "fidelity.max_added_points is spent" in p.stderr, p.stderr
    kept = complete_rounds(h5)
    stages_before = stages(h5)
    contract, raises = stored_contract(h5)
    assert contract["fidelity"]["max_added_points"] == 3 and raises is None, (contract["fidelity"], raises)
    published = open(old_meta).read()
    # plan says where refinement stopped and how it goes on; with the larger cap, the next stage.
    cap3, cap200 = os.path.join(tmp, "cap3.yaml"), write_job(os.path.join(tmp, "cap200.yaml"), 200)
    at_cap = json.loads(run([HARNESS, "plan", cap3, "--campaign", acq, "--format", "json"]).stdout)
    (stopped,) = at_cap["campaign"]["left"]["refinement_at_cap"]
    assert stopped["table"].endswith("experts") and stopped["added_points"] >= 3 and stopped["misses"] > 0, stopped
    assert "stopped at fidelity.max_added_points" in run([HARNESS, "plan", cap3, "--campaign", acq]).stdout
    raised = json.loads(run([HARNESS, "plan", cap200, "--campaign", acq, "--format", "json"]).stdout)
    assert raised["campaign"]["left"]["refinement_at_cap"] == [], raised["campaign"]["left"]
    assert any(s["table"] == stopped["table"] and s["grid_points"] > 0
               for s in raised["campaign"]["left"]["next_stage"]), raised["campaign"]["left"]

    # 2. What a resume may not change: a smaller cap; a larger one beside another change.
    with open(h5, "rb") as f:
        before = hashlib.sha256(f.read()).hexdigest()
    for job, needle in ((write_job(os.path.join(tmp, "cap2.yaml"), 2), "fidelity.max_added_points: 3 -> 2"),
                        (write_job(os.path.join(tmp, "cap200tol.yaml"), 200, 0.03),
                         "fidelity.max_added_points: 3 -> 200, fidelity.tolerance: 0.02 -> 0.03")):
        p = acquire(acq, job, old_root)
        assert p.returncode != 0 and "holds a different contract (differs in: " + needle in p.stderr, p.stderr
        with open(h5, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == before, f"a refused resume ({needle}) changed the file"

    # 3. The raise, killed before or inside the flush that follows it, then resumed.
    for name, kill in (("before", "KILL_AT=1"), ("inside", "KILL_WRITES=2")):
        case_acq, new_root = os.path.join(tmp, f"acq-{name}"), os.path.join(tmp, f"bundles-{name}")
        shutil.copytree(acq, case_acq)
        case_h5 = os.path.join(case_acq, "acquisition.h5")
        killed = acquire(case_acq, cap200, new_root, "-x", f"LD_PRELOAD={SHIM}", "-x", "KILL_CALL=H5Fflush",
                         "-x", kill, "-x", "KILL_RANK=0")
        assert killed.returncode != 0, f"the kill {name} the raise's flush was never reached"
        try:  # what the kill left on disk: the raise, or the file before it (or a torn one)
            left = stored_contract(case_h5)[1]
        except (AssertionError, OSError, KeyError, ValueError):
            left = None
        p = acquire(case_acq, cap200, new_root)
        assert p.returncode == 0, p.stderr
        # The resume raises the cap unless the killed run's raise reached the disk whole.
        assert ("fidelity.max_added_points raised from 3 to 200" in p.stderr) == (left is None), (name, left, p.stderr)
        after = check_complete(case_h5, 2)
        for (cell, r), samples in kept.items():
            assert (after[cell][r] == samples).all(), f"{name}: {cell} round {r} measured again after the raise"
        assert stages(case_h5) > stages_before, (name, stages(case_h5), stages_before)
        check_wave_accounting(case_acq, f"the raised campaign ({name})")
        contract, raises = stored_contract(case_h5)
        assert contract["fidelity"]["max_added_points"] == 200, (name, contract["fidelity"])
        assert raises == [{"run": 1, "from": 3, "to": 200}], (name, raises)
        with h5py.File(case_h5, "r") as f:
            run_1 = json.loads(f["provenance"].attrs["run_1"])
        assert "max_added_points: 200" in run_1[0]["job_text"], f"{name}: run 1 is not the run that raised the cap"
        text = run([HARNESS, "inspect", case_h5]).stdout
        assert "fidelity.max_added_points raised from 3 to 200 by run 1" in text, text
        assert json.loads(run([HARNESS, "inspect", case_h5, "--format", "json"]).stdout)["refinement_cap_raises"] \
            == raises
        meta = yaml.safe_load(open(os.path.join(new_root, "staircase", "meta.yaml")))
        (entry,) = meta["per_tp"][1]["moe_components"]["entries"]
        assert entry["contract"]["fidelity"]["max_added_points"] == 200, (name, entry["contract"]["fidelity"])
        assert open(old_meta).read() == published, f"{name}: the bundle published with the old cap changed"
        p = run([HARNESS, "publish", case_h5, "--out-root", old_root, "--accept-failures"], check=False)
        assert p.returncode != 0 and "fidelity.max_added_points: 3 -> 200" in p.stderr, p.stderr
        # A torn record of the raises is named, not left to the JSON parser.
        if name == "inside":
            shutil.copy(case_h5, os.path.join(tmp, "torn.h5"))
            with h5py.File(os.path.join(tmp, "torn.h5"), "r+") as f:
                f.attrs["refinement_cap_raises"] = numpy.bytes_(b'[{"run": 1, ')
            p = run([HARNESS, "inspect", os.path.join(tmp, "torn.h5")], check=False)
            assert p.returncode != 0 and "the record of refinement cap raises is not JSON" in p.stderr, p.stderr
        print(f"ok: cap 3 -> 200 after a kill {name} the raise's flush: stages {max(stages_before)} -> "
              f"{max(stages(case_h5))}, {len(kept)} earlier rounds kept")
