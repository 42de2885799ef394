"""Helpers for the integration tests: run the real harness under real mpiexec, read HDF5 with h5py
(independently of the harness' own reader)."""
import csv
import hashlib
import json
import os
import re
import stat
import subprocess
import sys

import h5py

HARNESS = os.environ["HARNESS_BIN"]
SOURCE_DIR = os.environ["HARNESS_SOURCE_DIR"]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1")


def mpirun_cmd(np, *args):
    return [MPIEXEC, "-np", str(np), "--oversubscribe", HARNESS, *args]


def run(cmd, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, env=MPI_ENV, **kw)
    if check and p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(cmd)}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def lookup_many(variant, tp, dp, queries):
    """`harness lookup --queries` answers for [(component, N) or ("experts", N, A, M), ...], in
    order, as floats; a refused query fails the test."""
    lines = "".join(" ".join(str(x) for x in q) + "\n" for q in queries)
    p = run([HARNESS, "lookup", variant, "--tp", str(tp), "--dp", str(dp), "--queries", "-"], input=lines)
    answers = [float(x) for x in p.stdout.split()]
    assert len(answers) == len(queries), (len(answers), len(queries), p.stdout)
    return answers


def file_sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def check_complete(path, expect_rounds):
    """Every planned point x round has samples, medians and checks; returns {cell: {round: samples}}."""
    out = {}
    with h5py.File(path, "r") as f:
        assert f.attrs["schema_version"] == 2
        json.loads(f.attrs["contract"].decode() if isinstance(f.attrs["contract"], bytes) else f.attrs["contract"])
        cells = f["cells"]
        assert len(cells) > 0, "no cells"
        for name, cell in cells.items():
            points = cell["points"][()]
            done = cell["rounds_done"][()]
            assert len(done) == expect_rounds, (name, done)
            assert all(done == 1), f"{name}: rounds_done {done}"
            desc = json.loads(cell.attrs["cell"])
            out[name] = {}
            for r in range(expect_rounds):
                g = cell[f"round_{r}"]
                med = g["medians"][()]
                assert sorted(med["point"].tolist()) == list(range(len(points))), f"{name} round {r}: medians"
                smp = g["samples"][()]
                assert set(smp["point"].tolist()) == set(range(len(points))), f"{name} round {r}: samples"
                assert (smp["round"] == r).all()
                assert (smp["value_us"] > 0).all()
                chk = g["checks"][()]
                assert (chk["pass"] == 1).all()
                if desc["component"] == "experts":
                    assert set(smp["arm"].tolist()) == {1, 2}, f"{name}: both bank arms"
                out[name][r] = smp
    return out


# The staircase_model backend's times, restated here independently of kernels/staircase_backend.h:
# experts pay 3 us per started tile of STAIRCASE_TILE rows of each active expert (rows spread over
# the A experts as evenly as the stimulus spreads them) and 8 us per wave of STAIRCASE_WAVE_TILES
# tiles, the other components are lines in N.
STAIRCASE_TILE = 4
STAIRCASE_WAVE_TILES = 6


def staircase_time_us(component, n, a=0, m=0):
    if component == "gate_routing":  # 1% more above 44 rows, where the modeled kernel changes
        return (3.0 + 0.02 * n) * (1.01 if n > 44 else 1.0)
    if component == "finalize_copy":
        return 1.0 + 0.01 * n
    if component == "wrapper":
        return 5.0 + 0.05 * n
    if a == 0:
        return 2.0
    return 4 + 0.5 * a + 3 * staircase_started_tiles(a, m) + 8 * staircase_waves(a, m) + 0.01 * m


