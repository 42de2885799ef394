# Shared by the sbatch templates: turns the environment into harness arguments and launches one
# rank per task inside the allocation (srun, or mpirun with the allocation's host list).
HARNESS=${HARNESS:-build/harness/harness}
LAUNCHER=${LAUNCHER:-srun}
GPUS_PER_TASK=${GPUS_PER_TASK:-1}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
# PMIx's hash datastore, not its shared-memory one: under srun a rank once died in MPI_Init with
# a segmentation fault at a null address (one of about 35 two-node test jobs), the signature of
# the shared-memory datastore failures the PMIx and Open MPI trackers give this workaround for.
export PMIX_MCA_gds=${PMIX_MCA_gds:-hash}
if [ -n "${RUNTIME_LIBS:-}" ]; then export LD_LIBRARY_PATH="$RUNTIME_LIBS:${LD_LIBRARY_PATH:-}"; fi

# Seconds the allocation has left (squeue's %L: [D-]H:MM:SS or M:SS); nothing when unknown or
# unlimited.
slurm_seconds_left() {
  [ -n "${SLURM_JOB_ID:-}" ] && command -v squeue >/dev/null || return 0
  local left d=0 h=0 m=0 s=0 f
  left=$(squeue -h -j "$SLURM_JOB_ID" -o %L 2>/dev/null) || return 0
  case "$left" in '' | *[!0-9:-]*) return 0 ;; esac
  if [[ $left == *-* ]]; then d=${left%%-*} left=${left#*-}; fi
  IFS=: read -r -a f <<<"$left"
  case ${#f[@]} in
    3) h=${f[0]} m=${f[1]} s=${f[2]} ;;
    2) m=${f[0]} s=${f[1]} ;;
    *) return 0 ;;
  esac
  echo $((((10#$d * 24 + 10#$h) * 60 + 10#$m) * 60 + 10#$s))
}

# gate_args: what chooses the job, its deployments and backend (colocate takes these);
# args: those and what shapes the measurement (acquire).
harness_args() {
  gate_args=()
  [ -n "${JOB:-}" ] && gate_args+=("$JOB")
  [ -n "${TP_DEGREES:-}" ] && gate_args+=(--tp "$TP_DEGREES")
  [ -n "${DP_DEGREES:-}" ] && gate_args+=(--dp "$DP_DEGREES")
  [ -n "${EP_DEGREES:-}" ] && gate_args+=(--ep "$EP_DEGREES")
  [ -n "${BACKEND:-}" ] && gate_args+=(--backend "$BACKEND")
  [ -n "${OUT_ROOT:-}" ] && gate_args+=(--out-root "$OUT_ROOT")
  args=("${gate_args[@]}")
  [ -n "${ROUNDS:-}" ] && args+=(--rounds "$ROUNDS")
  [ -n "${ITERATIONS:-}" ] && args+=(--iterations "$ITERATIONS")
  # No wave starts that would outlast the allocation (TIME_LIMIT seconds, else what it has left
  # less TIME_MARGIN for the collectives and the publisher): acquire stops cleanly (exit 4) and a
  # resubmission resumes, instead of Slurm killing a wave in flight.
  local limit=${TIME_LIMIT:-} left
  if [ -z "$limit" ]; then
    left=$(slurm_seconds_left)
    [ -n "$left" ] && limit=$((left - ${TIME_MARGIN:-300}))
  fi
  if [ -n "$limit" ]; then
    [ "$limit" -gt 0 ] || limit=1
    args+=(--time-limit "$limit")
  fi
  return 0
}

launch() {
  if [ "$LAUNCHER" = mpirun ]; then
    mpirun --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE "$@"
  else
    local gpu=()
    [ "$GPUS_PER_TASK" != 0 ] && gpu=(--gpus-per-task="$GPUS_PER_TASK" --gpu-bind=closest)
    # A rank that dies ends the step: Slurm's default keeps the others waiting in MPI until the
    # allocation's time limit.
    srun --mpi="${SRUN_MPI:-pmix}" --kill-on-bad-exit=1 --cpu-bind=cores "${gpu[@]}" "$@"
  fi
}

harness_run() {
  harness_args
  echo "harness: job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-?}, ${SLURM_NTASKS:-?} tasks: ${args[*]}"
  if [ "${COLOCATE:-0}" = 1 ]; then
    # shellcheck disable=SC2086 # COLOCATE_ARGS is a list of options (e.g. --quick)
    launch "$HARNESS" colocate "${gate_args[@]}" ${COLOCATE_ARGS:-} --quiet
  fi
  local out=()
  [ -n "${OUT:-}" ] && out=(--out "$OUT")
  # Several tasks per node need the gate's verdict (COLOCATE=1, now or in an earlier job of the
  # same OUT_ROOT) or UNVERIFIED=1, which marks every entry.
  [ "${UNVERIFIED:-0}" = 1 ] && out+=(--unverified)
  # acquire ends with the rank-0 publisher; re-submitting the same job resumes.
  launch "$HARNESS" acquire "${args[@]}" "${out[@]}" --quiet
}
