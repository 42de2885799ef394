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

// Untimed forwards before a point's warm-up (docs/measurement.md#protocol): at least `ms`, and
// `capped_ms` in all when the power or thermal policy held the clocks down meanwhile (only when
// ms > 0).
struct Settle {
  double ms = 0;
  double capped_ms = 0;
};

struct CellRoundSpec {
  WorkloadSpec base;  // geometry, target, component; point and seed set per point
  std::vector<GridPoint> points;
  int round = 0;
  int iterations = 1;
  int weight_banks = 2;    // B (experts only)
  std::uint64_t seed = 0;  // derives point order and stimuli
  Settle settle;           // before each point's warm-up (settle_forwards)
};

struct ForwardRun {
  std::vector<ForwardRecord> records;  // one per forward when timed, else empty
  std::uint64_t route_errors = 0;      // forwards after which the sticky route flag was raised
  std::optional<double> sm_clock_mhz;  // the device's mean SM clock over the forwards, if stamped
};

// The device's clock stamp (Backend::clock_stamp), or none.
using ClockStamps = std::function<std::optional<ClockStamp>()>;

// One stretch of a run: `count` forwards cycling over `banks` weight banks, each bracketed by the
// timer when `timed`.
struct ForwardSegment {
  int count = 0;
  int banks = 1;
  bool timed = false;
};

// The timing loop of the table measurements (acquire, validate, bench): the segments'
// forwards back to back, the route flag read after every forward, outside the bracket; then one
// synchronize and one flush of the timer, whose records (the timed forwards', in order) the run
// returns. No flush between segments: a flush leaves the device idle, and under the power cap
// idle gaps can change the clock the forwards run at (docs/measurement.md#protocol). With `stamps`,
// the device's clock is stamped before the first forward and after the last one's route flag,
// before the flush, so `sm_clock_mhz` covers the forwards and not the flush.
[[nodiscard]] ForwardRun run_forwards(Workload& w, ForwardTimer& timer,
                                      std::span<const ForwardSegment> segments,
                                      const std::string& label, const ClockStamps& stamps = {});
// A run of one segment.
[[nodiscard]] ForwardRun run_forwards(Workload& w, ForwardTimer& timer, int count, int banks,
                                      bool timed, const std::string& label,
                                      const ClockStamps& stamps = {});

// Nanoseconds the device's power and thermal policies have held its clocks down so far (a
// counter), or nullopt where the device does not say.
using HeldDownClock = std::function<std::optional<std::uint64_t>()>;
// The counter of `backend`'s device, from its live state (NVML on GPUs).
[[nodiscard]] HeldDownClock held_down_clock(const Backend& backend);
// `backend`'s clock stamps, for run_forwards.
[[nodiscard]] ClockStamps clock_stamps(Backend& backend);

struct SettleRun {
  std::uint64_t route_errors = 0;
  bool extended = false;  // the clocks were held down during settle.ms: it ran to capped_ms
  double ms = 0;          // wall time of the whole settle
};

// Untimed forwards, in batches cycling over `banks`, until at least `settle.ms` of wall time has
// passed, and on to `settle.capped_ms` when `held_down` advanced meanwhile: the device under
// sustained load (its power and clock governors settled, as in serving) before a point is timed
// (docs/measurement.md#protocol). Nothing runs when settle.ms <= 0.
[[nodiscard]] SettleRun settle_forwards(Workload& w, ForwardTimer& timer, int banks,
                                        const Settle& settle, const HeldDownClock& held_down,
                                        const std::string& label);

// Measures every point of one cell round in a seeded random order. `on_point` is called after
// each point (progress). Throws MeasurementError on a failed correctness check, an activity list
// that differs from the point's first forward, dropped records or a raised route flag.
[[nodiscard]] CellRound measure_cell_round(Backend& backend, ForwardTimer& timer,
                                           const CellRoundSpec& spec,
                                           const std::function<void()>& on_point = {});

}  // namespace moe
