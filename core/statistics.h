// Statistics of stored samples: medians, median of per-round medians, the B/2B bank control.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace moe {

inline constexpr double kBankTolerance = 0.03;  // B vs 2B, chunk by chunk (docs/measurement.md)
// A point whose chunks of one arm moved more than this within a run is reported as unsteady.
inline constexpr double kSteadyRunSpread = 0.03;
[[nodiscard]] inline bool unsteady_run(double run_spread) {
  return run_spread > kSteadyRunSpread;
}

[[nodiscard]] double median(std::vector<double> v);
// The q-quantile (0 <= q <= 1) with linear interpolation between order statistics (the common
// "type 7" definition of numpy and R); NaN for an empty vector.
[[nodiscard]] double quantile(std::vector<double> v, double q);
// Smallest, median and largest value (a spread of per-point clocks); nullopt for none.
struct Spread {
  double min = 0, median = 0, max = 0;
};
[[nodiscard]] std::optional<Spread> spread(const std::vector<double>& v);
// Median of per-round medians; nullopt when there are none yet.
[[nodiscard]] std::optional<double> median_of_medians(std::span<const double> round_medians);

// One round of an `experts` point's timed forwards, each arm's in the order they ran: the arms
// alternated in chunks of `chunk` forwards each, a B chunk first (ranks/protocol.cpp).
struct ArmChunks {
  std::vector<double> b, b2;
  std::size_t chunk = 0;
};

// The B/2B weight-bank control. A 2B arm slower because B's weights stay partly in L2 is slower
// in every chunk, so each 2B chunk's median is compared with the mean of the B chunks beside it
// (before and after) and the median of those changes over all rounds is the verdict. Comparing
// the arms' pooled medians instead fails points whose clock stepped once mid-run (the power cap:
// the later chunks of both arms run slower, and which arm's median lands on which level depends
// only on where the step fell; docs/measurement.md, "Protocol").
struct BankControl {
  double relative_change;  // |median over 2B chunks of (2B chunk / its B neighbours - 1)|
  bool pass;               // relative_change <= kBankTolerance
  // How far one arm's chunks moved within a run, which the control passes (both arms move
  // alike): the largest chunk median over the smallest, less 1, of either arm in any round.
  double run_spread;
};
// Throws std::invalid_argument when no round has forwards of both arms.
[[nodiscard]] BankControl bank_control(std::span<const ArmChunks> rounds);

}  // namespace moe
