#!/usr/bin/env bash
# The multi-GPU validation run on one node, in one go (results and logs under OUT_DIR):
#   tools/multi-gpu-run.sh BUILD_DIR OUT_DIR NGPU
# Environment: JOB (default jobs/qwen3-30b-a3b.yaml), BACKEND (default native), STEPS (default
# "colocate collectives speedup nccl-tests report"; a subset runs only those steps),
# COLOCATE_ARGS (e.g. --quick), COLLECTIVE_ARGS (default "--components gate_routing"), ACQUIRE_ARGS (default "--rounds 1
# --grid-factor 4"), COLLECTIVE_JOB (default jobs/qwen3-30b-a3b-collectives.yaml), NCCL_TESTS (an
# NVIDIA nccl-tests source tree for the nccl-tests step; it is skipped without one).
#   1. colocate     the gate: the job's TP1/DP1 target on GPU0, the other GPUs as backgrounds
#                   (their own reference forwards plus NCCL AllReduce among them): solo and
#                   NGPU-way (4-way after a failed 8-way); OUT/coloc/<variant>/colocation.yaml
#   2. collectives  for every group size g in {2,4,8} up to NGPU: acquisitions of TP1/DP<g>
#                   (DP+EP gathers) and TP<g>/DP1 (TP AllReduce) measuring only the cheap
#                   gate_routing grid, so the collective tables at the job's token sizes come
#                   fast; bundles in OUT/coll-dp<g>, OUT/coll-tp<g>
#   3. speedup      the NGPU targets TP1/DP<NGPU> acquired at once, then rank 0's cells alone on
#                   one GPU: speedup = NGPU x serial wall / parallel wall
#   4. nccl-tests   every collective row of 1-64 MiB against nccl-tests built from $NCCL_TESTS
#                   beside the project (tools/nccl-tests-compare.py), OUT/compare-<g>.csv
#   5. report       harness inspect and harness report on every bundle
# Steps 2 and 3 time collectives and the acquisition itself, in bundle roots of their own: they run
# --unverified (their entries say so); step 1 is the co-location verdict.
# Keep NCCL_NVLS_ENABLE=0 (set here) on machines where NVLink multicast is not available.
set -euo pipefail
build=${1:?build directory}
out=${2:?output directory}
ngpu=${3:?number of GPUs}
job=${JOB:-jobs/qwen3-30b-a3b.yaml}
backend=${BACKEND:-native}
read -r -a coll_args <<<"${COLLECTIVE_ARGS:---components gate_routing}"
coll_job=${COLLECTIVE_JOB:-jobs/qwen3-30b-a3b-collectives.yaml}
read -r -a extra <<<"${ACQUIRE_ARGS:---rounds 1 --grid-factor 4}"
steps=" ${STEPS:-colocate collectives speedup nccl-tests report} "
want() { [[ "$steps" == *" $1 "* ]]; }
harness="$build/harness/harness"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE)
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }
timed() {  # timed NAME cmd...: runs, logs to OUT/NAME.log, records the wall seconds
  local name=$1 t0
  t0=$(now)
  shift
  if "$@" >"$out/$name.log" 2>&1; then
    note "$name: ok, $(since "$t0") s"
  else
    note "$name: FAILED (exit $?), $(since "$t0") s; see $name.log"
    return 1
  fi
}
variant_of() { "$harness" plan "$job" --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["variant"])'; }
variant=$(variant_of)
note "multi-gpu run: $ngpu GPUs, job $job (variant $variant), backend $backend, started $(date -u +%FT%TZ)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem --format=csv,noheader >>"$summary"

# 1. co-location gate
# (COLOCATE_ARGS=--quick for a smoke run; the default profile takes 5 minutes per phase.)
want colocate && timed colocate "${mpirun[@]}" -np "$ngpu" "$harness" colocate "$job" --tp 1 --dp 1 \
  --backend "$backend" ${COLOCATE_ARGS:-} --out "$out/coloc/acq" --out-root "$out/coloc" || true

# 2. collective tables
groups=()
for g in 2 4 8; do [ "$g" -le "$ngpu" ] && groups+=("$g"); done
for g in "${groups[@]}"; do
  want collectives || break
  for shape in "1 $g dp$g" "$g 1 tp$g"; do
    read -r tp dp name <<<"$shape"
    timed "collectives-$name" "${mpirun[@]}" -np "$g" "$harness" acquire "$coll_job" --tp "$tp" \
      --dp "$dp" --backend "$backend" "${coll_args[@]}" --unverified --out "$out/coll-$name/acq" \
      --out-root "$out/coll-$name" || true
  done
done

# 3. speedup of the NGPU-way acquisition over one GPU
big=${groups[${#groups[@]}-1]}
if want speedup; then
  timed "acquire-tp1-dp$big" "${mpirun[@]}" -np "$big" "$harness" acquire "$job" --tp 1 \
    --dp "$big" --backend "$backend" "${extra[@]}" --unverified --out "$out/dp$big/acq" --out-root "$out/dp$big" || true
  timed "serial-rank0-dp$big" "${mpirun[@]}" -np 1 "$harness" acquire "$job" --tp 1 --dp "$big" \
    --rank 0 --backend "$backend" "${extra[@]}" --out "$out/serial/acq" --out-root "$out/serial" \
    --no-publish || true
  parallel_s=$(sed -n "s/^acquire-tp1-dp$big: ok, \([0-9.]*\) s$/\1/p" "$summary")
  serial_s=$(sed -n "s/^serial-rank0-dp$big: ok, \([0-9.]*\) s$/\1/p" "$summary")
  if [ -n "$parallel_s" ] && [ -n "$serial_s" ]; then
    note "speedup ($big targets): $big x $serial_s s serial (rank 0's cells) / $parallel_s s parallel = $(python3 -c "print(round($big * $serial_s / $parallel_s, 2))")x"
  fi
fi

# 4. collective tables against nccl-tests
coll_variant=$("$harness" plan "$coll_job" --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["variant"])')
if want nccl-tests && [ -n "${NCCL_TESTS:-}" ]; then
  for g in "${groups[@]}"; do
    bundles=()
    for name in "dp$g" "tp$g"; do
      [ -d "$out/coll-$name/$coll_variant" ] && bundles+=(--bundle "$out/coll-$name/$coll_variant")
    done
    [ ${#bundles[@]} -gt 0 ] || continue
    timed "nccl-tests-$g" python3 tools/nccl-tests-compare.py --nccl-tests "$NCCL_TESTS" \
      --build-dir "$out/nccl-tests-build" --np "$g" "${bundles[@]}" --out "$out/compare-$g.csv" \
      --mpirun "${mpirun[*]}" || true
    tail -n 1 "$out/nccl-tests-$g.log" >>"$summary" || true
  done
elif want nccl-tests; then
  note "nccl-tests: skipped (set NCCL_TESTS to an nccl-tests source tree)"
fi

# 5. inspect and report every bundle
for b in $(want report && echo "$out"/*/"$variant" "$out"/*/"$coll_variant"); do
  [ -f "$b/meta.yaml" ] || [ -f "$b/colocation.yaml" ] || continue
  name=$(basename "$(dirname "$b")")
  "$harness" inspect "$b" >"$out/inspect-$name.txt" 2>&1 || true
  [ -f "$b/meta.yaml" ] && { "$harness" report "$b" --out "$out/report-$name.html" >/dev/null 2>&1 || true; }
done
[ -f "$out/coloc/$variant/colocation.yaml" ] && cp "$out/coloc/$variant/colocation.yaml" "$out/"
note "finished $(date -u +%FT%TZ), wall $SECONDS s"
