#include "core/statistics.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

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

namespace {

// Medians of consecutive chunks of `chunk` values (the last may be shorter).
std::vector<double> chunk_medians(const std::vector<double>& v, std::size_t chunk) {
  std::vector<double> out;
  for (std::size_t i = 0; i < v.size(); i += chunk)
    out.push_back(median({v.begin() + static_cast<std::ptrdiff_t>(i),
                          v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size(), i + chunk))}));
  return out;
}

}  // namespace

BankControl bank_control(std::span<const ArmChunks> rounds) {
  std::vector<double> changes;
  double run_spread = 0;
  for (const auto& r : rounds) {
    const std::size_t chunk = std::max<std::size_t>(r.chunk, 1);
    const auto b = chunk_medians(r.b, chunk), b2 = chunk_medians(r.b2, chunk);
    for (const auto* arm : {&b, &b2})
      if (!arm->empty()) {
        const auto [lo, hi] = std::minmax_element(arm->begin(), arm->end());
        run_spread = std::max(run_spread, *hi / *lo - 1);
      }
    // 2B chunk c ran between B chunks c and c + 1.
    for (std::size_t c = 0; c < b2.size() && c < b.size(); ++c) {
      const double beside = c + 1 < b.size() ? 0.5 * (b[c] + b[c + 1]) : b[c];
      changes.push_back((b2[c] - beside) / beside);
    }
  }
  if (changes.empty())
    throw std::invalid_argument("bank control: no round has both arms' forwards");
  BankControl c{};
  c.relative_change = std::fabs(median(changes));
  c.pass = c.relative_change <= kBankTolerance;
  c.run_spread = run_spread;
  return c;
}

}  // namespace moe
