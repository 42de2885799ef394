#include "bundle/sanity.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

namespace moe {

void SanityBlock::add(const std::string& family, double v, Kind kind) {
  auto& f = families_[family];
  f.kind = kind;
  if (!std::isfinite(v)) {
    ++f.missing;
    return;
  }
  f.min = f.finite ? std::min(f.min, v) : v;
  f.max = f.finite ? std::max(f.max, v) : v;
  ++f.finite;
  f.values.push_back(v);
  if ((kind == Kind::ratio && (v < 0 || v > 1)) || (kind == Kind::counter && v < 0))
    ++f.out_of_range;
}

void SanityBlock::add_table(const std::string& cell, std::vector<double> values) {
  tables_[cell] = std::move(values);
}

void SanityBlock::flag(std::string problem) {
  flags_.push_back(std::move(problem));
}

std::vector<std::string> SanityBlock::red_flags() const {
  std::vector<std::string> flags = flags_;
  for (const auto& [name, f] : families_) {
    if (f.out_of_range)
      flags.push_back(name + ": " + std::to_string(f.out_of_range) +
                      (f.kind == Kind::ratio ? " ratios outside [0,1]" : " negative counters"));
    if (f.missing)
      flags.push_back(name + ": " + std::to_string(f.missing) + " missing or non-finite values");
  }
  // A copied table has many values; a refinement stage's one- or two-point cells can agree by
  // the timer's resolution alone.
  constexpr std::size_t kMinComparedValues = 4;
  for (auto a = tables_.begin(); a != tables_.end(); ++a)
    for (auto b = std::next(a); b != tables_.end(); ++b)
      if (a->second.size() >= kMinComparedValues && a->second == b->second)
        flags.push_back("identical results in different cells: " + a->first + " and " + b->first);
  return flags;
}

nlohmann::json SanityBlock::to_json() const {
  nlohmann::json fams = nlohmann::json::object();
  for (const auto& [name, f] : families_) {
    const std::set<double> distinct(f.values.begin(), f.values.end());
    fams[name] = {{"finite", f.finite},
                  {"missing", f.missing},
                  {"min", f.finite ? f.min : NAN},
                  {"max", f.finite ? f.max : NAN},
                  {"distinct", distinct.size()}};
  }
  return {{"families", fams}, {"red_flags", red_flags()}};
}

std::string SanityBlock::to_text() const {
  std::ostringstream os;
  os << "sanity:\n";
  for (const auto& [name, f] : families_) {
    const std::set<double> distinct(f.values.begin(), f.values.end());
    os << "  " << name << ": finite " << f.finite << ", missing " << f.missing;
    if (f.finite) os << ", min " << f.min << ", max " << f.max;
    os << ", distinct " << distinct.size() << "\n";
  }
  const auto flags = red_flags();
  if (flags.empty()) os << "  red flags: none\n";
  for (const auto& fl : flags) os << "  RED FLAG: " << fl << "\n";
  return os.str();
}

}  // namespace moe
