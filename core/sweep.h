// The token sweep of `harness bench experts --sweep` (docs/native-backend.md#the-sweep) and the
// two checks a table built from it needs: time close to monotone in N, and no step between
// neighbouring points that the extra bytes and flops do not explain.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace moe {

// `count` distinct token counts from `lo` to `hi` (both included), geometrically spaced where the
// integers allow (consecutive at the low end).
[[nodiscard]] std::vector<std::int64_t> sweep_tokens(std::int64_t lo, std::int64_t hi, int count);

struct SweepPoint {
  std::int64_t tokens = 0;
  double time_us = 0;
  double floor_us = 0;         // max(bytes / bandwidth, flops / rate) at these tokens
  double rows_per_expert = 0;  // local assignments / active experts
  std::string configuration;   // what ran (the backend's kernel configuration)
};

struct SweepCheck {
  struct Drop {  // N2 > N1 measured faster than `monotone` x time(N1)
    std::int64_t n1 = 0, n2 = 0;
    double t1 = 0, t2 = 0;
  };
  struct Cliff {  // neighbouring points whose time ratio exceeds the floor ratio by > `cliff`
    std::int64_t n1 = 0, n2 = 0;
    double time_ratio = 0, floor_ratio = 0;
    [[nodiscard]] double excess() const { return time_ratio / floor_ratio - 1.0; }
  };
  std::vector<Drop> drops;    // every such pair, worst (smallest t2 / t1) first
  std::vector<Cliff> cliffs;  // in token order
  [[nodiscard]] bool passed() const { return drops.empty() && cliffs.empty(); }
};

// Points in increasing token order; throws std::invalid_argument otherwise or for a non-positive
// time or floor.
[[nodiscard]] SweepCheck check_sweep(const std::vector<SweepPoint>& points, double monotone = 0.97,
                                     double cliff = 0.10);

// The sweep as `harness bench experts --sweep` prints it: every point with its rows per expert,
// ratio to the floor and configuration, then the checks (the default thresholds), each cliff with
// the rows per expert and, where it changed, the configuration at its two ends: what stepped.
void print_sweep(const std::vector<SweepPoint>& points, const SweepCheck& check, std::ostream& os);

}  // namespace moe
