// `harness acquire`: assigns cells (target x component) to MPI ranks, measures every planned
// point and round, and commits complete rounds to the shared HDF5 file. Re-running the same
// command resumes: complete rounds are never measured again.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "core/job_spec.h"
#include "ranks/watchdog.h"
#include "store/records.h"

namespace moe {

struct AcquireOptions {
  std::string out_dir;  // holds acquisition.h5 and campaign.json
  bool quiet = false;
  std::string command;                 // the exact command line, recorded in campaign.json
  bool keep_launcher_binding = false;  // bind within the launcher's mask (ranks/affinity.h)
  // Several ranks per node measure without a co-location verdict; every entry says so.
  bool unverified = false;
  double verdict_max_age_hours = 168;  // an older verdict is refused
  bool raise_budget = false;           // accept a budget larger than the campaign's (recorded)
  // > 0: start no wave predicted to end later than this many seconds after the run began (a
  // call's or an allocation's wall-time limit); the run stops cleanly and the same command resumes.
  double time_limit_s = 0;
  WatchdogLimits watchdog;
};

struct AcquireSummary {
  std::string file;
  std::string backend;
  int cells = 0;
  std::int64_t points = 0;
  int rounds_measured = 0;  // cell rounds measured by this run (all ranks)
  int rounds_resumed = 0;   // cell rounds already complete in the file
  double wall_s = 0;
  // Non-empty when the run stopped before a wave: the campaign outcome that says why
  // ("budget_stop": the GPU-hour budget; "time_limit": time_limit_s), and the message.
  std::string stopped_by;
  std::string stop_reason;
  double device_seconds_consumed = 0;            // whole campaign, all runs
  std::string colocation;                        // placement regime used and where it came from
  int collective_tables = 0;                     // collective tables written by this run
  std::vector<std::string> collectives_skipped;  // deployments with more ranks than the job
  // Where this run's time went, in rank-seconds summed over ranks: per-point setup,
  // verification and timed forwards, the cost calibration before the first wave, the fidelity
  // evaluations between refinement stages, and the collectives phase; `timed_forwards` forwards
  // were timed.
  PhaseSeconds phases;
  double calibration_s = 0;
  std::int64_t calibration_points = 0;  // measured by the calibration (not stored)
  double refinement_s = 0;
  double collectives_s = 0;
  std::int64_t timed_forwards = 0;
  // Point-rounds this run measured, and those whose settle the power or thermal policy extended
  // to capped_settle_ms (docs/measurement.md#protocol).
  std::int64_t point_rounds_measured = 0;
  std::int64_t settles_extended = 0;
  std::string cost_model;  // how the wave reservations were estimated
  // Crash snapshots of the file taken by this run (store/acquisition_file.h) and rank 0's seconds
  // copying (every rank waits meanwhile); `restored`: what this run's start replaced by the
  // snapshot, empty when nothing.
  int snapshots = 0;
  double snapshot_s = 0;
  std::string restored;
};

// What one rank measures in a wave at most: a round is measured and committed in waves of
// consecutive cells, so a kill (a time limit, a preemption) loses at most one wave's work
// (docs/design.md). The points bound the memory a wave holds; the seconds (the cells' predicted
// cost) bound the work lost, which at the H200's 0.3-1.4 s per point-round 256 points did not.
inline constexpr std::int64_t kWavePoints = 256;
inline constexpr double kWaveSeconds = 60;

// A cell's share of a wave: the larger of its points over kWavePoints and its predicted seconds
// (0 when unknown) over kWaveSeconds.
[[nodiscard]] double wave_load(std::int64_t points, double predicted_seconds);

// The waves of a round: boundaries 0 = b0 < b1 < ... < bk = cell count of consecutive ranges of
// cells, where cell c belongs to rank c % ranks, each range holding a load of at most 1 of any
// one rank's cells (a larger cell is a wave of its own). Every rank cuts the same waves from the
// same loads; a resumed run may cut others, as a cell round, not a wave, is what is kept.
[[nodiscard]] std::vector<std::size_t> wave_bounds(const std::vector<double>& cell_load, int ranks);

// A wave reserves its predicted cost times kReservationMargin against the budget: costs drift
// between waves.
inline constexpr double kReservationMargin = 1.25;
// The factor `--time-limit` applies to the next wave's predicted wall time: kReservationMargin
// until this run has measured a wave, then the largest overrun of its last kTimeLimitWaves waves,
// but at least kTimeLimitMinMargin. A wave predicted at least as long as the next counts as its
// ratio (measured / predicted); a shorter one as its seconds over, added to the next wave's
// prediction: a short wave's ratio is mostly fixed costs and the points it happened to hold, and
// scaled up to a long wave it stopped calls hundreds of seconds early (2.30 from a short wave
// against a 105 s prediction; 2.56 from the wave where the capped settle began, after the costs
// had caught up: docs/cli.md). The predictions follow the measured costs after each wave, so only
// the recent waves say how far off they still are.
inline constexpr double kTimeLimitMinMargin = 1.05;
inline constexpr std::size_t kTimeLimitWaves = 4;
struct WaveWall {
  double predicted_s = 0, measured_s = 0;
};
[[nodiscard]] double time_limit_margin(const std::vector<WaveWall>& waves, double next_predicted_s);

// Collective over `comm`. Throws on bad input before any measurement; measurement errors are
// thrown on the rank that saw them (the caller aborts the job).
AcquireSummary acquire(MPI_Comm comm, const JobSpec& job, const AcquireOptions& options);

}  // namespace moe
