#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`: clang, ASan, UBSan) and runs each for SECONDS on a
# scratch copy of its corpus (fuzz/corpus/<target>); any crash, sanitizer report or exception other
# than the reader's own error fails. Prints executions per target.
#   tools/fuzz.sh [SECONDS] [OUT_DIR]     (default 30 s, a temporary OUT_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
out=${2:-$(mktemp -d)}
cmake --preset fuzz >/dev/null
cmake --build build-fuzz -j "$(nproc)" >/dev/null
status=0
for target in job meta table; do
  work="$out/$target"
  mkdir -p "$work/corpus" "$work/findings"
  cp fuzz/corpus/"$target"/* "$work/corpus/"
  if (cd "$work/findings" && "$OLDPWD/build-fuzz/fuzz/fuzz_$target" -max_total_time="$seconds" \
        -max_len=8192 -print_final_stats=1 "$work/corpus" >"$work/log" 2>&1); then
    echo "fuzz_$target: $(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log") executions in ${seconds} s, no finding"
  else
    echo "fuzz_$target: FINDING (see $work/log and $work/findings)"
    grep -E -A3 "terminate called|ERROR: |runtime error" "$work/log" | head -20
    status=1
  fi
done
exit $status
