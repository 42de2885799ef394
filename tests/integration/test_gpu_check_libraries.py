"""tools/gpu-check.sh finds the libraries a build cannot load (CUDA's, on a node whose toolkit or
whose nvidia-* Python wheels are outside the loader's path) before any step runs: a stand-in
`harness`, a real executable linked against a library outside that path, runs once the script has
found the library under CUDA_HOME or in Python's nvidia packages and added its folder to
LD_LIBRARY_PATH; where it is in neither, the script names it and stops (exit 2) with no step run."""
import os
import shutil
import subprocess
import tempfile

from harness_test_lib import gpu_check

LIB = "libgpucheckstandin.so.1"
LIB_SOURCE = "int standin_value(void) { return 7; }\n"
HARNESS_SOURCE = """#include <stdio.h>
int standin_value(void);
int main(int argc, char** argv) {
  printf("stand-in harness %s: library value %d\\n", argc > 1 ? argv[1] : "", standin_value());
  return 0;
}
"""


def compile_standins(tmp):
    """The library (in tmp/lib) and a harness linked against it by soname, with no run path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed"
    lib_dir = os.path.join(tmp, "lib")
    os.makedirs(lib_dir)
    for name, text in (("standin.c", LIB_SOURCE), ("harness.c", HARNESS_SOURCE)):
        open(os.path.join(tmp, name), "w").write(text)
    subprocess.run([cc, "-shared", "-fPIC", f"-Wl,-soname,{LIB}", "-o", os.path.join(lib_dir, LIB),
                    os.path.join(tmp, "standin.c")], check=True)
    build = os.path.join(tmp, "build")
    os.makedirs(os.path.join(build, "harness"))
    subprocess.run([cc, "-o", os.path.join(build, "harness", "harness"), os.path.join(tmp, "harness.c"),
                    os.path.join(lib_dir, LIB)], check=True)
    return build, os.path.join(lib_dir, LIB)


with tempfile.TemporaryDirectory() as tmp:
    build, built_lib = compile_standins(tmp)
    kept = shutil.copy(built_lib, os.path.join(tmp, LIB))
    os.remove(built_lib)
    # Nothing else leads the loader or the search to the library.
    base = dict(CUDA_HOME="", CUDA_PATH="", PYTHONPATH="")

    # Nowhere to be found: named, exit 2, no step run.
    out = os.path.join(tmp, "out-missing")
    p = gpu_check(build, out, "bench", **base)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert f"cannot load {LIB}: not on the loader's path" in p.stderr, p.stderr
    assert "== bench" not in p.stdout and not os.path.exists(os.path.join(out, "bench.log")), p.stdout
    print("ok: a library found nowhere is named and no step runs")

    # Under a toolkit's layout at CUDA_HOME.
    toolkit_lib = os.path.join(tmp, "cuda", "targets", "x86_64-linux", "lib")
    os.makedirs(toolkit_lib)
    shutil.copy(kept, toolkit_lib)
    out = os.path.join(tmp, "out-toolkit")
    p = gpu_check(build, out, "bench", **dict(base, CUDA_HOME=os.path.join(tmp, "cuda")))
    assert p.returncode == 0 and "== bench ok" in p.stdout, (p.stdout, p.stderr)
    assert f"{LIB}: from {toolkit_lib} (added to LD_LIBRARY_PATH)" in p.stdout, p.stdout
    assert "stand-in harness bench: library value 7" in open(os.path.join(out, "bench.log")).read()
    print("ok: found under CUDA_HOME")

    # In a Python nvidia-* package (a namespace package `nvidia` on PYTHONPATH).
    shutil.rmtree(os.path.join(tmp, "cuda"))
    wheel_lib = os.path.join(tmp, "site", "nvidia", "standin", "lib")
    os.makedirs(wheel_lib)
    shutil.copy(kept, wheel_lib)
    out = os.path.join(tmp, "out-wheel")
    p = gpu_check(build, out, "bench", **dict(base, PYTHONPATH=os.path.join(tmp, "site")))
    assert p.returncode == 0 and f"{LIB}: from {wheel_lib} (added to LD_LIBRARY_PATH)" in p.stdout, \
        (p.stdout, p.stderr)
    assert "stand-in harness bench: library value 7" in open(os.path.join(out, "bench.log")).read()
    print("ok: found in Python's nvidia packages")

    # Already loadable (LD_LIBRARY_PATH): nothing added, nothing said.
    out = os.path.join(tmp, "out-path")
    p = gpu_check(build, out, "bench", **dict(base, LD_LIBRARY_PATH=wheel_lib))
    assert p.returncode == 0 and "added to LD_LIBRARY_PATH" not in p.stdout, (p.stdout, p.stderr)
    print("ok: a loadable build is left as it is")
