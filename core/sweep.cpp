#include "core/sweep.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <stdexcept>
#include <string>

namespace moe {

std::vector<std::int64_t> sweep_tokens(std::int64_t lo, std::int64_t hi, int count) {
  if (lo < 1 || hi < lo || count < 2 || hi - lo + 1 < count)
    throw std::invalid_argument("sweep: need 1 <= lo < hi with at least `count` integers between");
  std::vector<std::int64_t> out = {lo};
  // Each point is the geometric step from the last one to `hi` over the points left, at least
  // one more than the last (the low end), leaving room for the rest; the last point is `hi`.
  for (int left = count - 1; left > 0; --left) {
    const auto prev = static_cast<double>(out.back());
    const auto next = std::llround(prev * std::pow(static_cast<double>(hi) / prev, 1.0 / left));
    out.push_back(std::clamp<std::int64_t>(next, out.back() + 1, hi - (left - 1)));
  }
  return out;
}

SweepCheck check_sweep(const std::vector<SweepPoint>& points, double monotone, double cliff) {
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (!(points[i].time_us > 0) || !(points[i].floor_us > 0))
      throw std::invalid_argument("sweep: N=" + std::to_string(points[i].tokens) +
                                  " has no positive time and floor");
    if (i > 0 && points[i].tokens <= points[i - 1].tokens)
      throw std::invalid_argument("sweep: points must be in increasing token order");
  }
  SweepCheck c;
  for (std::size_t j = 0; j < points.size(); ++j)
    for (std::size_t i = 0; i < j; ++i)
      if (points[j].time_us < monotone * points[i].time_us)
        c.drops.push_back(
            {points[i].tokens, points[j].tokens, points[i].time_us, points[j].time_us});
  std::sort(c.drops.begin(), c.drops.end(),
            [](const auto& a, const auto& b) { return a.t2 / a.t1 < b.t2 / b.t1; });
  for (std::size_t i = 1; i < points.size(); ++i) {
    const auto& a = points[i - 1];
    const auto& b = points[i];
    SweepCheck::Cliff step{a.tokens, b.tokens, b.time_us / a.time_us, b.floor_us / a.floor_us};
    if (step.excess() > cliff) c.cliffs.push_back(step);
  }
  return c;
}

void print_sweep(const std::vector<SweepPoint>& points, const SweepCheck& check, std::ostream& os) {
  const auto flags = os.flags();
  const auto precision = os.precision();
  os << "       N  rows/expert        us    floor  ratio  configuration\n" << std::fixed;
  for (const auto& p : points)
    os << std::setw(8) << p.tokens << std::setw(13) << std::setprecision(1) << p.rows_per_expert
       << std::setw(10) << p.time_us << std::setw(9) << p.floor_us << std::setw(7)
       << std::setprecision(2) << p.time_us / p.floor_us << "  " << p.configuration << "\n";
  os << "  monotone (every N2 > N1 at least 0.97 x time(N1)): "
     << (check.drops.empty() ? "yes" : "NO, " + std::to_string(check.drops.size()) + " pairs")
     << "\n";
  for (std::size_t i = 0; i < std::min<std::size_t>(5, check.drops.size()); ++i) {
    const auto& d = check.drops[i];
    os << std::setprecision(1) << "    N=" << d.n2 << " takes " << d.t2 << " us, "
       << 100 * (1 - d.t2 / d.t1) << "% less than N=" << d.n1 << " (" << d.t1 << " us)\n";
  }
  os << "  cliffs (a step more than 10% beyond its floor ratio): "
     << (check.cliffs.empty() ? "none" : std::to_string(check.cliffs.size())) << "\n";
  const auto at = [&](std::int64_t tokens) -> const SweepPoint& {
    return *std::find_if(points.begin(), points.end(),
                         [&](const SweepPoint& p) { return p.tokens == tokens; });
  };
  for (const auto& c : check.cliffs) {
    const auto &a = at(c.n1), &b = at(c.n2);
    os << std::setprecision(2) << "    N=" << c.n1 << " -> " << c.n2 << ": time x" << c.time_ratio
       << ", floor x" << c.floor_ratio << " (+" << std::setprecision(0) << 100 * c.excess()
       << "%); rows/expert " << std::setprecision(1) << a.rows_per_expert << " -> "
       << b.rows_per_expert;
    if (a.configuration != b.configuration)
      os << "; " << a.configuration << " -> " << b.configuration;
    os << "\n";
  }
  os.flags(flags);
  os.precision(precision);
}

}  // namespace moe
