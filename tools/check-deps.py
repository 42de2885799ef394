#!/usr/bin/env python3
"""Checks the module dependency rules of docs/design.md on every #include of the source tree.

    core <- kernels, comm, store <- bundle <- ranks <- harness
    lookup <- core + the bundle format (bundle/format.h, bundle/bundle_meta.h)

A module may include its own headers and those of the modules it depends on. The modules a
simulator links (core, the bundle format, lookup) must not include MPI, HDF5, CUDA, CUPTI, NCCL or
Boost headers. Exits 1 naming every violation (file:line, the include, the rule).
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)

ALLOWED = {
    "core": {"core"},
    "kernels": {"core", "kernels"},
    "comm": {"core", "comm"},
    "store": {"core", "store"},
    "bundle": {"core", "store", "bundle", "lookup/tables.h"},
    "lookup": {"core", "lookup", "bundle/format.h", "bundle/bundle_meta.h"},
    "ranks": {"core", "kernels", "comm", "store", "bundle", "ranks"},
    "harness": {"core", "kernels", "comm", "store", "bundle", "lookup", "ranks", "harness"},
}
# Files a simulator links: no system dependency beyond the C++ library, yaml-cpp, OpenSSL, Qhull.
STANDALONE = [re.compile(p) for p in (r"^core/", r"^lookup/", r"^bundle/(format|bundle_meta)\.")]
FORBIDDEN_SYSTEM = re.compile(r"^(mpi\.h|hdf5.*|H5.*|cuda.*|cupti.*|nccl.*|cublas.*|boost/.*)$")
# Test-only helpers a module's tests may use beside the module's own dependencies.
TEST_EXTRA = {"comm": {"kernels"}, "ranks": set()}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def allowed(module: str, header: str, is_test: bool) -> bool:
    rules = ALLOWED[module] | (TEST_EXTRA.get(module, set()) if is_test else set())
    return header.split("/")[0] in rules or header in rules


def main() -> int:
    problems = []
    for module in ALLOWED:
        for path in sorted((ROOT / module).rglob("*")):
            if path.suffix not in {".h", ".cpp", ".cu", ".in"}:
                continue
            rel = path.relative_to(ROOT).as_posix()
            is_test = "/tests/" in rel
            standalone = not is_test and any(p.search(rel) for p in STANDALONE)
            for number, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                quote, header = m.groups()
                if quote == '"' and "/" in header and header.split("/")[0] in ALLOWED:
                    if not allowed(module, header, is_test):
                        problems.append(f"{rel}:{number}: includes {header}, but {module}/ may "
                                        f"depend only on {', '.join(sorted(ALLOWED[module]))}")
                elif standalone and FORBIDDEN_SYSTEM.match(header):
                    problems.append(f"{rel}:{number}: includes <{header}>, but {rel} is linked "
                                    "by simulators and must not need MPI, HDF5, CUDA or Boost")
    for p in problems:
        print(p)
    print(f"module dependencies: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
