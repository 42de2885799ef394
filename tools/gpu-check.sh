#!/usr/bin/env bash
# GPU acceptance in one go, on a node with one GPU and a build with CUDA:
#   tools/gpu-check.sh BUILD_DIR OUT_DIR [steps...]
# Steps (default: tests sanitizer bench): 
#   tests      the `gpu`-labelled test binaries (every backend vs the CPU reference, CUPTI, NCCL)
#              and the bench's failed-points test (tests/integration/test_bench_failed_points.py)
#   sanitizer  compute-sanitizer memcheck on the native experts, gate and GPU reference tests,
#              racecheck on the small forwards of the tiny models
#              (skipped if not installed; about 6 minutes on an H200, half of it the persistent
#              schedules' test)
#   bench      harness bench experts -> OUT_DIR/bench-experts.csv (+ .txt)
#   sweep      harness bench experts --sweep twice (+ $SWEEP_ARGS) -> OUT_DIR/sweep{1,2}.csv and
#              their plot OUT_DIR/sweep.svg (tools/sweep-plot.py)
#   tiles      the sweep as the tile rule runs it and with each tile forced (HARNESS_NATIVE_TILE;
#              $TILES, default every tile; + $SWEEP_ARGS) -> OUT_DIR/tiles-*.csv,
#              checked by tools/tile-rule-check.py (fails where the rule's tile is more than 2%
#              slower than the fastest forced tile; the sweeps' own checks are the sweep step's)
#   ab         a same-call A/B: harness bench experts $AB_ARGS (e.g. "--backends native
#              --components experts --tokens 1,2"), twice for each arm, alternating (A B A B);
#              arm A is BUILD_DIR with the environment $AB_ENV_A, arm B is $AB_BUILD (default
#              BUILD_DIR) with $AB_ENV_B (e.g. "HARNESS_NATIVE_SCHEDULE=persistent")
#              -> OUT_DIR/ab_{a,b}{1,2}.csv, compared by tools/bench-ab.py (B / A; with
#              $AB_STEPS_FROM=N also each arm's steps between neighbouring N from N up)
#   profile    Nsight Compute on the native GEMMs of $PROFILE_POINTS (MODEL:N words, default
#              qwen3-30b-a3b:256 qwen3-30b-a3b:1024 deepseek-v3:1024 qwen3-30b-a3b:4096): the two
#              GEMM launches of the third forward, with the metrics tools/ncu-stream.py lists
#              -> OUT_DIR/profile-MODEL-N.csv, summarised by tools/ncu-stream.py (skipped if ncu
#              is not installed; ncu holds the SM clock at base and flushes the caches per launch)
#   acquire    harness acquire $ACQUIRE_JOB (default jobs/qwen3-30b-a3b.yaml) --tp 1 --dp 1
#              --backend native (+ $ACQUIRE_ARGS, e.g. "--rounds 1 --accept-failures"; a job that
#              only raises fidelity.max_added_points goes on refining a campaign that stopped at
#              its cap, docs/measurement.md#fidelity) into OUT_DIR/acquire, under
#              mpirun, or as one rank without a launcher (below); with $CAMPAIGN_ARCHIVE (a .tgz)
#              the campaign is kept in an archive: unpacked into OUT_DIR first when it exists
#              (refused if OUT_DIR/acquire exists too: one of them would be lost), and after the
#              run, finished or not, OUT_DIR/acquire (the campaign and, once published, its
#              bundle; crash snapshots left out) is packed into OUT_DIR/campaign.tgz, for a
#              machine whose disk does not outlive the call; a call cut off by SIGTERM or SIGINT
#              (a machine's or a batch system's time limit) stops the run and packs it with its
#              crash snapshots (the file may be torn mid-write; the resume restores the snapshot)
#   fidelity   the acquire step's bundle against points it was not built from: $FIDELITY_DRAWS
#              (default 23) balanced N drawn log-uniformly from 2 to $FIDELITY_MAX_TOKENS (default
#              8000) with $FIDELITY_SEED (default 20261201) through the bench, for the components
#              $FIDELITY_COMPONENTS (default experts,gate_routing; gate_routing alone for a
#              gate-only acquire), compared with lookup (tools/bench-lookup-compare.py), then
#              validate --points 48 with both routings; fails where the bounds (median 1%, p95 2%,
#              max 4%) or the tolerance miss
#   rows       the acquire step's bundle's own experts rows measured again on this GPU, by both
#              protocols: harness validate --table-rows $ROWS_COUNT (default 32) --points 1
#              --routing balanced --seed $ROWS_SEED (default 20261205) --format json (the entry's
#              protocol) and harness bench experts --tokens N --activated A at the same rows (the
#              bench's), $ROWS_RUNS (default 3) times, alternating -> OUT_DIR/rows-validate-I.json,
#              OUT_DIR/rows-bench-I.csv, compared by tools/rows-remeasured.py (per device that
#              measured the rows, this GPU against the table; the bench against validate)
# Before any step, a library the build's harness cannot load is looked for under CUDA_HOME,
# CUDA_PATH, /usr/local/cuda* and Python's nvidia packages (PyTorch's nvidia-* wheels) and its folder
# added to LD_LIBRARY_PATH; one found nowhere is named and the script exits 2. The acquire step runs
# without a launcher where mpirun is missing or OMPI_MCA_ess_singleton_isolated=1 is set (the
# exports of slurm/bundle-runtime-libs.sh --self-contained).
# Each step's output is appended to OUT_DIR/<step>.log; every step runs, and the exit status is
# 1 when any failed, else 4 when the acquire step stopped at its --time-limit (harness acquire's
# exit 4: not a failure, the same command resumes; reported as "stopped"), else 0. A step cut
# short (a time limit, a kill) can be rerun with the same command: `acquire` resumes its campaign
# where it stopped (every committed wave is kept, the one in flight, about a minute of work, is
# measured again), so the full job can be spread over several shorter calls; with `--time-limit S`
# in ACQUIRE_ARGS it stops by itself before a wave that would not end within S seconds, and
# nothing is measured again.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?build directory}
out=${2:?output directory}
shift 2
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests sanitizer bench)
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
# CUDA's libraries where the loader does not look (a toolkit outside its cache, or the nvidia-*
# Python wheels a PyTorch install brings): each library the harness cannot load is looked for there
# and its folder added to LD_LIBRARY_PATH, before any step, so a node's layout is solved (or its
# gap named) once, not by every step failing alike.
cuda_library_folders() {
  local root
  for root in ${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda /usr/local/cuda-*; do
    [ -d "$root" ] && echo "$root"
  done
  python3 -c 'import nvidia; print(*nvidia.__path__, sep="\n")' 2>/dev/null || true
}
find_unloaded_libraries() {
  local line
  [ -x "$build/harness/harness" ] && command -v ldd >/dev/null || return 0
  while read -r line; do
    if [[ $line == *"=> not found"* ]]; then echo "${line%% *}"; fi
  done < <(ldd "$build/harness/harness" 2>/dev/null || true)
}
missing=$(find_unloaded_libraries)
if [ -n "$missing" ]; then
  mapfile -t roots < <(cuda_library_folders)
  # (no folder, no search: find without one would search the current folder)
  [ ${#roots[@]} -eq 0 ] || for lib in $missing; do
    found=$(find "${roots[@]}" -maxdepth 5 -name "$lib" \( -type f -o -type l \) 2>/dev/null | head -1)
    if [ -n "$found" ]; then
      found=$(dirname "$found")
      echo "$lib: from $found (added to LD_LIBRARY_PATH)"
      export LD_LIBRARY_PATH=$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
  done
  missing=$(find_unloaded_libraries)
  if [ -n "$missing" ]; then
    echo "gpu-check: $build/harness/harness cannot load ${missing//$'\n'/ }:" \
      "not on the loader's path (LD_LIBRARY_PATH), nor under CUDA_HOME, /usr/local/cuda* or Python's" \
      "nvidia packages; add their folder to LD_LIBRARY_PATH" >&2
    exit 2
  fi
fi
# One rank without a launcher where Open MPI's is not installed (a node given
# slurm/bundle-runtime-libs.sh --self-contained), or where that bundle's exports say so
# (OMPI_MCA_ess_singleton_isolated=1): its Open MPI is the bundle's, and another installation's
# mpirun must not launch it. A process that initialises MPI (acquire, the ranks' and collectives'
# GPU tests) then runs as an isolated singleton: otherwise it would start Open MPI's daemon.
mpi_launch=(mpirun --allow-run-as-root -np 1 -x LD_LIBRARY_PATH)
launcherless_reason=
if ! command -v mpirun >/dev/null; then
  launcherless_reason="mpirun not installed"
elif [ "${OMPI_MCA_ess_singleton_isolated:-}" = 1 ]; then
  launcherless_reason="OMPI_MCA_ess_singleton_isolated=1, the runtime bundle's Open MPI"
fi
if [ -n "$launcherless_reason" ]; then
  export OMPI_MCA_ess_singleton_isolated=1
  mpi_launch=()
fi

step() {
  local name=$1
  shift
  local t0=$SECONDS
  echo "== $name"
  echo "== $name started $(date -u +%FT%TZ)" >>"$out/$name.log"
  local rc=0
  "$@" >>"$out/$name.log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "== $name ok ($((SECONDS - t0)) s)"
  elif [ "$name" = acquire ] && [ "$rc" -eq 4 ]; then
    echo "== $name stopped at its time limit ($((SECONDS - t0)) s): the same command resumes; tail of $out/$name.log:"
    tail -5 "$out/$name.log"
    stopped=1
  else
    echo "== $name FAILED ($((SECONDS - t0)) s); tail of $out/$name.log:"
    tail -40 "$out/$name.log"
    failed=1
  fi
}

run_tests() {
  local rc=0
  for t in kernels/kernels_gpu_tests ranks/ranks_gpu_tests comm/comm_gpu_tests; do
    "$build/$t" --gtest_brief=1 || rc=1
  done
  HARNESS_BIN=$build/harness/harness python3 "$here/../tests/integration/test_bench_failed_points.py" || rc=1
  return $rc
}

run_sanitizer() {
  local cs rc=0
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1 || true)
  if [ -z "$cs" ]; then echo "compute-sanitizer not installed: skipped"; return 0; fi
  # One run of TOOL over the GPU tests FILTER selects; each says its exit status and time, and
  # every run goes ahead when one fails (the step then fails).
  sanitize() {
    local t0=$SECONDS status=0
    "$cs" --tool "$1" --error-exitcode 9 "$build/kernels/kernels_gpu_tests" --gtest_filter="$2" || status=$?
    echo "-- $1 $2: exit $status ($((SECONDS - t0)) s)"
    return "$status"
  }
  sanitize memcheck 'Backends/GpuBackend.InvalidRoutes*/1:NativeBackend.ForwardIsCapturable*:NativeBackend.SmallForwards*:NativeBackend.OneToken*' || rc=1
  # The small forwards plan their routes in each W13 block's shared memory, and one token's blocks
  # share their lanes and partial sums there: its barriers too, on the tiny models (racecheck of
  # the real ones takes minutes).
  sanitize racecheck 'NativeBackend.SmallForwardsOnTinyModels:NativeBackend.OneTokenOnTinyModels' || rc=1
  sanitize memcheck 'NativeBackend.EveryTile*:NativeBackend.MmaSync*:NativeBackend.W2OnTall*' || rc=1
  sanitize memcheck 'NativeBackend.PersistentSchedule*' || rc=1
  sanitize memcheck 'Backends/GpuBackend.Gate*/1' || rc=1
  sanitize memcheck 'GpuReference.*' || rc=1
  return "$rc"
}

run_bench() {
  # shellcheck disable=SC2086  # BENCH_ARGS: extra options, e.g. "--components experts"
  "$build/harness/harness" bench experts --csv "$out/bench-experts.csv" ${BENCH_ARGS:-} | tee "$out/bench-experts.txt"
}

run_sweep() {
  # Two sweeps in one call (the issue's bounds must hold in both), then their plot; each exits 3
  # when a check fails, and the step reports that after both ran.
  local rc=0 run
  for run in 1 2; do
    # shellcheck disable=SC2086  # SWEEP_ARGS: extra options, e.g. "--models deepseek-v3"
    "$build/harness/harness" bench experts --sweep --csv "$out/sweep$run.csv" ${SWEEP_ARGS:-} || rc=1
  done
  python3 "$here/sweep-plot.py" "$out/sweep1.csv" "$out/sweep2.csv" --out "$out/sweep.svg" \
    --title "harness bench experts --sweep, $(date -u +%F), two runs" || rc=1
  return $rc
}

run_tiles() {
  local rc=0 tile status forced=()
  for tile in rule ${TILES:-narrow medium wide80 wide96 wide112 wide wide160}; do
    status=0
    # shellcheck disable=SC2086  # SWEEP_ARGS: extra options, e.g. "--models deepseek-v3"
    if [ "$tile" = rule ]; then
      "$build/harness/harness" bench experts --sweep --csv "$out/tiles-rule.csv" ${SWEEP_ARGS:-} || status=$?
    else
      HARNESS_NATIVE_TILE=$tile "$build/harness/harness" bench experts --sweep \
        --csv "$out/tiles-$tile.csv" ${SWEEP_ARGS:-} || status=$?
      forced+=("$out/tiles-$tile.csv")
    fi
    # Exit 3 is the sweep's own monotone / cliff verdict, which the sweep step judges.
    if [ "$status" -ne 0 ] && [ "$status" -ne 3 ]; then rc=1; fi
  done
  python3 "$here/tile-rule-check.py" "$out/tiles-rule.csv" "${forced[@]}" || rc=1
  return "$rc"
}

run_ab() {
  local rc=0 run arm bin arm_env
  for run in 1 2; do
    for arm in a b; do
      if [ "$arm" = a ]; then bin=$build arm_env=${AB_ENV_A:-}; else bin=${AB_BUILD:-$build} arm_env=${AB_ENV_B:-}; fi
      echo "-- arm $arm run $run: $arm_env $bin/harness/harness bench experts ${AB_ARGS:-}"
      # shellcheck disable=SC2086  # the arm's VAR=value words and the bench options
      env $arm_env "$bin/harness/harness" bench experts ${AB_ARGS:-} --csv "$out/ab_$arm$run.csv" || rc=1
    done
  done
  python3 "$here/bench-ab.py" --a "$out/ab_a1.csv" "$out/ab_a2.csv" --b "$out/ab_b1.csv" \
    "$out/ab_b2.csv" ${AB_STEPS_FROM:+--steps-from "$AB_STEPS_FROM"} || rc=1
  return "$rc"
}

run_profile() {
  local ncu metrics rc=0 point model tokens csv files=()
  ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1 || true)
  if [ -z "$ncu" ]; then echo "ncu not installed: skipped"; return 0; fi
  metrics=$(python3 "$here/ncu-stream.py" --metrics)
  for point in ${PROFILE_POINTS:-qwen3-30b-a3b:256 qwen3-30b-a3b:1024 deepseek-v3:1024 qwen3-30b-a3b:4096}; do
    model=${point%%:*} tokens=${point#*:}
    csv="$out/profile-$model-$tokens.csv"
    # The first two forwards (four GEMM launches) are the bench's checks against the reference.
    "$ncu" -k regex:expert_gemm --launch-skip 4 --launch-count 2 --csv --page details \
      --metrics "$metrics" \
      "$build/harness/harness" bench experts --under-profiler --models "$model" --backends native \
      --components experts --tokens "$tokens" --iterations 2 --settle-ms 0 >"$csv" || rc=1
    files+=("$csv")
  done
  python3 "$here/ncu-stream.py" "${files[@]}" || rc=1
  return "$rc"
}

# OUT_DIR/acquire into OUT_DIR/campaign.tgz; $1 = with-snapshots keeps the crash snapshots.
pack_campaign() {
  local exclude=(--exclude='*.snapshot')
  [ "${1:-}" = with-snapshots ] && exclude=()
  tar czf "$out/campaign.tgz.packing" -C "$out" "${exclude[@]}" acquire &&
    mv "$out/campaign.tgz.packing" "$out/campaign.tgz"
}

# A signal that cuts the acquire step off: pack what the run committed at once (its file may be
# torn mid-write, so the crash snapshots go too: the resume restores one), then stop the run where
# the signal did not reach it (sent to this script alone). Not at once: a second SIGTERM right
# after the first makes mpirun exit without stopping its ranks.
acquire_cut_off() {
  local signal=$1 status=$2 said tries=0
  trap - TERM INT
  if [ -d "$out/acquire" ] && pack_campaign with-snapshots; then
    said="cut off by SIG$signal: the campaign packed with its crash snapshots into $out/campaign.tgz"
  else
    said="cut off by SIG$signal: no campaign packed"
  fi
  echo "$said"
  echo "== acquire $said" >&3
  if [ -n "${acquire_pid:-}" ]; then
    while kill -0 "$acquire_pid" 2>/dev/null && [ $((tries += 1)) -le 50 ]; do sleep 0.1; done
    kill -TERM "$acquire_pid" 2>/dev/null || true # ended already where the signal reached it
    wait "$acquire_pid" 2>/dev/null || true       # its status is the signal's
  fi
  exit "$status"
}

run_acquire() {
  local rc=0
  [ ${#mpi_launch[@]} -gt 0 ] || echo "$launcherless_reason: one rank without a launcher"
  if [ -n "${CAMPAIGN_ARCHIVE:-}" ]; then
    if [ -e "$out/acquire" ] && [ -f "$CAMPAIGN_ARCHIVE" ]; then
      echo "both $out/acquire and the archive $CAMPAIGN_ARCHIVE exist: resume one of them (move the other away)"
      return 1
    fi
    if [ -f "$CAMPAIGN_ARCHIVE" ]; then
      tar xzf "$CAMPAIGN_ARCHIVE" -C "$out"
      echo "resuming the campaign archived in $CAMPAIGN_ARCHIVE"
    else
      echo "no archive at $CAMPAIGN_ARCHIVE: a new campaign"
    fi
    trap 'acquire_cut_off TERM 143' TERM
    trap 'acquire_cut_off INT 130' INT
  fi
  # In the background, so that a signal reaches the trap while the run goes on.
  # shellcheck disable=SC2086  # ACQUIRE_ARGS: extra options
  "${mpi_launch[@]}" "$build/harness/harness" acquire "${ACQUIRE_JOB:-jobs/qwen3-30b-a3b.yaml}" --tp 1 --dp 1 \
    --backend native --out-root "$out/acquire" ${ACQUIRE_ARGS:-} &
  acquire_pid=$!
  wait "$acquire_pid" || rc=$?
  trap - TERM INT
  if [ -n "${CAMPAIGN_ARCHIVE:-}" ] && [ -d "$out/acquire" ]; then
    pack_campaign
    echo "campaign packed into $out/campaign.tgz (acquire exit $rc)"
  fi
  return "$rc"
}

run_fidelity() {
  local bundle="$out/acquire/qwen3-30b-a3b" seed=${FIDELITY_SEED:-20261201} tokens rc=0
  if [ ! -f "$bundle/meta.yaml" ]; then echo "no bundle at $bundle: run the acquire step first"; return 1; fi
  tokens=$(python3 "$here/bench-lookup-compare.py" --draw-tokens "${FIDELITY_DRAWS:-23}" --seed "$seed" \
    --max-tokens "${FIDELITY_MAX_TOKENS:-8000}")
  "$build/harness/harness" bench experts --models qwen3-30b-a3b --backends native \
    --components "${FIDELITY_COMPONENTS:-experts,gate_routing}" --tokens "$tokens" \
    --csv "$out/fidelity-bench.csv" || rc=1
  python3 "$here/bench-lookup-compare.py" --bundle "$bundle" --bench "$out/fidelity-bench.csv" \
    --harness "$build/harness/harness" --split 2048 --out "$out/fidelity-compare.csv" || rc=1
  for routing in balanced random; do
    "$build/harness/harness" validate "$bundle" --points 48 --seed "$seed" --routing "$routing" || rc=1
  done
  return $rc
}

run_rows() {
  local bundle="$out/acquire/qwen3-30b-a3b" runs=${ROWS_RUNS:-3} i n a first rc
  if [ ! -f "$bundle/meta.yaml" ]; then echo "no bundle at $bundle: run the acquire step first"; return 1; fi
  rm -f "$out"/rows-validate-*.json "$out"/rows-bench-*.csv  # an earlier call's runs are not this GPU's
  for i in $(seq 1 "$runs"); do
    rc=0
    "$build/harness/harness" validate "$bundle" --points 1 --table-rows "${ROWS_COUNT:-32}" \
      --routing balanced --seed "${ROWS_SEED:-20261205}" --format json >"$out/rows-validate-$i.json" || rc=$?
    # 3: its held-out point missed the tolerance, which this step does not judge.
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then return 1; fi
    # One bench per row (its --tokens and --activated make a cross product), merged into one CSV.
    first=1
    while read -r n a; do
      "$build/harness/harness" bench experts --models qwen3-30b-a3b --backends native \
        --components experts --tokens "$n" --activated "$a" --csv "$out/rows-bench-point.csv" >&2 || return 1
      if [ "$first" = 1 ]; then cat "$out/rows-bench-point.csv"; else tail -n +2 "$out/rows-bench-point.csv"; fi
      first=0
    done < <(python3 "$here/rows-remeasured.py" --points "$out/rows-validate-1.json") >"$out/rows-bench-$i.csv"
    rm -f "$out/rows-bench-point.csv"
  done
  python3 "$here/rows-remeasured.py" --validate "$out"/rows-validate-*.json --bench "$out"/rows-bench-*.csv
}

exec 3>&1  # the script's own output, for what a step must say beside its log
failed=0 stopped=0
for s in "${steps[@]}"; do
  case "$s" in
    tests) step tests run_tests ;;
    sanitizer) step sanitizer run_sanitizer ;;
    bench) step bench run_bench ;;
    sweep) step sweep run_sweep ;;
    tiles) step tiles run_tiles ;;
    ab) step ab run_ab ;;
    profile) step profile run_profile ;;
    acquire) step acquire run_acquire ;;
    fidelity) step fidelity run_fidelity ;;
    rows) step rows run_rows ;;
    *) echo "unknown step '$s'" >&2; exit 2 ;;
  esac
done
[ "$failed" -eq 0 ] && [ "$stopped" -eq 1 ] && exit 4
exit $failed
