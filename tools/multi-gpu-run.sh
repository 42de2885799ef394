#!/usr/bin/env bash
# The multi-GPU validation run on one node, in one go (results and logs under OUT_DIR):
#   tools/multi-gpu-run.sh BUILD_DIR OUT_DIR NGPU
# Environment: JOB (default jobs/qwen3-30b-a3b.yaml), BACKEND (default native), ACQUIRE_ARGS
# (extra acquire options, e.g. "--rounds 1 --grid-factor 4" for a short run), STEPS (default
# "colocate collectives serial peer report"; a subset runs only those steps). The peer step needs
# PyTorch with CUDA.
#   1. co-location gate: the job's TP1/DP1 target on GPU0, the other GPUs as backgrounds
#      (their own reference forwards plus NCCL AllReduce among them): solo and NGPU-way (4-way
#      after a failed 8-way), verdict published into OUT_DIR/coloc/<variant>/colocation.yaml
#   2. collectives: acquire TP1/DP<g> for every group size g in {2,4,8} up to NGPU (EP = g, one
#      target per GPU), which also times the DP+EP collectives of each deployment; TP<g>/DP1 for
#      the TP AllReduce
#   3. the NGPU-way acquisition is step 2's TP1/DP<NGPU> run; the same cells of rank 0 then run
#      alone on one GPU: speedup = NGPU x (serial wall of one rank's cells) / (parallel wall)
#   4. peer timings of every collective row through torch.distributed (tools/nccl_peer.py)
#   5. harness inspect and harness report on every bundle
# Keep NCCL_NVLS_ENABLE=0 (set here) on machines where NVLink multicast is not available.
set -euo pipefail
build=${1:?build directory}
out=${2:?output directory}
ngpu=${3:?number of GPUs}
job=${JOB:-jobs/qwen3-30b-a3b.yaml}
backend=${BACKEND:-native}
read -r -a extra <<<"${ACQUIRE_ARGS:-}"
steps=" ${STEPS:-colocate collectives serial peer report} "
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
want colocate && timed colocate "${mpirun[@]}" -np "$ngpu" "$harness" colocate "$job" --tp 1 --dp 1 \
  --backend "$backend" --out "$out/coloc/acq" --out-root "$out/coloc" || true

# 2 + 3. acquisitions with their collective tables
groups=()
for g in 2 4 8; do [ "$g" -le "$ngpu" ] && groups+=("$g"); done
for g in "${groups[@]}"; do
  want collectives || break
  timed "acquire-tp1-dp$g" "${mpirun[@]}" -np "$g" "$harness" acquire "$job" --tp 1 --dp "$g" \
    --backend "$backend" "${extra[@]}" --out "$out/dp$g/acq" --out-root "$out/dp$g" || true
  timed "acquire-tp$g-dp1" "${mpirun[@]}" -np "$g" "$harness" acquire "$job" --tp "$g" --dp 1 \
    --backend "$backend" "${extra[@]}" --out "$out/tp$g/acq" --out-root "$out/tp$g" || true
done
big=${groups[${#groups[@]}-1]}
if want serial; then
  timed "serial-rank0-dp$big" "${mpirun[@]}" -np 1 "$harness" acquire "$job" --tp 1 --dp "$big" \
    --rank 0 --backend "$backend" "${extra[@]}" --out "$out/serial/acq" --out-root "$out/serial" \
    --no-publish || true
  parallel_s=$(sed -n "s/^acquire-tp1-dp$big: ok, \([0-9.]*\) s$/\1/p" "$summary")
  serial_s=$(sed -n "s/^serial-rank0-dp$big: ok, \([0-9.]*\) s$/\1/p" "$summary")
  if [ -n "$parallel_s" ] && [ -n "$serial_s" ]; then
    note "speedup ($big targets): $big x $serial_s s serial (rank 0's cells) / $parallel_s s parallel = $(python3 -c "print(round($big * $serial_s / $parallel_s, 2))")x"
  fi
fi

# 4. peer collective timings
if want peer; then
  for d in "${groups[@]/#/dp}" "${groups[@]/#/tp}"; do
    [ -d "$out/$d/$variant" ] || continue
    n=${d#??}
    timed "peer-$d" "${mpirun[@]}" -np "$n" python3 tools/nccl_peer.py --ours "$out/$d/$variant" \
      --out "$out/$d/peer.csv" || true
    tail -n 4 "$out/peer-$d.log" >>"$summary" || true
  done
fi

# 5. inspect and report every bundle
for b in $(want report && echo "$out"/*/"$variant"); do
  [ -f "$b/meta.yaml" ] || [ -f "$b/colocation.yaml" ] || continue
  name=$(basename "$(dirname "$b")")
  "$harness" inspect "$b" >"$out/inspect-$name.txt" 2>&1 || true
  [ -f "$b/meta.yaml" ] && { "$harness" report "$b" --out "$out/report-$name.html" >/dev/null 2>&1 || true; }
done
[ -f "$out/coloc/$variant/colocation.yaml" ] && cp "$out/coloc/$variant/colocation.yaml" "$out/"
note "finished $(date -u +%FT%TZ), wall $SECONDS s"