def staircase_started_tiles(a, m):
    """Tiles of STAIRCASE_TILE rows that A experts sharing M rows as evenly as possible start."""
    per, extra = divmod(m, a)
    tiles = lambda rows: -(-rows // STAIRCASE_TILE)
    return (a - extra) * tiles(per) + extra * tiles(per + 1)


def staircase_waves(a, m):
    """The model's waves of STAIRCASE_WAVE_TILES tiles (what it declares to refinement)."""
    return -(-staircase_started_tiles(a, m) // STAIRCASE_WAVE_TILES)


def staircase_sm_clock_mhz(n):
    """The staircase model's device clock at N tokens (kernels/staircase_backend.h)."""
    return max(1000.0, 1980.0 - 5.0 * n)


def complete_rounds(h5):
    """{(cell, round): samples} of every complete round in the file ({} when there is no file)."""
    if not os.path.exists(h5):
        return {}
    with h5py.File(h5, "r") as f:
        return {(name, r): cell[f"round_{r}"]["samples"][()]
                for name, cell in f["cells"].items()
                for r, done in enumerate(cell["rounds_done"][()]) if done}


def reads_whole(h5):
    """Whether h5py reads every group, attribute and dataset of the file (partial rounds too)."""
    def read(name, obj):
        dict(obj.attrs)
        if isinstance(obj, h5py.Dataset):
            obj[()]
    try:
        with h5py.File(h5, "r") as f:
            dict(f.attrs)
            f.visititems(read)
        return True
    except (OSError, KeyError, ValueError, RuntimeError):
        return False


def committed_rounds(h5):
    """The complete rounds a resume keeps: the file's when it reads whole (or there is none yet),
    else its crash snapshot's -- a kill inside an HDF5 write tore the file, and the resume restores
    the snapshot."""
    if not os.path.exists(h5) or reads_whole(h5):
        return complete_rounds(h5)
    return complete_rounds(h5 + ".snapshot")


def shim_kill_acquire(d, rounds, *mpiexec_options):
    """The command the HDF5 kill tests kill (with the shim's options) and re-run (without): a
    2-rank `acquire --unverified` of tests/data/micro.yaml into d/acq, publishing into d/bundles."""
    return [MPIEXEC, "-np", "2", "--oversubscribe", *mpiexec_options, HARNESS, "acquire", "--unverified",
            os.path.join(SOURCE_DIR, "tests/data/micro.yaml"), "--rounds", str(rounds), "--out",
            os.path.join(d, "acq"), "--out-root", os.path.join(d, "bundles"), "--quiet"]


def require_clean_resume(d, rounds, kept, name):
    """Re-runs shim_kill_acquire(d, rounds) and requires a clean resume: it completes, every planned
    round is in the file, every round of `kept` ({(cell, round): samples}) is there unchanged (not
    measured again), and the bundle is published. Returns the resume's completed process."""
    resumed = run(shim_kill_acquire(d, rounds), check=False)
    assert resumed.returncode == 0, f"{name}: resume failed:\n{resumed.stderr[-2000:]}"
    after = check_complete(os.path.join(d, "acq", "acquisition.h5"), rounds)
    for (cell, r), samples in kept.items():
        assert (after[cell][r] == samples).all(), f"{name}: {cell} round {r} measured again"
    check_wave_accounting(os.path.join(d, "acq"), name)
    assert os.path.exists(os.path.join(d, "bundles", "micro", "meta.yaml")), f"{name}: not published"
    return resumed


def check_wave_accounting(acq_dir, name):
    """campaign.json accounts every complete round of the file exactly once: its cell rounds and
    point-rounds are the file's (a round whose commit a kill interrupted is counted by the next
    start where the file holds it, else measured again and counted then). A file restored from its
    snapshot lost rounds that had been counted: then the counts may only exceed the file's."""
    state = json.load(open(os.path.join(acq_dir, "campaign.json")))
    with h5py.File(os.path.join(acq_dir, "acquisition.h5"), "r") as f:
        rounds = points = 0
        for cell in f["cells"].values():
            done = int(cell["rounds_done"][()].sum())
            rounds += done
            points += done * len(cell["points"])
    cost = state["cost"]
    counted = (state["cell_rounds_done"], cost["expert_point_rounds"] + cost["local_point_rounds"])
    if state.get("restored_from_snapshot"):
        assert counted[0] >= rounds and counted[1] >= points, f"{name}: accounted {counted}, file {rounds, points}"
    else:
        assert counted == (rounds, points), f"{name}: campaign.json accounts {counted} cell rounds and " \
            f"point-rounds, the file holds {rounds, points}"


def quantile(sorted_values, q):
    """The q-quantile of ascending values, interpolated between order statistics as
    core/statistics.h's quantile is."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo])


def on_gpu(path, uuid):
    """A copy of the bench CSV at `path` as if measured on the GPU `uuid` (a `device_uuid` column
    added), beside it as UUID-NAME; returns its path."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    copy = os.path.join(os.path.dirname(path), f"{uuid}-{os.path.basename(path)}")
    with open(copy, "w", newline="") as f:
        csv.writer(f).writerows([rows[0] + ["device_uuid"]] + [r + [uuid] for r in rows[1:]])
    return copy


def write_executable(path, text):
    """Writes a stand-in program (a script with its #! line) at `path`, making its folder."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def gpu_check(build, out, *steps, **env):
    """tools/gpu-check.sh BUILD OUT STEPS... with `env` added to the environment."""
    return subprocess.run(["bash", os.path.join(SOURCE_DIR, "tools/gpu-check.sh"), build, out, *steps],
                          capture_output=True, text=True, env=dict(os.environ, **env))


def check_inspect_cells(h5):
    """inspect on an acquisition file (complete or not) says where it stands, in the acquire log's
    units, and lists the cells per table in the order they are measured: the planned grid, then its
    held-out set, then each refinement stage's grid and held-out set, parts by number."""
    with h5py.File(h5, "r") as f:
        cells = {name: (len(c["points"]), len(c["rounds_done"]), int(c["rounds_done"][()].sum()))
                 for name, c in f["cells"].items()}
    text = run([HARNESS, "inspect", h5]).stdout
    complete = sum(1 for _, planned, rounds in cells.values() if rounds == planned)
    point_rounds = sum(n * planned for n, planned, _ in cells.values())
    measured = sum(n * rounds for n, _, rounds in cells.values())
    assert f"  {complete} of {len(cells)} cells complete, {measured} of {point_rounds} point-rounds\n" in text, text
    names = [c["cell"] for c in json.loads(run([HARNESS, "inspect", h5, "--format", "json"]).stdout)["cells"]]
    assert sorted(names) == sorted(cells), names

    def measuring_order(name):
        table = re.match(r"[^.]+\.[a-z_]+", name).group(0)
        stage, part = re.search(r"\.stage(\d+)", name), re.search(r"\.part(\d+)", name)
        return (table, int(stage.group(1)) if stage else 0, ".held_out" in name, int(part.group(1)) if part else 0)
    assert names == sorted(names, key=measuring_order), names
