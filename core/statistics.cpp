#include "core/statistics.h"

#include <algorithm>
#include <cmath>

namespace moe {

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  const auto mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  if (v.size() % 2) return v[mid];
  const double hi = v[mid];
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lo + hi);
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto i = static_cast<std::size_t>(pos);
  if (i + 1 >= v.size()) return v.back();
  return v[i] + (pos - static_cast<double>(i)) * (v[i + 1] - v[i]);
}

std::optional<Spread> spread(const std::vector<double>& v) {
  if (v.empty()) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return Spread{*lo, median(v), *hi};
}

std::optional<double> median_of_medians(std::span<const double> round_medians) {
  if (round_medians.empty()) return std::nullopt;
  return median({round_medians.begin(), round_medians.end()});
}

BankControl bank_control(std::span<const double> b_arm, std::span<const double> b2_arm) {
  BankControl c{};
  c.median_b_us = median({b_arm.begin(), b_arm.end()});
  c.median_2b_us = median({b2_arm.begin(), b2_arm.end()});
  c.relative_change = std::fabs(c.median_2b_us - c.median_b_us) / c.median_b_us;
  c.pass = c.relative_change <= kBankTolerance;
  return c;
}

}  // namespace moe
