// The measurement protocol of one cell round (docs/measurement.md): fresh workload per point,
// correctness before timing, warm-up, timed forwards, weight-bank arms for `experts`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/seed.h"
#include "core/statistics.h"
#include "kernels/workload.h"
#include "ranks/forward_timer.h"
#include "store/records.h"

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
  double settle_ms = 0;    // untimed forwards per point before its warm-up (settle_forwards)
};

struct ForwardRun {
  std::vector<ForwardRecord> records;  // one per forward when timed, else empty
  std::uint64_t route_errors = 0;      // forwards after which the sticky route flag was raised
};

// The timing loop of every measurement (acquire, bench, the co-location gate): `count` forwards
// cycling over `banks` weight banks, each bracketed by the timer when `timed`; the route flag is
// read after every forward, outside the bracket.
[[nodiscard]] ForwardRun run_forwards(Workload& w, ForwardTimer& timer, int count, int banks,
                                      bool timed, const std::string& label);

// Untimed forwards, in batches cycling over `banks`, until at least `ms` of wall time has
// passed: the device under sustained load (its power and clock governors settled, as in serving)
// before a point is timed (docs/measurement.md#protocol). Returns the route-flag count (no
// records); nothing runs when `ms` <= 0.
[[nodiscard]] ForwardRun settle_forwards(Workload& w, ForwardTimer& timer, int banks, double ms,
                                         const std::string& label);

// Measures every point of one cell round in a seeded random order. `on_point` is called after
// each point (progress). Throws MeasurementError on a failed correctness check, an activity list
// that differs from the point's first forward, dropped records or a raised route flag.
[[nodiscard]] CellRound measure_cell_round(Backend& backend, ForwardTimer& timer,
                                           const CellRoundSpec& spec,
                                           const std::function<void()>& on_point = {});

}  // namespace moe
