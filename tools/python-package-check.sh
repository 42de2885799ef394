#!/usr/bin/env bash
# The Python package's tests and its batch benchmark, with the Python that has it installed:
#   HARNESS_PYTHON=venv/bin/python tools/python-package-check.sh HARNESS_BIN
# Exits 77 (skipped) when HARNESS_PYTHON is unset or lacks harness_lookup (pip install . first).
set -euo pipefail
cd "$(dirname "$0")/.."
harness=${1:?harness binary}
py=${HARNESS_PYTHON:-}
if [ -z "$py" ] || ! "$py" -c "import harness_lookup" 2>/dev/null; then
  echo "skipped: set HARNESS_PYTHON to a Python with the package installed (pip install .)"
  exit 77
fi
HARNESS_BIN=$harness "$py" -m pytest -q python/tests
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpiexec -np 2 --oversubscribe "$harness" \
  acquire --unverified tests/data/micro.yaml --out "$tmp/acq" --out-root "$tmp" --quiet >/dev/null
"$py" python/bench_batch.py "$tmp/micro" 1 2
# The README's Python example, as the README shows it, against the CLI.
"$py" tests/readme_examples.py "$tmp"
got=$("$py" "$tmp/example.py" "$tmp/micro")
want=$("$harness" lookup "$tmp/micro" --tp 1 --dp 2 --component experts --tokens 3 --activated 2 \
  --assignments 4 2>/dev/null | awk '{print $1}')
"$py" -c "import sys; got, want = float(sys.argv[1].split()[1]), float(sys.argv[2]); \
assert abs(got - want) < 1e-4, (got, want); print('README python example:', sys.argv[1])" "$got" "$want"
