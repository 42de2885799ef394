// Records stored in the shared HDF5 file, one struct per dataset row. Units: microseconds.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace moe {

enum class Arm : std::int8_t { single = 0, banks = 1, double_banks = 2 };

struct Sample {
  std::int32_t point;
  std::int32_t round;
  std::int8_t arm;  // Arm
  std::int32_t bank;
  std::int32_t forward;
  double value_us;
  std::int32_t activity_count;
  std::uint64_t name_hash;
};

struct CorrectnessCheck {
  std::int32_t point;
  std::int32_t round;
  std::int32_t bank;
  double relative_error;
  std::int8_t pass;
};

struct PointMedian {
  std::int32_t point;
  std::int32_t round;
  double median_us;     // all timed forwards of the point in this round
  double median_b_us;   // B arm (experts), else = median_us
  double median_2b_us;  // 2B arm (experts), else = median_us
  // The mean SM clock the device counted over the point's warm-up and timed forwards
  // (Backend::clock_stamp; NVML's sampled clock can read 2-13% higher under load); NaN where the
  // backend has no device clock (the host backends).
  double sm_clock_mean_mhz = std::numeric_limits<double>::quiet_NaN();
};

// One measured collective at one size, with the analytical worst-rank ring envelope evaluated at
// the same size. time_us: the op's kernel time (CUPTI, ranks aligned by a barrier before each op;
// host clock on mpi_host), median of per-round medians; steady_time_us: back-to-back ops as
// nccl-tests times them by default, median over rounds.
struct CollectiveRow {
  char name[32];  // allgather_hidden, allgather_topk_weights, allgather_topk_ids, reducescatter,
                  // ep_dispatch, ep_combine, tp_*
  char op[16];    // all_gather | reduce_scatter | all_reduce | all_to_all
  std::int32_t group_size;
  std::int64_t tokens;
  std::int64_t bytes;  // whole buffer
  double time_us;
  double algbw_gbps;
  double busbw_gbps;
  double model_time_us;
  double steady_time_us;
};

// Rows per stream of the shared file: what a run encoded (measured, about to be committed) and
// what is in complete rounds of the file. The campaign state keeps both so that a resumed or
// published acquisition whose counts do not balance is rejected.
struct RecordCounts {
  std::int64_t samples = 0, medians = 0, checks = 0;
  bool operator==(const RecordCounts&) const = default;
  RecordCounts& operator+=(const RecordCounts& o) {
    samples += o.samples, medians += o.medians, checks += o.checks;
    return *this;
  }
};

// Host seconds spent per phase of a cell round (where the wall time of an acquisition goes).
struct PhaseSeconds {
  double setup = 0;   // weights and per-point workloads (allocation, stimuli)
  double verify = 0;  // correctness checks against the CPU reference
  double timing = 0;  // warm-up and timed forwards, tracer collection
};

// Everything one cell measured in one round.
struct CellRound {
  std::int32_t round = 0;
  std::uint64_t point_order_seed = 0;
  // Which run (the n of /provenance run_<n>) and which of its ranks committed the round, so which
  // device measured it: a campaign resumed on other GPUs mixes devices row by row. -1 where the
  // file predates them. Provenance, not data: outside the round's digest.
  std::int32_t run = -1, rank = -1;
  PhaseSeconds phases;
  std::int32_t settles_extended = 0;  // points whose settle ran to capped_ms (not stored)
  std::vector<Sample> samples;
  std::vector<CorrectnessCheck> checks;
  std::vector<PointMedian> medians;
};

}  // namespace moe
