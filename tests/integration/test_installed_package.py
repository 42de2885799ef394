"""The installed package, as a project outside this build uses it: `cmake --install` into a fresh
prefix, then tests/consumer configured with find_package(harness) builds a C and a C++ program
against harness::lookup, and the C program also builds with pkg-config alone. All three answer
like `harness lookup` on a published bundle, at grid rows and between them, refuse what the CLI
refuses, and link no MPI, HDF5, CUDA or Boost library."""
import os
import random
import sys
import subprocess
import tempfile

from harness_test_lib import HARNESS, SOURCE_DIR, mpirun_cmd, run

BUILD = os.path.dirname(os.path.dirname(HARNESS))


def answers(program, variant, lines):
    p = subprocess.run([program, variant, "1", "2"], input="\n".join(lines) + "\n", capture_output=True,
                       text=True, check=True)
    return p.stdout.splitlines()


with tempfile.TemporaryDirectory() as tmp:
    prefix = os.path.join(tmp, "prefix")
    run(["cmake", "--install", BUILD, "--prefix", prefix])
    for path in ["bin/harness", "include/harness/lookup/harness_lookup.h", "include/harness/lookup/lookup.h",
                 "include/harness/bundle/bundle_meta.h", "include/harness/core/target.h",
                 "lib/cmake/harness/harnessConfig.cmake", "lib/pkgconfig/harness-lookup.pc"]:
        assert os.path.exists(os.path.join(prefix, path)), path
    consumer = os.path.join(tmp, "consumer")
    run(["cmake", "-S", os.path.join(SOURCE_DIR, "tests/consumer"), "-B", consumer, f"-DCMAKE_PREFIX_PATH={prefix}",
         "-DCMAKE_BUILD_TYPE=Release"])
    run(["cmake", "--build", consumer, "-j2"])
    # pkg-config alone, for builds that do not use CMake.
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "harness-lookup"], capture_output=True, text=True,
                           env=env, check=True).stdout.split()
    pc_program = os.path.join(tmp, "consumer_pc")
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", os.path.join(SOURCE_DIR, "tests/consumer/consumer.c"),
                    "-o", pc_program, *flags, f"-Wl,-rpath,{prefix}/lib", "-lpthread", "-lm"], check=True)
    programs = {"C (CMake)": os.path.join(consumer, "consumer_c"), "C++ (CMake)": os.path.join(consumer, "consumer_cpp"),
                "C (pkg-config)": pc_program}
    # The README's examples of reading a bundle from C and C++, built the way it says.
    run([sys.executable, os.path.join(SOURCE_DIR, "tests/readme_examples.py"), tmp])
    readme_c, readme_cpp = os.path.join(tmp, "readme_c"), os.path.join(tmp, "readme_cpp")
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", os.path.join(tmp, "example.c"), "-o", readme_c, *flags,
                    f"-Wl,-rpath,{prefix}/lib"], check=True)
    subprocess.run(["c++", "-std=c++20", "-Wall", "-Werror", os.path.join(tmp, "example.cpp"), "-o", readme_cpp,
                    f"-I{prefix}/include/harness", f"-L{prefix}/lib", "-lharness_lookup",
                    f"-Wl,-rpath,{prefix}/lib"], check=True)
    for name, program in programs.items():
        libs = subprocess.run(["ldd", program], capture_output=True, text=True, check=True).stdout
        assert f"{prefix}/lib/libharness_lookup.so" in libs, (name, libs)
        for lib in ("libmpi", "libhdf5", "libcuda", "libboost"):
            assert lib not in libs, (name, lib, libs)

    run(mpirun_cmd(2, "acquire", "--unverified", os.path.join(SOURCE_DIR, "tests/data/micro.yaml"), "--out",
                   os.path.join(tmp, "acq"), "--out-root", tmp, "--quiet"))
    variant = os.path.join(tmp, "micro")
    rows = [r.split(",") for r in open(os.path.join(variant, "tp1/moe_components/dp2_ep2_rank0_sp0/components.csv"))
            .read().splitlines()[1:]]
    rng = random.Random(7)
    queries = [(r[0], int(r[2]), int(r[3]), int(r[4])) for r in rows[::2]]
    for _ in range(30):
        n = rng.randint(1, 16)
        a = rng.randint(1, min(4, 2 * n))
        queries.append(("experts", n, a, rng.randint(a, n * min(2, a))))
    lines = [f"component {c} {n} {a} {m}" for c, n, a, m in queries]
    expected = []
    for c, n, a, m in queries:
        args = ["--component", c, "--tokens", str(n)] + (["--activated", str(a), "--assignments", str(m)]
                                                         if c == "experts" else [])
        p = run([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", *args], check=False)
        expected.append(float(p.stdout.split()[0]) if p.returncode == 0 else None)
    answered = {}
    for name, program in programs.items():
        got = answers(program, variant, lines + ["collective ep_dispatch 3"])
        answered[name] = 0
        for q, want, line in zip(queries, expected, got):
            if want is None:
                assert line.startswith("error"), (name, q, line)
            else:
                assert abs(float(line.split()[0]) - want) <= 1e-9 * want, (name, q, line, want)
                answered[name] += 1
        assert float(got[len(queries)].split()[0]) > 0, (name, got[len(queries)])
    assert len(set(answered.values())) == 1 and min(answered.values()) >= len(rows) // 2, answered
    # The C++ API also says how each row was measured (row_clocks.csv): one record per published row.
    assert answers(programs["C++ (CMake)"], variant, ["rows"]) == [str(len(rows))]
    want = float(run([HARNESS, "lookup", variant, "--tp", "1", "--dp", "2", "--component", "experts", "--tokens", "3",
                      "--activated", "2", "--assignments", "4"]).stdout.split()[0])
    for program in (readme_c, readme_cpp):
        line = subprocess.run([program, variant], capture_output=True, text=True, check=True).stdout.strip()
        assert line.startswith("experts ") and abs(float(line.split()[1]) - want) < 1e-4, (program, line, want)
print(f"installed package: {len(programs)} consumers answered {answered} queries like the CLI")
