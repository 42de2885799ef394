// Per-forward timing. GPU backends use CUPTI activity records (docs/measurement.md): the value of a
// forward is the sum of the durations of the unique device activities attributed to it. The CPU
// backend uses a monotonic host clock, the staircase_model test backend its modeled clock. One
// timer object per process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moe {

struct ForwardRecord {
  double value_us = 0;
  std::int32_t activity_count = 0;
  std::uint64_t name_hash = 0;  // hash of the ordered kernel/activity name list
  std::vector<std::pair<std::string, double>> activities;  // (name, µs) in start order
};

class ForwardTimer {
 public:
  virtual ~ForwardTimer() = default;
  [[nodiscard]] virtual std::string method()
      const = 0;  // host_clock | cupti_activity | modeled_clock
  // Brackets one forward. Calls must not nest. The host clock names its single activity
  // `label`; CUPTI records the device activities' own names.
  virtual void begin(std::string_view label = "host_forward") = 0;
  virtual void end() = 0;
  // Completes every bracketed forward since the last collect, in begin order. The caller has
  // synchronized the device first.
  [[nodiscard]] virtual std::vector<ForwardRecord> collect() = 0;
  // Records lost by the tracer so far; must stay zero.
  [[nodiscard]] virtual std::uint64_t dropped() const = 0;
};

[[nodiscard]] std::unique_ptr<ForwardTimer> make_host_clock_timer();
// The staircase_model backend's modeled time (kernels/staircase_backend.h).
[[nodiscard]] std::unique_ptr<ForwardTimer> make_modeled_clock_timer();
// The timer a backend's timing() names (host_clock | cupti_activity | modeled_clock).
[[nodiscard]] std::unique_ptr<ForwardTimer> make_forward_timer(const std::string& timing);
// CUPTI activity tracer; throws when the build has no CUDA.
[[nodiscard]] std::unique_ptr<ForwardTimer> make_cupti_timer();

}  // namespace moe
