#include "bundle/summary.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "bundle/hardware.h"
#include "core/statistics.h"

namespace moe {

std::vector<CellSummary> summarize(const StoredAcquisition& acq) {
  std::vector<CellSummary> out;
  const auto device_of = round_devices(acq);
  for (const auto& cell : acq.cells) {
    CellSummary s;
    s.id = cell.info.id;
    s.component = nlohmann::json::parse(cell.info.json).at("component").get<std::string>();
    s.rounds_planned = cell.info.rounds;
    s.rounds_complete = static_cast<int>(cell.rounds.size());
    const bool experts = s.component == "experts";
    const auto n = cell.info.points.size();
    std::vector<std::vector<double>> round_medians(n), b_arm(n), b2_arm(n), clocks(n);
    std::vector<std::optional<std::uint64_t>> activities(n);
    std::set<int> devices;  // a round measures all of its cell's points on one device
    for (const auto& r : cell.rounds) {
      if (const auto d = device_of.find({r.run, r.rank}); d != device_of.end())
        devices.insert(d->second);
      for (const auto& smp : r.samples)
        activities.at(static_cast<std::size_t>(smp.point)) = smp.name_hash;
      // The published value of `experts` is the 2B arm's (docs/measurement.md), else the point's.
      for (const auto& m : r.medians) {
        const auto p = static_cast<std::size_t>(m.point);
        round_medians.at(p).push_back(experts ? m.median_2b_us : m.median_us);
        if (!std::isnan(m.sm_clock_mean_mhz)) clocks.at(p).push_back(m.sm_clock_mean_mhz);
      }
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
      pr.activities = activities[p];
      pr.sm_clock_mean_mhz = median_of_medians(clocks[p]);
      pr.devices.assign(devices.begin(), devices.end());
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

SanityBlock sanity_of(const StoredAcquisition& acq, const std::vector<CellSummary>& cells) {
  SanityBlock sanity;
  for (const auto& c : cells) {
    sanity.add("completion",
               c.rounds_planned ? static_cast<double>(c.rounds_complete) / c.rounds_planned : NAN,
               SanityBlock::Kind::ratio);
    std::vector<double> table;
    for (const auto& p : c.points) {
      if (p.time_us) sanity.add("time_us", *p.time_us);
      table.push_back(p.time_us.value_or(NAN));
    }
    sanity.add_table(c.id, table);
  }
  for (const auto& c : acq.cells)
    for (const auto& r : c.rounds)
      for (const auto& s : r.samples) {
        sanity.add("sample_us", s.value_us);
        sanity.add("activity_count", s.activity_count, SanityBlock::Kind::counter);
      }
  for (const auto& c : acq.collectives)
    for (const auto& r : c.rows) sanity.add("collective_busbw_gbps", r.busbw_gbps);
  return sanity;
}

}  // namespace moe
