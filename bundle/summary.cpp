#include "bundle/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "bundle/hardware.h"
#include "core/statistics.h"

namespace moe {

namespace {

// One round's `experts` forwards per point, each arm's in the order they ran (the `forward`
// index), with the chunk the arms alternated in: one cycle of the 2B arm's banks
// (ranks/protocol.cpp).
std::map<std::size_t, ArmChunks> round_arms(const CellRound& r) {
  std::map<std::size_t, std::vector<const Sample*>> by_point;
  for (const auto& smp : r.samples) by_point[static_cast<std::size_t>(smp.point)].push_back(&smp);
  std::map<std::size_t, ArmChunks> out;
  for (auto& [p, samples] : by_point) {
    std::sort(samples.begin(), samples.end(),
              [](const Sample* a, const Sample* b) { return a->forward < b->forward; });
    ArmChunks& a = out[p];
    std::int32_t banks_2b = 0;
    for (const Sample* smp : samples) {
      const bool b_arm = smp->arm == static_cast<std::int8_t>(Arm::banks);
      (b_arm ? a.b : a.b2).push_back(smp->value_us);
      if (!b_arm) banks_2b = std::max(banks_2b, smp->bank + 1);
    }
    a.chunk = static_cast<std::size_t>(banks_2b);
  }
  return out;
}

}  // namespace

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
    std::vector<std::vector<double>> round_medians(n), clocks(n);
    std::vector<std::vector<ArmChunks>> arms(n);  // experts: per point, per round
    std::vector<std::optional<std::uint64_t>> activities(n);
    std::set<int> devices;  // a round measures all of its cell's points on one device
    std::vector<std::map<int, std::vector<double>>> device_medians(n);
    for (const auto& r : cell.rounds) {
      const auto d = device_of.find({r.run, r.rank});
      if (d != device_of.end()) devices.insert(d->second);
      for (const auto& smp : r.samples)
        activities.at(static_cast<std::size_t>(smp.point)) = smp.name_hash;
      // The published value of `experts` is the 2B arm's (docs/measurement.md), else the point's.
      for (const auto& m : r.medians) {
        const auto p = static_cast<std::size_t>(m.point);
        round_medians.at(p).push_back(experts ? m.median_2b_us : m.median_us);
        if (d != device_of.end())
          device_medians.at(p)[d->second].push_back(round_medians[p].back());
        if (!std::isnan(m.sm_clock_mean_mhz)) clocks.at(p).push_back(m.sm_clock_mean_mhz);
      }
      if (!experts) continue;
      for (auto& [p, chunks] : round_arms(r)) arms.at(p).push_back(std::move(chunks));
    }
    for (std::size_t p = 0; p < n; ++p) {
      PointResult pr;
      pr.point = cell.info.points[p];
      pr.time_us = median_of_medians(round_medians[p]);
      pr.activities = activities[p];
      pr.sm_clock_mean_mhz = median_of_medians(clocks[p]);
      pr.devices.assign(devices.begin(), devices.end());
      for (const auto& [device, medians] : device_medians[p])
        if (const auto t = median_of_medians(medians)) pr.time_us_by_device[device] = *t;
      if (experts && std::any_of(arms[p].begin(), arms[p].end(), [](const ArmChunks& a) {
            return !a.b.empty() && !a.b2.empty();
          })) {
        const auto c = bank_control(arms[p]);
        pr.relative_change = c.relative_change;
        pr.bank_check_passed = c.pass;
        ++s.checked_points;
        s.failed_points += c.pass ? 0 : 1;
        s.max_relative_change = std::max(s.max_relative_change, c.relative_change);
        pr.run_spread = c.run_spread;
        s.unsteady_points += unsteady_run(c.run_spread) ? 1 : 0;
        s.max_run_spread = std::max(s.max_run_spread, c.run_spread);
      }
      s.points.push_back(pr);
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string unsteady_runs(int unsteady_points, double max_run_spread) {
  if (unsteady_points == 0) return {};
  char text[128];
  std::snprintf(text, sizeof(text), ", unsteady runs %d (moved more than %.0f %%, at most %.1f %%)",
                unsteady_points, kSteadyRunSpread * 100, max_run_spread * 100);
  return text;
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
