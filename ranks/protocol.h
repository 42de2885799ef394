// The measurement protocol of one cell round (SPEC §4): fresh workload per point, correctness
// before timing, warm-up, timed forwards, weight-bank arms for `experts`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include "store/records.h"
#include "core/statistics.h"
#include "kernels/workload.h"
#include "ranks/forward_timer.h"

namespace moe {

class MeasurementError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CellRoundSpec {
  WorkloadSpec base;  // geometry, target, component; point and seed set per point
  std::vector<GridPoint> points;
  int round = 0;
  int iterations = 1;
  int weight_banks = 2;    // B (experts only)
  std::uint64_t seed = 0;  // derives point order and stimuli
};

// Measures every point of one cell round in a seeded random order. `on_point` is called after
// each point (progress). Throws MeasurementError on a failed correctness check, an activity list
// that differs from the point's first forward, dropped records or a raised route flag.
[[nodiscard]] CellRound measure_cell_round(Backend& backend, ForwardTimer& timer,
                                           const CellRoundSpec& spec,
                                           const std::function<void()>& on_point = {});

// splitmix64 mixing of several integers: deterministic seeds for rounds, cells and points.
[[nodiscard]] std::uint64_t mix_seed(std::initializer_list<std::uint64_t> parts);

}  // namespace moe
