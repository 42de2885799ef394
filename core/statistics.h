// Statistics of stored samples: medians, median of per-round medians, the B/2B bank control.
#pragma once

#include <optional>
#include <span>
#include <vector>

namespace moe {

inline constexpr double kBankTolerance = 0.03;  // B vs 2B pooled medians (docs/measurement.md)

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

struct BankControl {
  double median_b_us;
  double median_2b_us;
  double relative_change;  // |2B - B| / B
  bool pass;               // relative_change <= kBankTolerance
};
[[nodiscard]] BankControl bank_control(std::span<const double> b_arm,
                                       std::span<const double> b2_arm);

}  // namespace moe
