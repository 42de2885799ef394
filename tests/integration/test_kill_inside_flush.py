"""Kills a rank inside HDF5's own writes (hdf5_kill_shim.c, preloaded): after the Mth write of a
flush or of a close, where HDF5 has written part of the metadata it changes. HDF5 does not journal
it, so such a kill can leave a file HDF5 cannot read; the resume must then move the damaged file
aside and restore the last snapshot (store/acquisition_file.h), say so, record it in
campaign.json, and finish: every planned round complete, published, and every round the snapshot
held kept, not measured again (a file has a snapshot from its creation on, so a kill inside its
first flush is restored too). A reference run lists each rank's flushes and closes with the
writes each made (KILL_REPORT); the cases are spread over that list, rounds, refinement stages
and the serial append of the held-out evaluations alike."""
import glob
import json
import os
import shutil
import subprocess
import tempfile

import h5py
import numpy

from harness_test_lib import MPI_ENV, committed_rounds, reads_whole, require_clean_resume, run, shim_kill_acquire

SHIM = os.environ["HDF5_KILL_SHIM"]
ROUNDS = 4
FLUSH_CASES_PER_RANK = 5


with tempfile.TemporaryDirectory() as tmp:
    report = os.path.join(tmp, "report.txt")
    run(shim_kill_acquire(os.path.join(tmp, "reference"), ROUNDS, "-x", f"LD_PRELOAD={SHIM}", "-x", f"KILL_REPORT={report}"))
    calls = [(int(r), c, int(w)) for r, c, n, w in (line.split() for line in open(report))]
    # Cases: (rank, call, W) -- killed after the Wth file write inside that rank's calls of that
    # kind, spread over the writes the reference run's flushes made (a run's number of waves
    # depends on measured costs, so cases count writes, not calls).
    cases = []
    for rank in (0, 1):
        total = sum(w for r, c, w in calls if r == rank and c == "H5Fflush")
        assert total > 100, f"rank {rank}'s flushes wrote only {total} times"
        # Over the first 70 %: another run can make fewer writes (see the retry below).
        cases += [(rank, "H5Fflush", total * 7 * (2 * i + 1) // (20 * FLUSH_CASES_PER_RANK))
                  for i in range(FLUSH_CASES_PER_RANK)]
    # Inside rank 0's first flush (the cells' declaration), a few writes before its end: a torn
    # file whose only snapshot is the one taken when the file was created.
    first = next(w for r, c, w in calls if r == 0 and c == "H5Fflush")
    assert first > 8, f"rank 0's first flush wrote only {first} times"
    cases.append((0, "H5Fflush", first - 4))
    # The serial append of a held-out evaluation writes in a close on rank 0 only: the first
    # close after the new file's that writes more than the superblock.
    closes = [w for r, c, w in calls if r == 0 and c == "H5Fclose" and w > 0]
    append = next((i for i, w in enumerate(closes) if i > 0 and w >= 2), None)
    assert append is not None, f"rank 0's closes wrote {closes}: no serial append"
    cases.append((0, "H5Fclose", sum(closes[:append]) + closes[append] // 2))

    damaged = 0
    for i, (rank, call, writes) in enumerate(cases):
        d = os.path.join(tmp, f"case{i}")
        h5 = os.path.join(d, "acq", "acquisition.h5")
        # A run whose refinement took fewer stages than the reference's (its held-out errors
        # depend on the machine's timing noise) can finish before the Wth write: then the case
        # is tried again at half the writes, twice at most.
        for attempt in range(3):
            name = f"rank {rank} killed after write {writes} inside {call}"
            killed = run(shim_kill_acquire(d, ROUNDS, "-x", f"LD_PRELOAD={SHIM}", "-x", f"KILL_CALL={call}", "-x",
                                 f"KILL_WRITES={writes}", "-x", f"KILL_RANK={rank}"), check=False)
            if killed.returncode != 0:
                break
            print(f"{name}: the run finished first; trying half the writes")
            shutil.rmtree(d)
            writes //= 2
        assert killed.returncode != 0, f"{name}: never reached, the case tests nothing"
        # What was committed before the kill: the file, or where a torn write left it unreadable,
        # the snapshot (a copy of the file as the last completed flush left it).
        intact = not os.path.exists(h5) or reads_whole(h5)  # no file: killed while creating it
        kept = committed_rounds(h5)
        resumed = require_clean_resume(d, ROUNDS, kept, name)
        state = json.load(open(os.path.join(d, "acq", "campaign.json")))
        restores = state.get("restored_from_snapshot", [])
        copies = glob.glob(h5 + ".damaged-*")
        if not intact:
            damaged += 1
            assert "was damaged" in resumed.stderr, f"{name}: the restore was not said:\n{resumed.stderr}"
            assert len(restores) == 1 and len(copies) == 1, f"{name}: {restores} {copies}"
            assert restores[0]["damaged_copy"] == copies[0], (restores, copies)
            with open(copies[0], "rb") as f:
                assert f.read(8) == b"\x89HDF\r\n\x1a\n", f"{name}: the damaged file was not kept as it was"
        else:
            assert not restores and not copies, f"{name}: a readable file was replaced: {restores}"
        print(f"ok: {name}: {'damaged, restored from the snapshot' if not intact else 'file intact'}, "
              f"{len(kept)} complete rounds kept, resumed cleanly")
        shutil.rmtree(d)
    # Without torn files the restore path would be untested.
    assert damaged >= 2, f"only {damaged} of {len(cases)} kills left a damaged file"
    print(f"kills inside HDF5 writes: {len(cases)}, damaged files restored: {damaged}, all resumed cleanly")

    # A torn file can hold any bytes where text was, and HDF5 reads them: the resume's check parses
    # what the resume reads as JSON (cell descriptions, the runs' provenance) and restores the
    # snapshot, and the message that quotes the bytes (a JSON parser's "last read: ...") keeps the
    # log and campaign.json UTF-8 (a torn cell description once failed a resume and put a raw 0xfa
    # byte into its log).
    def garble_cell(f):
        return next(iter(f["cells"].values())).attrs, "cell"

    def garble_provenance(f):
        return f["provenance"].attrs, "run_0"

    for what, where in (("cell description", garble_cell), ("run's provenance", garble_provenance)):
        d = os.path.join(tmp, "garbled")
        run(shim_kill_acquire(d, ROUNDS))
        h5 = os.path.join(d, "acq", "acquisition.h5")
        with h5py.File(h5, "r+") as f:
            attrs, name = where(f)
            size = len(attrs[name])
            garbled = b'{"target": tr\xfa\x01' + b" " * size
            attrs[name] = numpy.bytes_(garbled[:size])  # fixed-length, as harness writes
        resumed = subprocess.run(shim_kill_acquire(d, ROUNDS), capture_output=True, env=MPI_ENV)
        assert resumed.returncode == 0, (what, resumed.stderr[-2000:])
        log = resumed.stderr.decode("utf-8")  # raises on a raw byte
        assert "was damaged" in log and "\\xfa" in log, (what, log)
        restores = json.load(open(os.path.join(d, "acq", "campaign.json")))["restored_from_snapshot"]
        assert len(restores) == 1 and "\\xfa" in restores[0]["problem"], (what, restores)
        print(f"ok: a garbled {what}: restored from the snapshot, said in printable text")
        shutil.rmtree(d)
