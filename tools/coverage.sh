#!/usr/bin/env bash
# Line coverage of the CPU suite, and the refusals no test reaches: configures build-cov (CPU
# backends, gcc --coverage, -O0), builds, runs every test but the Python package's, and writes
#   OUT/coverage.txt        per file: lines, executed, missing line numbers (gcovr)
#   OUT/untested-errors.txt each never-executed line that throws or builds an error, with its
#                           file:line: the error paths that still want a bad-input test
# Needs gcovr (pip install gcovr). A process that ends in MPI_Abort or a kill writes no coverage,
# so the error paths of a harness that dies under mpirun are listed although a test reaches them
# (grep the tests for the message before writing one).
#   tools/coverage.sh [OUT_DIR]       (default build-cov/report)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-cov/report}
command -v gcovr >/dev/null || { echo "coverage: needs gcovr (pip install gcovr)" >&2; exit 2; }
cmake -S . -B build-cov -DCMAKE_BUILD_TYPE=Debug -DHARNESS_WITH_CUDA=OFF \
  -DCMAKE_C_FLAGS="--coverage -O0" -DCMAKE_CXX_FLAGS="--coverage -O0" \
  -DCMAKE_EXE_LINKER_FLAGS=--coverage -DCMAKE_SHARED_LINKER_FLAGS=--coverage \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 >/dev/null
cmake --build build-cov -j "$(nproc)" >/dev/null
find build-cov -name '*.gcda' -delete
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ctest --test-dir build-cov -j "$(nproc)" -E python_package >"$out.ctest.log" 2>&1 ||
  echo "coverage: some tests failed (see $out.ctest.log); the report covers what ran" >&2
mkdir -p "$out"
mv "$out.ctest.log" "$out/ctest.log"
filter='(core|store|bundle|lookup|ranks|harness|comm|kernels)/'
gcovr -r . build-cov --filter "$filter" --exclude '.*/tests/.*' --gcov-ignore-parse-errors=all \
  --txt "$out/coverage.txt" --json "$out/coverage.json" >"$out/gcovr.log" 2>&1
python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
lines = []
for f in json.load(open(f"{out}/coverage.json"))["files"]:
    text = open(f["file"]).read().split("\n")
    for n in sorted({l["line_number"] for l in f["lines"] if l["count"] == 0}):
        if "throw" in text[n - 1] or "Error(" in text[n - 1]:
            lines.append(f"{f['file']}:{n}: {text[n - 1].strip()}")
open(f"{out}/untested-errors.txt", "w").write("".join(l + "\n" for l in lines))
print(f"coverage: {out}/coverage.txt, {len(lines)} never-executed error lines in "
      f"{out}/untested-errors.txt")
EOF
tail -3 "$out/coverage.txt"
