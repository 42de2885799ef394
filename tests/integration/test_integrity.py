"""Silent corruption is refused: every complete round of acquisition.h5 carries a SHA-256 of its
data, recomputed here independently (the byte layout of docs/hdf5-layout.md), and every stored
median must be the median of its samples. A flipped median fails the digest; a flipped median
re-signed with a matching digest fails the re-derivation; publish and inspect refuse both and
nothing is published."""
import hashlib
import os
import shutil
import struct
import tempfile

import h5py
import numpy as np

from harness_test_lib import HARNESS, SOURCE_DIR, mpirun_cmd, run


def digest(group):
    out = struct.pack("<Q", int(group.attrs["point_order_seed"]) & (2**64 - 1))
    for s in group["samples"][()]:
        out += struct.pack("<iibiidiQ", s["point"], s["round"], s["arm"], s["bank"], s["forward"],
                           s["value_us"], s["activity_count"], s["name_hash"])
    for c in group["checks"][()]:
        out += struct.pack("<iiidb", c["point"], c["round"], c["bank"], c["relative_error"], c["pass"])
    for m in group["medians"][()]:
        out += struct.pack("<iidddd", m["point"], m["round"], m["median_us"], m["median_b_us"], m["median_2b_us"],
                           m["sm_clock_mean_mhz"])
    return hashlib.sha256(out).hexdigest()


def attr_text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


with tempfile.TemporaryDirectory() as tmp:
    acq = os.path.join(tmp, "acq")
    run(mpirun_cmd(2, "acquire", "--unverified", os.path.join(SOURCE_DIR, "tests/data/micro.yaml"), "--out", acq,
                   "--no-publish", "--quiet"))
    h5 = os.path.join(acq, "acquisition.h5")
    rounds = 0
    with h5py.File(h5, "r") as f:
        for name, cell in f["cells"].items():
            for r, done in enumerate(cell["rounds_done"][()]):
                if done:
                    g = cell[f"round_{r}"]
                    assert attr_text(g.attrs["sha256"]) == digest(g), f"{name} round {r}: digest differs"
                    rounds += 1
    assert rounds >= 22, rounds

    def tampered(label, resign):
        d = os.path.join(tmp, label)
        shutil.copytree(acq, d)
        with h5py.File(os.path.join(d, "acquisition.h5"), "r+") as f:
            cell = f["cells"][sorted(f["cells"])[0]]
            g = cell["round_0"]
            med = g["medians"][()]
            med["median_us"][0] *= 1.9  # what a flipped byte of a stored median did in the issue
            g["medians"][...] = med
            if resign:
                g.attrs.modify("sha256", np.bytes_(digest(g)))
        return os.path.join(d, "acquisition.h5"), cell.name

    for label, resign, needle in (("flipped", False, "does not match its SHA-256"),
                                  ("resigned", True, "is not the median of its samples")):
        path, cell = tampered(label, resign)
        root = os.path.join(tmp, f"bundles-{label}")
        p = run([HARNESS, "publish", path, "--out-root", root, "--variant", "v"], check=False)
        assert p.returncode != 0 and needle in p.stderr, (label, p.returncode, p.stderr)
        assert not os.path.exists(os.path.join(root, "v", "meta.yaml")), f"{label}: something was published"
        p = run([HARNESS, "inspect", path], check=False)
        assert p.returncode != 0 and needle in p.stderr, (label, p.returncode, p.stderr)
    # A round without its digest (an older harness's) and a file whose contract no longer matches its
    # digest: refused by the publisher and inspect alike, naming the damage.
    def damage_round(f):
        del f["cells"][sorted(f["cells"])[0]]["round_0"].attrs["sha256"]

    def damage_contract(f):
        f.attrs.modify("contract", np.bytes_(attr_text(f.attrs["contract"]).replace('"rounds":', '"rounds": ')))

    for label, damage, needle in (("unsigned", damage_round, "has no sha256 (written by an older harness)"),
                                  ("contract", damage_contract, "stored contract does not match its SHA-256")):
        d = os.path.join(tmp, label)
        shutil.copytree(acq, d)
        with h5py.File(os.path.join(d, "acquisition.h5"), "r+") as f:
            damage(f)
        root = os.path.join(tmp, f"bundles-{label}")
        for cmd in ([HARNESS, "publish", os.path.join(d, "acquisition.h5"), "--out-root", root, "--variant", "v"],
                    [HARNESS, "inspect", os.path.join(d, "acquisition.h5")]):
            p = run(cmd, check=False)
            assert p.returncode != 0 and needle in p.stderr, (label, cmd[1], p.returncode, p.stderr)
        assert not os.path.exists(os.path.join(root, "v", "meta.yaml")), f"{label}: something was published"
    # A file of another schema version (an older harness's) is refused by name, by the readers and
    # by a resume, and left as it was.
    old = os.path.join(tmp, "old-schema")
    shutil.copytree(acq, old)
    old_h5 = os.path.join(old, "acquisition.h5")
    for path in (old_h5, old_h5 + ".snapshot"):  # an older harness wrote both
        with h5py.File(path, "r+") as f:
            f.attrs.modify("schema_version", np.int32(1))
    before = [open(path, "rb").read() for path in (old_h5, old_h5 + ".snapshot")]
    for cmd in ([HARNESS, "publish", old_h5, "--out-root", os.path.join(tmp, "bundles-old"), "--variant", "v"],
                [HARNESS, "inspect", old_h5]):
        p = run(cmd, check=False)
        assert p.returncode != 0 and "has schema version 1, this harness reads 2" in p.stderr, (cmd, p.stderr)
    p = run(mpirun_cmd(2, "acquire", "--unverified", os.path.join(SOURCE_DIR, "tests/data/micro.yaml"), "--out", old,
                       "--no-publish", "--quiet"), check=False)
    assert p.returncode != 0 and "has schema version 1, this harness writes 2" in p.stderr, p.stderr
    assert [open(path, "rb").read() for path in (old_h5, old_h5 + ".snapshot")] == before, \
        "a refused file was changed"
    assert sorted(os.listdir(old)) == sorted(os.listdir(acq)), "a refused file was moved or added"
    # Only the file is an older harness's, its snapshot this one's: still refused by name, not
    # taken for a torn file (which a resume would move aside and replace by its snapshot).
    mixed = os.path.join(tmp, "old-file-current-snapshot")
    shutil.copytree(acq, mixed)
    mixed_h5 = os.path.join(mixed, "acquisition.h5")
    with h5py.File(mixed_h5, "r+") as f:
        f.attrs.modify("schema_version", np.int32(1))
    before = [open(path, "rb").read() for path in (mixed_h5, mixed_h5 + ".snapshot")]
    p = run(mpirun_cmd(2, "acquire", "--unverified", os.path.join(SOURCE_DIR, "tests/data/micro.yaml"), "--out",
                       mixed, "--no-publish", "--quiet"), check=False)
    assert p.returncode != 0 and "has schema version 1, this harness writes 2" in p.stderr, p.stderr
    assert "damaged" not in p.stderr, p.stderr
    assert [open(path, "rb").read() for path in (mixed_h5, mixed_h5 + ".snapshot")] == before, \
        "a refused file was changed"
    assert sorted(os.listdir(mixed)) == sorted(os.listdir(acq)), "a refused file was moved or added"
print(f"ok: {rounds} round digests match an independent recomputation; tampered medians refused")
