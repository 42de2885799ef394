// Quality summary of an acquisition file: completion per cell and the B/2B weight-bank control
// per expert point, pooled over complete rounds (docs/measurement.md).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bundle/sanity.h"
#include "store/acquisition_file.h"

namespace moe {

struct PointResult {
  GridPoint point;
  std::optional<double> time_us;          // median of per-round medians (experts: of the 2B arm);
                                          // nullopt if no complete round
  std::optional<double> relative_change;  // experts only: the B/2B control (core/statistics.h)
  bool bank_check_passed = true;
  std::optional<double> run_spread;  // experts only: how far a run moved (core/statistics.h)
  // Hash of the ordered activity (kernel) names of the point's forwards in its latest complete
  // round: which kernels ran (the protocol requires every forward of a point to run the same).
  std::optional<std::uint64_t> activities;
  // Median over complete rounds of the mean SM clock the device counted over the point's forwards
  // (PointMedian::sm_clock_mean_mhz); nullopt where no round recorded one.
  std::optional<double> sm_clock_mean_mhz;
  // The devices that measured its complete rounds (positions in hardware_identity's devices,
  // ascending); empty where no round recorded its run (a file written before they did).
  std::vector<int> devices;
  // Per device of `devices`, the median of the round medians it measured (time_us's, per device):
  // a point measured on two devices compares them (anchors, docs/measurement.md#fidelity).
  std::map<int, double> time_us_by_device;
};

struct CellSummary {
  std::string id;
  std::string component;
  int rounds_planned = 0;
  int rounds_complete = 0;
  std::vector<PointResult> points;
  int checked_points = 0;
  int failed_points = 0;
  double max_relative_change = 0;
  int unsteady_points = 0;  // experts points whose run moved (unsteady_run, core/statistics.h)
  double max_run_spread = 0;
  [[nodiscard]] bool complete() const { return rounds_complete == rounds_planned; }
};

[[nodiscard]] std::vector<CellSummary> summarize(const StoredAcquisition& acq);

// What `inspect` and `acquire` add after the B/2B figures where runs moved (empty where none):
// ", unsteady runs N (moved more than 3 %, at most X %)".
[[nodiscard]] std::string unsteady_runs(int unsteady_points, double max_run_spread);

// The sanity block of an acquisition: completion ratios, per-point times, raw samples, activity
// counters, collective bandwidths, and identical tables across cells.
[[nodiscard]] SanityBlock sanity_of(const StoredAcquisition& acq,
                                    const std::vector<CellSummary>& cells);

}  // namespace moe
