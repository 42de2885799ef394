"""Randomized kill test: SIGKILL one rank or the whole job at instants spread over an acquisition
(rounds, refinement, collectives, publish), re-run the same command, and require every trial to end
with a clean resume: the run completes and publishes, every planned round is in the file once, and
no round completed before the kill was measured again, and the device time is charged: what the
campaign had consumed is kept, and a wave the kill interrupted is charged from its heartbeat, and
every complete round is accounted once (check_wave_accounting).
Prints trials / clean resumes / lost / duplicated / uncharged / miscounted."""
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import json

from harness_test_lib import (MPI_ENV, SOURCE_DIR, check_complete, check_wave_accounting, committed_rounds, mpirun_cmd,
                              run)

JOB = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")
TRIALS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
ROUNDS = "6"


def complete_rounds_or_none(h5):
    try:
        return committed_rounds(h5)
    except OSError:  # killed before the file was first closed cleanly, and no snapshot yet
        return {}


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


with tempfile.TemporaryDirectory() as tmp:
    def command(d):
        return mpirun_cmd(2, "acquire", "--unverified", JOB, "--rounds", ROUNDS, "--out", os.path.join(d, "acq"),
                          "--out-root", os.path.join(d, "bundles"), "--quiet")

    t0 = time.monotonic()
    run(command(os.path.join(tmp, "reference")))
    duration = time.monotonic() - t0
    rng = random.Random(20261201)
    clean = lost = duplicated = uncharged = miscounted = 0
    for trial in range(TRIALS):
        d = os.path.join(tmp, f"trial{trial}")
        h5 = os.path.join(d, "acq", "acquisition.h5")
        instant = duration * (0.1 + 0.9 * (trial + rng.random()) / TRIALS)
        whole_job = trial % 2 == 1
        proc = subprocess.Popen(command(d), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=MPI_ENV)
        time.sleep(instant)
        if proc.poll() is None:
            ranks = children(proc.pid)
            if whole_job or not ranks:
                proc.kill()
                for r in ranks:
                    try:
                        os.kill(r, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            else:
                os.kill(rng.choice(ranks), signal.SIGKILL)
        proc.wait(timeout=120)
        before = complete_rounds_or_none(h5)
        state_path = os.path.join(d, "acq", "campaign.json")
        state = json.load(open(state_path)) if os.path.exists(state_path) else {}
        p = run(command(d), check=False)
        if p.returncode != 0:
            print(f"trial {trial} (kill at {instant:.2f} s, {'job' if whole_job else 'rank'}): "
                  f"resume failed:\n{p.stdout}\n{p.stderr}")
            continue
        after = check_complete(h5, int(ROUNDS))
        complete_after = {(n, r) for n in after for r in after[n]}
        if any(key not in complete_after for key in before):
            lost += 1
            continue
        if any(not (after[name][r] == samples).all() for (name, r), samples in before.items()):
            duplicated += 1
            continue
        resumed = json.load(open(state_path))
        waves = resumed.get("interrupted_waves", [])
        if (resumed["device_seconds_consumed"] < state.get("device_seconds_consumed", 0)
                + sum(w["charged_device_seconds"] for w in waves)
                or ("reservation" in state) != bool(waves) or "reservation" in resumed):
            print(f"trial {trial}: device time not charged: before {state}\nafter {resumed}")
            uncharged += 1
            continue
        try:
            check_wave_accounting(os.path.join(d, "acq"), f"trial {trial}")
        except AssertionError as e:
            print(e)
            miscounted += 1
            continue
        if not os.path.exists(os.path.join(d, "bundles", "micro", "meta.yaml")):
            print(f"trial {trial}: nothing published after the resume")
            continue
        clean += 1
    print(f"kill trials: {TRIALS}, clean resumes: {clean}, lost: {lost}, duplicated: {duplicated}, "
          f"uncharged: {uncharged}, miscounted: {miscounted} "
          f"(run of {duration:.1f} s, kills spread over it)")
    assert clean == TRIALS, "every kill must end in a clean resume"
