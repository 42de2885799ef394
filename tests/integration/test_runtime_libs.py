"""slurm/bundle-runtime-libs.sh --self-contained on a node without Open MPI: in a mount namespace
where every library the bundle holds is hidden at its system path (/dev/null bound over it), Open
MPI's component directory is an empty tmpfs and its launchers are hidden, one rank of the harness
acquires and publishes the micro job as an isolated singleton with the variables the script
prints; without the bundle on LD_LIBRARY_PATH, or without its components, it cannot start (so the
hiding is real). Also the default bundle and the script's refusals.
Exits 77 (skipped) when not root or unshare/mount namespaces are unavailable."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

from harness_test_lib import HARNESS, SOURCE_DIR

SCRIPT = os.path.join(SOURCE_DIR, "slurm/bundle-runtime-libs.sh")
BUILD = os.path.dirname(os.path.dirname(HARNESS))  # BUILD/harness/harness

if os.geteuid() != 0 or not shutil.which("unshare"):
    print("skipped: needs root and unshare for a mount namespace")
    sys.exit(77)
if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
    print("skipped: mount namespaces are not available here")
    sys.exit(77)


def bundle(dest, *args):
    return subprocess.run(["bash", SCRIPT, BUILD, dest, *args], capture_output=True, text=True)


def on_bare_node(dest, components, variables, command):
    """Runs `command` (a shell line) in a mount namespace where the bundle's libraries are hidden
    at their sources, `components` is empty and the Open MPI launchers are gone, with only
    `variables` (and PATH) in the environment."""
    hidden = sorted({os.path.realpath(line.split()[1]) for line in open(os.path.join(dest, "bundled.txt"))})
    hidden += sorted({os.path.realpath(p) for p in map(shutil.which, ("orted", "mpirun", "mpiexec")) if p})
    script = "set -e\n" + f"mount -t tmpfs none {components}\n" + "".join(
        f"mount --bind /dev/null {h}\n" for h in hidden) + f"exec env -i PATH=/usr/bin:/bin {variables} {command}\n"
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", script],
                          capture_output=True, text=True, timeout=240)


with tempfile.TemporaryDirectory() as tmp:
    dest = os.path.join(tmp, "libs")
    p = bundle(dest, "--self-contained")
    assert p.returncode == 0, (p.stdout, p.stderr)
    exports = re.search(r"export (LD_LIBRARY_PATH=\S+):\$LD_LIBRARY_PATH (OMPI_MCA_mca_base_component_path=\S+) "
                        r"(OMPI_MCA_ess_singleton_isolated=1)", p.stdout)
    assert exports, p.stdout
    names = set(os.listdir(dest))
    for so in ("libmpi.so.40", "libhdf5_openmpi.so.103", "libyaml-cpp.so.0.7", "bundled.txt", "openmpi"):
        assert so in names, (so, sorted(names))
    # Never the node's C runtime or CUDA: a second copy of those breaks the process.
    assert not any(re.match(r"(libc|libstdc\+\+|libcudart|libcublas|libnccl|libcupti)\.so", n) for n in names), names
    bundled_components = os.listdir(os.path.join(dest, "openmpi"))
    assert "mca_ess_singleton.so" in bundled_components, bundled_components
    # No network transport or OpenSHMEM component, nor what only they load.
    assert not [c for c in bundled_components if re.search(r"ucx|ofi|openib|psm|spml|sshmem", c)], bundled_components
    assert not [n for n in names if re.match(r"lib(ucp|uct|fabric|ibverbs|psm2|oshmem)\.so", n)], names
    sources = [line.split() for line in open(os.path.join(dest, "bundled.txt"))]
    assert sorted(so for so, _ in sources) == sorted(names - {"bundled.txt", "openmpi"}), sources
    components = subprocess.run(["ompi_info", "--parsable", "--path", "pkglibdir"], capture_output=True,
                                text=True, check=True).stdout.strip().split(":")[-1]
    print(f"ok: {len(sources)} libraries and {len(os.listdir(os.path.join(dest, 'openmpi')))} components bundled")

    work = os.path.join(tmp, "work")
    os.makedirs(work)
    acquire = (f"{HARNESS} acquire {SOURCE_DIR}/tests/data/micro.yaml --tp 1 --dp 1 --out {work}/acq "
               f"--out-root {work}/bundles --quiet")
    ld, component_path, isolated = exports.groups()
    p = on_bare_node(dest, components, f"{ld} {component_path} {isolated}", acquire)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert os.path.exists(os.path.join(work, "bundles", "micro", "meta.yaml")), (p.stdout, p.stderr)
    print("ok: one rank acquired and published with only the bundle")

    # The controls: the same node without the bundle's libraries, or without its components.
    p = on_bare_node(dest, components, f"{component_path} {isolated}", f"{HARNESS} --version")
    assert p.returncode != 0 and "error while loading shared libraries" in p.stderr, (p.stdout, p.stderr)
    p = on_bare_node(dest, components, f"{ld} {isolated}", acquire.replace("/acq ", "/acq2 "))
    assert p.returncode != 0 and "MPI_Init" in p.stderr, (p.stdout, p.stderr)
    print("ok: without the libraries or the components nothing runs")

    # The default bundle: HDF5, yaml-cpp, Boost, Qhull, with their sources.
    p = bundle(os.path.join(tmp, "default"))
    assert p.returncode == 0 and "bundled 6 libraries" in p.stdout, (p.stdout, p.stderr)
    listed = [line.split()[0] for line in open(os.path.join(tmp, "default", "bundled.txt"))]
    assert "libhdf5_openmpi.so.103" in listed and len(listed) == 6, listed

    # Refusals: one message, non-zero exit.
    p = bundle(os.path.join(tmp, "x"), "--self-contained", "libdoes-not-exist.so.1")
    assert p.returncode != 0 and "libdoes-not-exist.so.1 not found" in p.stderr, (p.stdout, p.stderr)
    p = subprocess.run(["bash", SCRIPT, os.path.join(tmp, "no-build"), os.path.join(tmp, "y")],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "no harness binary at" in p.stderr, (p.stdout, p.stderr)
    # A build whose harness needs a library this machine lacks is named, not bundled without it.
    fake = os.path.join(tmp, "fake")
    os.makedirs(os.path.join(fake, "harness"))
    open(os.path.join(tmp, "gone.c"), "w").write("int gone(void) { return 1; }\n")
    open(os.path.join(tmp, "main.c"), "w").write("int gone(void);\nint main(void) { return gone(); }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(tmp, "libgone.so"), os.path.join(tmp, "gone.c")],
                   check=True)
    subprocess.run(["cc", "-o", os.path.join(fake, "harness", "harness"), os.path.join(tmp, "main.c"),
                    f"-L{tmp}", "-lgone"], check=True)
    os.remove(os.path.join(tmp, "libgone.so"))
    p = subprocess.run(["bash", SCRIPT, fake, os.path.join(tmp, "z"), "--self-contained"], capture_output=True,
                       text=True)
    assert p.returncode != 0 and "needs libraries this machine lacks" in p.stderr and "libgone.so" in p.stderr, \
        (p.stdout, p.stderr)
    print("ok: the refusals")
