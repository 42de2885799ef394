"""Campaign controller: the GPU-hour budget stops a campaign before a wave that would exceed it
(nothing measured is lost), SIGKILL of the whole job resumes from campaign.json and the HDF5 file,
an edited job refuses to resume, naming what changed, the measured cost per point-round is
recorded and used by `plan`, and a run on a device new to the campaign measures anchor rows (a run
that stopped before them leaves them to the resume)."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile

import h5py
import numpy
import yaml

from harness_test_lib import (HARNESS, MPI_ENV, SOURCE_DIR, check_complete, check_inspect_cells, check_wave_accounting,
                              file_sha, mpirun_cmd, run)

job = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")
with tempfile.TemporaryDirectory() as tmp:
    out, root = os.path.join(tmp, "acq"), os.path.join(tmp, "bundles")
    base = ["acquire", "--unverified", job, "--out", out, "--out-root", root, "--rounds", "20"]

    # 1. A budget too small for the first wave: stop before it, with a clear message.
    p = run(mpirun_cmd(2, *base, "--gpu-hours", "0.000001"), check=False)
    assert p.returncode != 0 and "budget: wave round 0" in p.stderr and "stopping before it" in p.stderr, p.stderr
    state = json.load(open(os.path.join(out, "campaign.json")))
    assert state["phase"] == "stopped: budget" and state["cell_rounds_done"] == 0
    assert state["runs"][-1]["outcome"] == "budget_stop" and "budget" in state["runs"][-1]["reason"], state["runs"]

    # The budget is fixed by the campaign's start: raising it takes --raise-budget, recorded.
    p = run(mpirun_cmd(2, *base), check=False)
    assert p.returncode != 0 and "pass --raise-budget" in p.stderr, p.stderr
    assert json.load(open(os.path.join(out, "campaign.json")))["budget_seconds"] < 1

    # 1b. A wall-time limit too short for the first wave: the run stops before it, cleanly (exit 4,
    # said, recorded), and the same command with room resumes it to the end.
    timed = os.path.join(tmp, "timed")
    timed_base = ["acquire", "--unverified", job, "--out", timed, "--out-root", os.path.join(tmp, "timed-bundles")]
    p = run(mpirun_cmd(2, *timed_base, "--time-limit", "0.000001"), check=False)
    assert p.returncode == 4 and "time limit: the next wave of round 0 would end" in p.stderr, (p.returncode, p.stderr)
    assert re.search(r"would end about \d+ s into this run \(\d+ s predicted x 1\.25, no wave of this run measured yet\)",
                     p.stderr), p.stderr
    state = json.load(open(os.path.join(timed, "campaign.json")))
    assert state["phase"] == "stopped: time limit" and state["cell_rounds_done"] == 0, state
    assert state["runs"][-1]["outcome"] == "time_limit" and "--time-limit" in state["runs"][-1]["reason"], state["runs"]
    # Its calibration is kept: one measured/nominal ratio per target and component, which the
    # resume predicts from instead of calibrating again.
    m = re.search(r"calibrated the cost model on (\d+) points", p.stderr)
    ratios = state["cost_ratios"]
    assert m and int(m.group(1)) > 0 and ratios and all(r > 0 for r in ratios.values()), (p.stderr, state)
    assert all(re.fullmatch(r"tp\d+/dp\d+_ep\d+_rank\d+_sp\d [a-z_]+", k)
               for k in ratios), ratios
    # Publishing a campaign that has not finished is refused, naming each incomplete table, and
    # writes nothing.
    timed_bundles = os.path.join(tmp, "timed-bundles")
    p = run([HARNESS, "publish", os.path.join(timed, "acquisition.h5"), "--out-root", timed_bundles],
            check=False)
    assert p.returncode != 0 and "nothing published from" in p.stderr, p.stderr
    assert ("tp1/dp1_ep1_rank0_sp0: experts is incomplete (a round of the grid, its held-out set or a "
            "refinement stage is missing); run acquire again to resume") in p.stderr, p.stderr
    assert not os.path.exists(timed_bundles), os.listdir(timed_bundles)
    p = run(mpirun_cmd(2, *timed_base, "--time-limit", "3600"))
    assert "published" in p.stdout, p.stdout
    assert (f"predicting {len(ratios)} components' cells from the cost ratios earlier runs of this campaign"
            in p.stderr and "calibrated the cost model" not in p.stderr), p.stderr
    check_complete(os.path.join(timed, "acquisition.h5"), 2)
    state = json.load(open(os.path.join(timed, "campaign.json")))
    assert state["phase"] == "complete" and [r.get("outcome") for r in state["runs"]] == ["time_limit", "complete"]

    # 2. Enough budget; SIGKILL the whole job (every process) after some rounds.
    proc = subprocess.Popen(mpirun_cmd(2, *base, "--raise-budget"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=MPI_ENV, start_new_session=True)
    for line in proc.stderr:
        if "committed round 1" in line:
            break
    # Every process of the job at once: mpiexec and all its descendants.
    victims, frontier = [proc.pid], [proc.pid]
    while frontier:
        kids = subprocess.run(["pgrep", "-P", str(frontier.pop())], capture_output=True, text=True).stdout.split()
        victims += [int(k) for k in kids]
        frontier += [int(k) for k in kids]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    state = json.load(open(os.path.join(out, "campaign.json")))
    assert state["cell_rounds_done"] >= 22 and state["device_seconds_consumed"] > 0, state
    assert len(state["budget_changes"]) == 1 and "--raise-budget" in state["budget_changes"][0]["command"]
    consumed = state["device_seconds_consumed"]
    with h5py.File(os.path.join(out, "acquisition.h5"), "r") as f:
        done = sum(int(c["rounds_done"][()].sum()) for c in f["cells"].values())
    assert 22 <= done < 11 * 20, done
    check_inspect_cells(os.path.join(out, "acquisition.h5"))
    # plan says what the interrupted campaign has left: the cell rounds the file has not committed,
    # predicted from the campaign's measured cost ratios (no capped settle on the host backend).
    with h5py.File(os.path.join(out, "acquisition.h5"), "r") as f:
        rounds_left = {name: len(c["rounds_done"]) - int(c["rounds_done"][()].sum()) for name, c in f["cells"].items()}
        points_left = sum(len(f["cells"][name]["points"]) * n for name, n in rounds_left.items())
    cells_left = sum(1 for n in rounds_left.values() if n > 0)
    p = run([HARNESS, "plan", job, "--rounds", "20", "--campaign", out])
    line = next((l for l in p.stdout.splitlines() if l.startswith("  left: ")), "")
    assert line.startswith(f"  left: {points_left} point-rounds in {cells_left} cells, about ") and "up to" not in line, p.stdout
    left = json.loads(run([HARNESS, "plan", job, "--rounds", "20", "--campaign", out, "--format", "json"]).stdout)["campaign"]["left"]
    assert left["point_rounds"] == points_left > 0 and left["cells"] == cells_left, left
    assert left["estimated_held_s"] > 0 and left["capped_settle_upper_s"] == 0 and left["kinds_without_ratio"] == [], left
    # An acquisition file plan cannot read: the rest of the plan stands, what is left is said to be
    # unknown (and null in JSON), not guessed.
    unreadable = os.path.join(tmp, "unreadable")
    os.makedirs(unreadable)
    shutil.copy(os.path.join(out, "campaign.json"), unreadable)
    open(os.path.join(unreadable, "acquisition.h5"), "w").write("not HDF5")
    p = run([HARNESS, "plan", job, "--rounds", "20", "--campaign", unreadable])
    assert "; what the campaign has left is not estimated" in p.stderr and "  left: " not in p.stdout, (p.stdout, p.stderr)
    assert "campaign: " in p.stdout, p.stdout
    left = json.loads(run([HARNESS, "plan", job, "--rounds", "20", "--campaign", unreadable, "--format", "json"]).stdout)
    assert left["campaign"]["left"] is None, left["campaign"]

    # 3. The same command resumes and completes; device time accumulates across runs.
    p = run(mpirun_cmd(1, "acquire", job, "--out", os.path.join(tmp, "nothing"), "--resume"), check=False)
    assert p.returncode != 0 and "no campaign to resume" in p.stderr, p.stderr
    # The earlier runs measured on another node (their provenance says so): the resume names the
    # devices it adds and the earlier ones.
    with h5py.File(os.path.join(out, "acquisition.h5"), "r+") as f:
        prov = f["provenance"]
        runs = [k for k in prov.attrs if not k.endswith("_end")]
        for k in runs:
            ranks = json.loads(prov.attrs[k].decode())
            for r in ranks:
                r["host"] = "elsewhere"
            prov.attrs[k] = numpy.bytes_(json.dumps(ranks))  # fixed-length, as harness writes
    p = run(mpirun_cmd(2, *base, "--resume"))
    assert f"resumed {done}" in p.stdout, p.stdout
    assert (f"this run measures on host CPU (host {os.uname().nodename}), which no earlier run of this "
            "campaign used (they measured on host CPU (host elsewhere))") in p.stderr, p.stderr
    # A device new to the campaign measures a spread of each table's published rows again (anchors):
    # up to 16 per table, in cells of their own, all measured; one set per new device.
    assert "acquire: this device is new to the campaign: " in p.stderr, p.stderr
    with h5py.File(os.path.join(out, "acquisition.h5"), "r") as f:
        anchor_cells = {name: c for name, c in f["cells"].items() if ".anchors1" in name}
        assert anchor_cells and all(c["rounds_done"][()].all() for c in anchor_cells.values()), list(anchor_cells)
        assert all(len(c["points"]) <= 16 for c in anchor_cells.values()), list(anchor_cells)
        assert not any(".anchors2" in name for name in f["cells"]), list(f["cells"])
    check_complete(os.path.join(out, "acquisition.h5"), 20)
    check_wave_accounting(out, "the resume after SIGKILL")
    # Every round names the run (and rank) that committed it, so the device that measured it: the
    # killed run's rounds the device "elsewhere", the resume's this one.
    with h5py.File(os.path.join(out, "acquisition.h5"), "r") as f:
        hosts = {int(k[4:]): {r["rank"]: r["host"] for r in json.loads(f["provenance"].attrs[k].decode())}
                 for k in f["provenance"].attrs if not k.endswith("_end")}
        committed = [(int(g.attrs["run"]), int(g.attrs["rank"])) for c in f["cells"].values()
                     for name, g in c.items() if name.startswith("round_")]
    assert {run for run, _ in committed} == {len(hosts) - 2, len(hosts) - 1}, (sorted(set(committed)), hosts)
    assert {hosts[run][rank] for run, rank in committed} == {"elsewhere", os.uname().nodename}, hosts
    # inspect numbers the devices, counts each table's rows per device, and splits the held-out
    # errors by whether a point's interpolation drew on another device's rows.
    report = json.loads(run([HARNESS, "inspect", os.path.join(out, "acquisition.h5"), "--format", "json"]).stdout)
    assert [d["host"] for d in report["devices"]] == ["elsewhere", os.uname().nodename], report["devices"]
    anchored = [t for t in report["fidelity"] if "device_anchors" in t]
    assert anchored, report["fidelity"]
    for table in anchored:  # rows of the first device (elsewhere) measured again on this one, and
        # the rounds of those rows this device completed after the kill against its own anchors
        pairs = {(p["row_device"], p["anchor_device"]): p["count"] for p in table["device_anchors"]["device_pairs"]}
        assert 0 < pairs.get((0, 1), 0) <= 16 and set(pairs) <= {(0, 1), (1, 1)}, pairs
        assert sum(pairs.values()) == table["device_anchors"]["count"], table["device_anchors"]
    for table in report["fidelity"]:
        assert [d["device"] for d in table["rows_per_device"]] == [0, 1], table["rows_per_device"]
        held, split = table["held_out"], table["held_out"]["by_device"]
        assert split["same_device"]["count"] + split["across_devices"]["count"] == held["count"] > 0, held
        assert split["across_devices"]["count"] > 0, split
    text = run([HARNESS, "inspect", os.path.join(out, "acquisition.h5")]).stdout
    assert "    #1 host CPU (host " + os.uname().nodename + ")" in text and "rows by measuring device: #0 " in text, text
    assert "interpolated from another device's rows too: " in text, text
    assert "      anchors: rows of #0 measured again on #1: " in text, text
    # A copy whose first run names another kind of device: inspect raises the red flag (exit 4)
    # and publish refuses it before writing anything.
    mixed = os.path.join(tmp, "mixed", "acquisition.h5")
    os.makedirs(os.path.dirname(mixed))
    shutil.copy(os.path.join(out, "acquisition.h5"), mixed)
    with h5py.File(mixed, "r+") as f:
        prov = f["provenance"]
        first = min((k for k in prov.attrs if not k.endswith("_end")), key=lambda k: int(k[4:]))
        ranks = json.loads(prov.attrs[first].decode())
        for r in ranks:
            r["device"]["device"] = "another CPU"
        prov.attrs[first] = numpy.bytes_(json.dumps(ranks))
    flagged = run([HARNESS, "inspect", mixed], check=False)
    assert flagged.returncode == 4, (flagged.returncode, flagged.stdout, flagged.stderr)
    assert "RED FLAG: the acquisition was measured on several device kinds (another CPU, host CPU)" in flagged.stdout, flagged.stdout
    mixed_root = os.path.join(tmp, "mixed", "bundles")
    refused = run([HARNESS, "publish", mixed, "--out-root", mixed_root], check=False)
    assert refused.returncode != 0 and "several device kinds" in refused.stderr, refused.stderr
    assert not os.path.exists(mixed_root) or not any(
        f == "meta.yaml" for _, _, files in os.walk(mixed_root) for f in files), "published a mixed acquisition"
    # A copy whose device records an SM count that is not a count (what the declared launch waves
    # are counted on): inspect and publish name it, nothing is published.
    bad_sms = os.path.join(tmp, "bad_sms", "acquisition.h5")
    os.makedirs(os.path.dirname(bad_sms))
    shutil.copy(os.path.join(out, "acquisition.h5"), bad_sms)
    with h5py.File(bad_sms, "r+") as f:
        prov = f["provenance"]
        for key in list(prov.attrs):
            ranks = json.loads(prov.attrs[key].decode())
            for r in ranks:
                r.get("device", {})["sm_count"] = "12x"
            prov.attrs[key] = numpy.bytes_(json.dumps(ranks))
    why = "the acquisition's device records an SM count that is not a count: 12x"
    bad_inspect = run([HARNESS, "inspect", bad_sms], check=False)
    assert bad_inspect.returncode != 0 and why in bad_inspect.stderr, (bad_inspect.returncode, bad_inspect.stderr)
    bad_root = os.path.join(tmp, "bad_sms", "bundles")
    bad_publish = run([HARNESS, "publish", bad_sms, "--out-root", bad_root], check=False)
    assert bad_publish.returncode != 0 and why in bad_publish.stderr, (bad_publish.returncode, bad_publish.stderr)
    assert not os.path.exists(bad_root) or not any(
        f == "meta.yaml" for _, _, files in os.walk(bad_root) for f in files), "published with a bad SM count"
    state = json.load(open(os.path.join(out, "campaign.json")))
    assert state["phase"] == "complete" and len(state["runs"]) == 3
    assert state["device_seconds_consumed"] > consumed
    # The killed run's reserved wave (if the kill caught one) was charged from its heartbeat.
    for wave in state.get("interrupted_waves", []):
        assert wave["devices"] == 2 and wave["charged_device_seconds"] == 2 * wave["held_seconds"], wave
        # ... and the resumed run said so.
        assert f"the previous run stopped inside the wave of {wave['wave']} after" in p.stderr, p.stderr
    if not state.get("interrupted_waves"):
        assert "the previous run stopped inside" not in p.stderr, p.stderr
    assert "reservation" not in state
    assert all(len(r["harness_sha256"]) == 64 for r in state["runs"])
    # Each run's outcome: the budget stop, the killed run (none: it could not say), the resume.
    assert [r.get("outcome") for r in state["runs"]] == ["budget_stop", None, "complete"], state["runs"]

    # Where the time went, and measured costs: the summary names every phase with its share, and
    # campaign.json records seconds per point-round that `plan` predicts from (and says so).
    for phase in ("setup", "verification", "timing", "calibration", "refinement", "collectives", "publish"):
        assert f"    {phase} " in p.stdout, p.stdout
    assert "timed forwards:" in p.stdout, p.stdout
    # The calibration measures a sample of at most 8 points of one cell per target and component
    # on each rank, not of every cell, and says so: on one rank with the experts grid split into
    # parts, 8 points of its first part at most.
    fine = os.path.join(tmp, "fine")
    q = run(mpirun_cmd(1, "acquire", "--unverified", job, "--dp", "1", "--grid-factor", "1.1", "--rounds", "1",
                       "--out", fine, "--out-root", os.path.join(tmp, "fine-bundles")))
    with h5py.File(os.path.join(fine, "acquisition.h5"), "r") as f:
        cells = list(f["cells"])
    kinds = {".".join(name.split(".")[:2]) for name in cells}
    assert any(".part" in name for name in cells) and len(cells) > len(kinds), cells
    m = re.search(r"calibrated the cost model on (\d+) points", q.stderr)
    assert m and 0 < int(m.group(1)) <= 8 * len(kinds), (q.stderr, kinds)
    assert f"calibration: {m.group(1)} points, not stored" in q.stdout, q.stdout
    cost = state["cost"]
    assert cost["expert_point_rounds"] > 0 and cost["local_point_rounds"] > 0, cost
    assert cost["expert_seconds"] > 0 and cost["local_seconds"] > 0, cost
    p = run([HARNESS, "plan", job, "--rounds", "20", "--campaign", out])
    assert "cost model: measured" in p.stdout and out in p.stdout, p.stdout
    assert "  left: 0 point-rounds in 0 cells, about 0 s of device time held" in p.stdout, p.stdout
    # ... and where the campaign stands: what its waves measured against what the plan measures.
    m = re.search(r"campaign: (\d+) of (\d+) planned experts and (\d+) of (\d+) other point-rounds measured "
                  r"\(refinement's included\), .* of device time consumed; phase: complete", p.stdout)
    assert m, p.stdout
    planned = json.loads(run([HARNESS, "plan", job, "--rounds", "20", "--campaign", out, "--format", "json"]).stdout)
    assert planned["campaign"]["expert_point_rounds"] == cost["expert_point_rounds"] == int(m.group(1))
    assert planned["campaign"]["local_point_rounds"] == cost["local_point_rounds"] == int(m.group(3))
    assert planned["campaign"]["device_seconds_consumed"] == state["device_seconds_consumed"]
    assert int(m.group(2)) + int(m.group(4)) == planned["total"]["points"] * 20, (m.groups(), planned["total"])
    assert int(m.group(2)) > 0 and int(m.group(4)) > 0, m.groups()
    assert int(m.group(1)) >= int(m.group(2)) and int(m.group(3)) >= int(m.group(4)), m.groups()  # complete
    p = run([HARNESS, "plan", job, "--rounds", "20", "--campaign", os.path.join(tmp, "none")])
    assert "cost model: nominal" in p.stdout and "campaign:" not in p.stdout, p.stdout
    # What refinement may add on top of the estimate: the cap and the fresh held-out draws.
    fidelity = yaml.safe_load(open(job)).get("fidelity", {})
    assert (f"refinement may add {fidelity.get('max_added_points', 2000)} grid points per cell" in p.stdout
            and f"up to {fidelity.get('random_points', 12)} fresh held-out points per stage" in p.stdout), p.stdout
    broken = os.path.join(tmp, "broken")
    os.makedirs(broken)
    open(os.path.join(broken, "campaign.json"), "w").write("{not json")
    p = run([HARNESS, "plan", job, "--campaign", broken])
    assert "is corrupt" in p.stderr and "cost model: nominal" in p.stdout, (p.stdout, p.stderr)

    # Record counters balance with the file; a campaign.json edited outside the harness (its
    # digest no longer matches) or missing is refused by publish and resume, and nothing changes.
    rec = state["records"]
    with h5py.File(os.path.join(out, "acquisition.h5"), "r") as f:
        samples = sum(len(c[f"round_{r}"]["samples"]) for c in f["cells"].values() for r in range(20))
    assert rec["written"]["samples"] == samples and rec["dropped"] == 0, rec
    assert rec["encoded"] == rec["written"], rec
    tampered = dict(state)
    tampered["records"] = json.loads(json.dumps(rec))
    tampered["records"]["written"]["samples"] -= 1
    tampered["records"]["encoded"]["samples"] -= 1
    original = open(os.path.join(out, "campaign.json")).read()
    json.dump(tampered, open(os.path.join(out, "campaign.json"), "w"))
    p = run([HARNESS, "publish", os.path.join(out, "acquisition.h5"), "--out-root", os.path.join(tmp, "other")],
            check=False)
    assert p.returncode != 0 and "edited outside the harness" in p.stderr, p.stderr
    p = run(mpirun_cmd(2, *base), check=False)
    assert p.returncode != 0 and "edited outside the harness" in p.stderr, p.stderr
    os.remove(os.path.join(out, "campaign.json"))
    sha = file_sha(os.path.join(out, "acquisition.h5"))
    p = run(mpirun_cmd(2, *base), check=False)
    assert p.returncode != 0 and "campaign.json is missing although" in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(out, "campaign.json"))
    assert file_sha(os.path.join(out, "acquisition.h5")) == sha
    open(os.path.join(out, "campaign.json"), "w").write(original)

    # 4. An edited job (geometry) refuses to resume, naming the change; nothing is modified.
    edited = os.path.join(tmp, "edited.yaml")
    shutil.copy(job, edited)
    with open(edited, "a") as f:
        f.write("")
    text = open(job).read().replace("preset: tiny", "preset: tiny\n  top_k: 3")
    open(edited, "w").write(text)
    sha = file_sha(os.path.join(out, "acquisition.h5"))
    p = run(mpirun_cmd(2, "acquire", "--unverified", edited, "--out", out, "--out-root", root, "--rounds", "20"), check=False)
    assert p.returncode != 0 and "different contract (differs in: geometry.top_k: 2 -> 3" in p.stderr, p.stderr
    assert file_sha(os.path.join(out, "acquisition.h5")) == sha

    # 5. Anchors that a run declared but did not measure (it stopped at its time limit before
    # them) are measured by the run that resumes on the same device, which adds no second set.
    done = os.path.join(tmp, "anchored")
    anchored = ["acquire", "--unverified", job, "--out", done, "--out-root", os.path.join(tmp, "anchored-bundles"),
                "--rounds", "1"]
    run(mpirun_cmd(2, *anchored))
    with h5py.File(os.path.join(done, "acquisition.h5"), "r+") as f:
        prov = f["provenance"]
        for k in [k for k in prov.attrs if not k.endswith("_end")]:
            ranks = json.loads(prov.attrs[k].decode())
            for r in ranks:
                r["host"] = "elsewhere"
            prov.attrs[k] = numpy.bytes_(json.dumps(ranks))
    p = run(mpirun_cmd(2, *anchored, "--time-limit", "0.000001"), check=False)
    assert p.returncode == 4 and "acquire: this device is new to the campaign: " in p.stderr, (p.returncode, p.stderr)
    with h5py.File(os.path.join(done, "acquisition.h5"), "r") as f:
        declared = {name: bool(c["rounds_done"][()].all()) for name, c in f["cells"].items() if ".anchors" in name}
    assert declared and not any(declared.values()) and all(".anchors1" in n for n in declared), declared
    p = run(mpirun_cmd(2, *anchored))
    assert "this device is new to the campaign" not in p.stderr, p.stderr
    assert re.search(r"acquire: anchors of \S+ \S+: rows of #0 measured again on #1: \d+ rows, "
                     r"anchor - row median [-+][\d.]+% \(harness inspect numbers the devices\)", p.stderr), p.stderr
    with h5py.File(os.path.join(done, "acquisition.h5"), "r") as f:
        measured = {name: bool(c["rounds_done"][()].all()) for name, c in f["cells"].items() if ".anchors" in name}
    assert measured == {name: True for name in declared}, measured
    text = run([HARNESS, "inspect", os.path.join(done, "acquisition.h5")]).stdout
    assert "      anchors: rows of #0 measured again on #1: " in text, text
    # The tables were published before the anchors: their entries gain them (and the devices that
    # measured them), the tables stay as they were, and publishing again changes nothing.
    added = re.search(r"already published \(unchanged\), (\d+) already published with device anchors added",
                      p.stdout)
    bundles = os.path.join(tmp, "anchored-bundles", "micro")
    meta = yaml.safe_load(open(os.path.join(bundles, "meta.yaml")))
    entries = [e for tp in meta["per_tp"].values() for e in tp["moe_components"]["entries"]]
    assert added and int(added.group(1)) == len(entries), p.stdout  # every component table; not collectives
    for e in entries:
        anchors = {c: b["device_anchors"] for c, b in e["coverage"]["fidelity"]["components"].items()
                   if "device_anchors" in b}
        assert anchors and all(p["anchor_device"] == 1 for a in anchors.values() for p in a["device_pairs"]), e
        assert len(e["provenance"]["hardware"]["devices"]) == 2 and "anchors_added_utc" in e["provenance"], e
    tables = {os.path.join(d, f): file_sha(os.path.join(d, f)) for d, _, files in os.walk(bundles) for f in files
              if f.endswith(".csv")}
    p = run([HARNESS, "publish", os.path.join(done, "acquisition.h5"), "--out-root",
             os.path.join(tmp, "anchored-bundles"), "--accept-failures"])
    assert re.search(r"0 component tables and 0 collective tables published, \d+ already published \(unchanged\)\n",
                     p.stdout), p.stdout
    assert tables == {os.path.join(d, f): file_sha(os.path.join(d, f)) for d, _, files in os.walk(bundles) for f in files
                      if f.endswith(".csv")}
    # Entries whose anchors differ from the file's (here: every pair's count edited) get the file's,
    # and publish says they were replaced, not added.
    meta_path = os.path.join(bundles, "meta.yaml")
    text, edits = re.subn(r"(- anchor_device: 1\n\s+count: )(\d+)", lambda m: m.group(1) + str(int(m.group(2)) + 100),
                          open(meta_path).read())
    assert edits >= len(entries), edits
    open(meta_path, "w").write(text)
    p = run([HARNESS, "publish", os.path.join(done, "acquisition.h5"), "--out-root",
             os.path.join(tmp, "anchored-bundles"), "--accept-failures"])
    replaced = re.search(r"already published \(unchanged\), (\d+) already published with their device anchors replaced\n",
                         p.stdout)
    assert replaced and int(replaced.group(1)) == len(entries), p.stdout
    assert "with device anchors added" not in p.stdout and p.stdout.count(" (device anchors replaced)") == len(entries), p.stdout
    meta = yaml.safe_load(open(meta_path))
    for e in [e for tp in meta["per_tp"].values() for e in tp["moe_components"]["entries"]]:
        counts = [p["count"] for b in e["coverage"]["fidelity"]["components"].values() if "device_anchors" in b
                  for p in b["device_anchors"]["device_pairs"]]
        assert counts and all(c < 100 for c in counts), e
    assert tables == {os.path.join(d, f): file_sha(os.path.join(d, f)) for d, _, files in os.walk(bundles) for f in files
                      if f.endswith(".csv")}
print("ok")
