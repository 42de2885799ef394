#include "io/summary.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "io/statistics.h"

namespace moe {

std::vector<CellSummary> summarize(const StoredAcquisition& acq) {
  std::vector<CellSummary> out;
  for (const auto& cell : acq.cells) {
    CellSummary s;
    s.id = cell.info.id;
    s.component = nlohmann::json::parse(cell.info.json).at("component").get<std::string>();
    s.rounds_planned = cell.info.rounds;
    s.rounds_complete = static_cast<int>(cell.rounds.size());
    const bool experts = s.component == "experts";
    const auto n = cell.info.points.size();
    std::vector<std::vector<double>> round_medians(n), b_arm(n), b2_arm(n);
    for (const auto& r : cell.rounds) {
      for (const auto& m : r.medians)
        round_medians.at(static_cast<std::size_t>(m.point)).push_back(m.median_us);
      if (!experts) continue;
      for (const auto& smp : r.samples) {
        auto& arm = smp.arm == static_cast<std::int8_t>(Arm::banks) ? b_arm : b2_arm;
        arm.at(static_cast<std::size_t>(smp.point)).push_back(smp.value_us);
      }
    }
    for (std::size_t p = 0; p < n; ++p) {
      PointResult pr;
      pr.point = cell.info.points[p];
      pr.time_us = median_of_medians(round_medians[p]);
      if (experts && !b_arm[p].empty() && !b2_arm[p].empty()) {
        const auto c = bank_control(b_arm[p], b2_arm[p]);
        pr.relative_change = c.relative_change;
        pr.bank_check_passed = c.pass;
        ++s.checked_points;
        s.failed_points += c.pass ? 0 : 1;
        s.max_relative_change = std::max(s.max_relative_change, c.relative_change);
      }
      s.points.push_back(pr);
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace moe
