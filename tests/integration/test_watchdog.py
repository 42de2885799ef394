"""The watchdog: a rank that stops (SIGSTOP: a hung GPU or a lost peer looks the same to the others)
leaves its peers waiting in the wave's collectives, or in those between two waves; the deadline
passes and the job aborts with exit status 5, naming the rank and the operation. A wave it held is
charged from the campaign's heartbeat when the same command resumes, and the resumed acquisition
completes. (Until the forty-fourth session a stop between waves hung the job without end.)"""
import json
import os
import signal
import subprocess
import tempfile
import time

from harness_test_lib import MPI_ENV, SOURCE_DIR, check_complete, mpirun_cmd, run

job = os.path.join(SOURCE_DIR, "tests/data/micro.yaml")
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "acq")
    args = ["acquire", "--unverified", job, "--out", out, "--out-root", os.path.join(tmp, "b"),
            "--rounds", "12", "--no-publish", "--watchdog-floor", "5", "--watchdog-factor", "4"]
    proc = subprocess.Popen(mpirun_cmd(2, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=MPI_ENV)
    # The ranks are found before the run gets going, so the stop lands right after round 1 is
    # committed, with ten rounds still to go, however fast the machine.
    ranks = []
    for _ in range(100):
        ranks = sorted(int(x) for x in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                                      text=True).stdout.split())
        if len(ranks) == 2:
            break
        time.sleep(0.1)
    assert len(ranks) == 2, ranks
    # The rank processes in MPI rank order: by the rank each one recorded in its environment.
    def mpi_rank(pid):
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        return next(int(e.split(b"=")[1]) for e in env if e.startswith(b"OMPI_COMM_WORLD_RANK="))
    stopped = next(pid for pid in ranks if mpi_rank(pid) == 1)
    for line in proc.stderr:
        if "committed round 1" in line:
            break
    os.kill(stopped, signal.SIGSTOP)
    t0 = time.time()
    try:
        rest = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    waited = time.time() - t0
    assert proc.returncode == 5, (proc.returncode, rest)
    assert "watchdog: rank 0:" in rest and "the wave of round" in rest, rest
    # (the stopped rank may also report its own overdue wave when the abort wakes it to end it)
    assert waited < 60, waited
    state = json.load(open(os.path.join(out, "campaign.json")))
    consumed = state["device_seconds_consumed"]
    # The stop lands inside a wave (rank 0 waits in the wave's collectives, the wave's reservation
    # is held) or between two (rank 0 waits in the next reservation or the checks after the last
    # wave, no reservation held): both are watched, at the floor when between waves.
    in_wave = "reservation" in state
    if in_wave:
        assert state["reservation"]["devices"] == 2 and "(measure and commit) is still running" in rest, (state, rest)
    else:
        assert "(its reservation) is still running" in rest or "(the checks after it) is still running" in rest, rest

    # The same command resumes, then everything completes. A stalled wave is charged (at least the
    # watchdog's 5 s floor on 2 devices, from the heartbeat); a stall between waves held no
    # reservation, and nothing is charged for it (store/campaign.h, InterruptedWave).
    p = run(mpirun_cmd(2, *args))
    state = json.load(open(os.path.join(out, "campaign.json")))
    if in_wave:
        [wave] = state["interrupted_waves"]
        assert wave["held_seconds"] >= 4 and wave["charged_device_seconds"] == 2 * wave["held_seconds"], wave
        assert wave["held_seconds"] < waited + 5, (wave, waited)
        assert state["device_seconds_consumed"] >= consumed + wave["charged_device_seconds"]
    else:
        assert "interrupted_waves" not in state, state["interrupted_waves"]
    assert "reservation" not in state and state["phase"] == "complete", state["phase"]
    check_complete(os.path.join(out, "acquisition.h5"), 12)
    print(f"ok: stopped {'inside a wave' if in_wave else 'between waves'}")
