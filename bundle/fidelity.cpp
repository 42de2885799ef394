#include "bundle/fidelity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "core/contract.h"
#include "core/planner.h"
#include "core/statistics.h"
#include "lookup/tables.h"

namespace moe {

using nlohmann::json;

namespace {

// A point as the fidelity blocks write it: [N, A, M].
json point_json(const GridPoint& p) {
  return json::array({p.tokens, p.activated, p.assignments});
}

using DevicePairs = std::map<std::pair<int, int>, std::vector<double>>;

// Per pair of devices, named by `first` and `second`: the count and the signed median.
json device_pairs_json(const DevicePairs& pairs, const char* first, const char* second) {
  json out = json::array();
  for (const auto& [devices, differences] : pairs)
    out.push_back({{first, devices.first},
                   {second, devices.second},
                   {"count", differences.size()},
                   {"median_signed_relative_difference", quantile(differences, 0.5)}});
  return out;
}

// The re-measured points split by whether both runs were on the same device, and per pair of
// devices (grid's, held-out's) the signed median of grid - held-out: the devices' offset, which
// interpolating across them carries into the table. Null where no point's devices are known.
json repeatability_by_device(const std::vector<RemeasuredPoint>& remeasured) {
  std::vector<double> same, across;
  DevicePairs pairs;
  for (const auto& r : remeasured) {
    if (r.held_out_device < 0 || r.grid_device < 0) continue;
    (r.held_out_device == r.grid_device ? same : across).push_back(r.relative_difference());
    if (r.held_out_device != r.grid_device)
      pairs[{r.grid_device, r.held_out_device}].push_back(r.signed_difference());
  }
  if (same.empty() && across.empty()) return nullptr;
  const auto stats = [](const std::vector<double>& v) {
    json j = {{"count", v.size()}};
    if (!v.empty()) {
      j["median_abs_relative_difference"] = quantile(v, 0.5);
      j["max_abs_relative_difference"] = *std::max_element(v.begin(), v.end());
    }
    return j;
  };
  return {{"same_device", stats(same)},
          {"across_devices", stats(across)},
          {"device_pairs", device_pairs_json(pairs, "grid_device", "held_out_device")}};
}

}  // namespace

std::optional<double> AnchorPoint::clock_offset() const {
  if (!row_clock_mhz || !anchor_clock_mhz || *row_clock_mhz <= 0) return std::nullopt;
  return *anchor_clock_mhz / *row_clock_mhz - 1;
}

json device_anchors_json(const std::vector<AnchorPoint>& anchors, double clock_threshold) {
  if (anchors.empty()) return nullptr;
  DevicePairs pairs;
  std::size_t compared = 0, clock_off = 0;
  for (const auto& a : anchors) {
    if (const auto offset = a.clock_offset(); offset && std::abs(*offset) > clock_threshold) {
      ++clock_off;
      continue;
    }
    ++compared;
    pairs[{a.row_device, a.anchor_device}].push_back(a.signed_difference());
  }
  json out = {{"count", compared},
              {"device_pairs", device_pairs_json(pairs, "row_device", "anchor_device")}};
  if (clock_off > 0) out["clock_off"] = {{"count", clock_off}, {"threshold", clock_threshold}};
  return out;
}

std::string anchor_clock_off_summary(const json& device_anchors) {
  if (!device_anchors.is_object() || !device_anchors.contains("clock_off")) return "";
  const auto& off = device_anchors.at("clock_off");
  char line[160];
  std::snprintf(line, sizeof(line),
                "%d anchors measured more than %.2f%% off their rows' clock left out",
                off.at("count").get<int>(), 100 * off.at("threshold").get<double>());
  return line;
}

std::string anchor_pair_summary(const json& pair) {
  char line[160];
  std::snprintf(line, sizeof(line),
                "rows of #%d measured again on #%d: %d rows, anchor - row median %+.2f%%",
                pair.at("row_device").get<int>(), pair.at("anchor_device").get<int>(),
                pair.at("count").get<int>(),
                100 * pair.at("median_signed_relative_difference").get<double>());
  return line;
}

std::string fidelity_cell_id(const Target& t, Component c, CellRole role) {
  std::string id = t.cell_id() + "." + std::string(to_string(c));
  if (role.held_out) id += ".held_out";
  if (role.stage > 0) id += ".stage" + std::to_string(role.stage);
  if (role.anchors > 0) id += ".anchors" + std::to_string(role.anchors);
  if (role.part > 0) id += ".part" + std::to_string(role.part);
  return id;
}

json fidelity_cell_json(const Target& t, Component c, CellRole role, int rounds, int weight_banks) {
  json j = {{"target", t.to_json()},
            {"component", to_string(c)},
            {"rounds", rounds},
            {"weight_banks", weight_banks},
            {"stage", role.stage},
            {"role", role.held_out      ? "held_out"
                     : role.anchors > 0 ? "anchors"
                                        : "grid"}};
  if (role.part > 0) j["part"] = role.part;
  if (role.anchors > 0) j["anchors"] = role.anchors;
  return j;
}

CellRole cell_role(const json& cell_json) {
  return {cell_json.value("stage", 0), cell_json.value("role", "grid") == "held_out",
          cell_json.value("part", 0), cell_json.value("anchors", 0)};
}

std::vector<GridPoint> anchor_rows(const std::vector<GridPoint>& rows) {
  if (rows.size() <= kAnchorRows) return rows;
  std::vector<GridPoint> out;
  for (std::size_t i = 0; i < kAnchorRows; ++i)
    out.push_back(rows[i * (rows.size() - 1) / (kAnchorRows - 1)]);
  return out;
}

std::optional<bool> same_device(const std::vector<int>& point_devices,
                                const std::vector<const std::vector<int>*>& vertex_devices) {
  if (point_devices.empty() || vertex_devices.empty()) return std::nullopt;
  bool same = point_devices.size() == 1;
  for (const auto* v : vertex_devices) {
    if (v->empty()) return std::nullopt;
    same = same && *v == point_devices;
  }
  return same;
}

std::vector<HeldOutPoint> ComponentFidelity::worst(std::size_t n) const {
  std::vector<HeldOutPoint> out;
  for (const auto& h : held_out)
    if (h.predicted_us) out.push_back(h);
  std::sort(out.begin(), out.end(), [](const HeldOutPoint& a, const HeldOutPoint& b) {
    return a.relative_error() > b.relative_error();
  });
  if (out.size() > n) out.resize(n);
  return out;
}

json ComponentFidelity::held_out_points_json(double tolerance) const {
  std::vector<const HeldOutPoint*> order;
  for (const auto& h : held_out) order.push_back(&h);
  std::stable_sort(order.begin(), order.end(), [](const HeldOutPoint* a, const HeldOutPoint* b) {
    if (a->predicted_us.has_value() != b->predicted_us.has_value())
      return a->predicted_us.has_value();
    return a->relative_error() > b->relative_error();
  });
  const auto flag = [](const std::optional<bool>& v) { return v ? json(*v) : json(nullptr); };
  json out = json::array();
  for (const auto* h : order) {
    json p = {{"point", point_json(h->point)}, {"measured_us", h->measured_us}};
    if (!h->predicted_us) {
      p["predicted_us"] = nullptr;
      p["unpredicted_reason"] = h->unpredicted_reason;
    } else {
      p["predicted_us"] = *h->predicted_us;
      p["relative_error"] = h->relative_error();
      p["run_spread"] = h->run_spread;
      p["miss"] = h->miss(tolerance);
      p["miss_within_run_movement"] = h->miss_within_run_movement(tolerance);
      p["balanced"] = flag(h->balanced);
      p["same_device"] = flag(h->same_device);
      p["spans_launch_wave_step"] = flag(h->spans_wave_step);
    }
    out.push_back(p);
  }
  return out;
}

json ComponentFidelity::to_json(double tolerance) const {
  json worst_points = json::array();
  for (const auto& h : worst(5))
    worst_points.push_back({{"point", point_json(h.point)},
                            {"measured_us", h.measured_us},
                            {"predicted_us", *h.predicted_us},
                            {"relative_error", h.relative_error()}});
  json failed_points = json::array();
  for (const auto& p : failed) failed_points.push_back(point_json(p));
  std::vector<RemeasuredPoint> most_apart(remeasured);
  std::sort(most_apart.begin(), most_apart.end(), [](const auto& a, const auto& b) {
    return a.relative_difference() > b.relative_difference();
  });
  json repeatability = {{"count", remeasured_statistics.count},
                        {"median_abs_relative_difference", remeasured_statistics.median},
                        {"max_abs_relative_difference", remeasured_statistics.max},
                        {"most_apart", json::array()}};
  if (const auto by_device = repeatability_by_device(remeasured); !by_device.is_null())
    repeatability["by_device"] = by_device;
  const auto anchored = device_anchors_json(anchors, tolerance);
  for (std::size_t i = 0; i < most_apart.size() && i < 3; ++i)
    repeatability["most_apart"].push_back(
        {{"point", point_json(most_apart[i].point)},
         {"held_out_us", most_apart[i].held_out_us},
         {"grid_us", most_apart[i].grid_us},
         {"relative_difference", most_apart[i].relative_difference()}});
  json held = statistics.errors_json();
  held["unpredicted"] = statistics.unpredicted;
  held["bank_failures"] = statistics.bank_failures;
  held["worst"] = worst_points;
  // Misses within the movement of their own runs or their rows' (refinement leaves them).
  held["misses_within_run_movement"] =
      std::count_if(held_out.begin(), held_out.end(),
                    [&](const HeldOutPoint& h) { return h.miss_within_run_movement(tolerance); });
  if (balanced && off_balance)
    held["by_routing"] = {{"balanced", balanced->errors_json()},
                          {"off_balance", off_balance->errors_json()}};
  if (same_device && across_devices)
    held["by_device"] = {{"same_device", same_device->errors_json()},
                         {"across_devices", across_devices->errors_json()}};
  if (same_waves && across_waves)
    held["by_waves"] = {{"same_waves", same_waves->errors_json()},
                        {"across_waves", across_waves->errors_json()}};
  // The clock the table's rows were measured at (NVML's sampled clocks in the hardware identity
  // read higher under load): over the rows that are published.
  std::vector<double> clocks;
  int rows = 0;
  for (const auto& p : table)
    if (p.bank_check_passed) {
      ++rows;
      if (p.sm_clock_mean_mhz) clocks.push_back(*p.sm_clock_mean_mhz);
    }
  json clock = {{"rows", rows}, {"recorded", clocks.size()}};
  if (const auto s = spread(clocks)) {
    clock["min"] = s->min;
    clock["median"] = s->median;
    clock["max"] = s->max;
  }
  json devices = json::array();
  for (const auto& [device, count] : rows_per_device)
    devices.push_back({{"device", device < 0 ? json() : json(device)}, {"rows", count}});
  json out = {
      {"tolerance", tolerance},
      {"sm_clock_mean_mhz", clock},
      {"rows_per_device", devices},
      {"held_out", held},
      {"repeatability", repeatability},
      {"refinement",
       {{"stages", stages}, {"added_points", added_points}, {"kernel_changes", kernel_changes}}},
      {"failed_points", failed_points}};
  if (!anchored.is_null()) out["device_anchors"] = anchored;
  return out;
}

json HeldOutStatistics::errors_json() const {
  return {{"count", count},
          {"median_abs_relative_error", median},
          {"p95_abs_relative_error", p95},
          {"max_abs_relative_error", max}};
}

void HeldOutStatistics::set_errors(const std::vector<double>& errors) {
  count = static_cast<int>(errors.size());
  if (errors.empty()) return;
  median = quantile(errors, 0.5);
  p95 = quantile(errors, 0.95);
  max = *std::max_element(errors.begin(), errors.end());
}

std::vector<ComponentFidelity> evaluate_fidelity(const StoredAcquisition& acq,
                                                 const std::vector<CellSummary>& summaries,
                                                 const ExpertWaves& waves) {
  const auto contract = Contract::parse(acq.contract_json);
  struct Group {
    ComponentFidelity f;
    std::vector<std::pair<CellRole, const CellSummary*>> cells;
  };
  std::map<std::pair<std::string, Component>, Group> groups;
  std::vector<std::pair<std::string, Component>> order;
  for (std::size_t i = 0; i < acq.cells.size(); ++i) {
    const auto j = json::parse(acq.cells[i].info.json);
    const auto target = Target::from_json(j.at("target"));
    const auto component = parse_component(j.at("component").get<std::string>());
    if (!component) throw FileError("cell " + acq.cells[i].info.id + " names no known component");
    const auto key = std::make_pair(target.cell_id(), *component);
    auto [it, fresh] = groups.try_emplace(key);
    if (fresh) {
      it->second.f.target = target;
      it->second.f.component = *component;
      order.push_back(key);
    }
    it->second.cells.emplace_back(cell_role(j), &summaries.at(i));
    it->second.f.cells.push_back(i);
  }
  std::vector<ComponentFidelity> out;
  for (const auto& key : order) {
    auto& [f, cells] = groups.at(key);
    std::stable_sort(cells.begin(), cells.end(),
                     [](const auto& a, const auto& b) { return a.first.stage < b.first.stage; });
    f.complete = true;
    std::map<GridPoint, PointResult> grid, probes;
    std::vector<PointResult> anchored;  // the points of every anchor set
    std::set<GridPoint> planned;
    for (const auto& [role, cs] : cells) {
      f.stages = std::max(f.stages, role.stage);
      f.complete = f.complete && cs->complete();
      if (role.anchors > 0) {
        for (const auto& p : cs->points)
          if (p.time_us && p.bank_check_passed) anchored.push_back(p);
        continue;
      }
      for (const auto& p : cs->points) {
        if (!role.held_out && role.stage == 0) planned.insert(p.point);
        if (!p.time_us) continue;
        (role.held_out ? probes : grid)[p.point] = p;  // a later stage's measurement wins
        if (!role.held_out) ++f.measured_times[p.point];
      }
    }
    if (f.component != Component::experts) {
      const PointResult* previous = nullptr;
      for (const auto& [point, result] : grid) {  // ascending N
        if (previous && previous->activities && result.activities &&
            *previous->activities != *result.activities &&
            point.tokens > previous->point.tokens + 1)
          f.kernel_changes.emplace_back(previous->point.tokens, point.tokens);
        previous = &result;
      }
    }
    // Each device's anchor time against each device's time of the row (the row's rounds per
    // device, so that a row whose rounds the new device completed later still compares).
    for (const auto& a : anchored)
      if (const auto g = grid.find(a.point); g != grid.end() && g->second.bank_check_passed)
        for (const auto& [anchor_device, anchor_us] : a.time_us_by_device)
          for (const auto& [row_device, row_us] : g->second.time_us_by_device)
            f.anchors.push_back({a.point, row_us, anchor_us, row_device, anchor_device,
                                 g->second.sm_clock_mean_mhz, a.sm_clock_mean_mhz});
    std::map<Component, std::vector<TableRow>> rows;
    for (const auto& [point, result] : grid) {
      if (!planned.contains(point)) ++f.added_points;
      f.table.push_back(result);
      if (!result.bank_check_passed) {
        f.failed.push_back(point);
        continue;
      }
      if (result.devices.empty()) ++f.rows_per_device[-1];
      for (const int d : result.devices) ++f.rows_per_device[d];
      rows[f.component].push_back({point, *result.time_us});
    }

    ExpertPolytope polytope{contract.geometry.experts, contract.geometry.top_k, 0};
    for (const auto& t : contract.targets)
      if (t.target.cell_id() == key.first) polytope.local_experts = t.ownership.local_experts;
    std::optional<ComponentTables> tables;
    if (!rows.empty()) tables.emplace(rows, polytope);
    // `experts`: errors at balanced routing and off it, apart as well as together.
    const bool experts = f.component == Component::experts;
    std::vector<double> errors, balanced_errors, off_balance_errors, same_device_errors,
        across_devices_errors, same_waves_errors, across_waves_errors;
    std::vector<double> remeasured_differences;
    for (const auto& [point, result] : probes) {
      if (const auto g = grid.find(point); g != grid.end()) {  // refinement made it a grid point
        if (result.bank_check_passed && g->second.bank_check_passed) {
          const auto one = [](const std::vector<int>& d) { return d.size() == 1 ? d[0] : -1; };
          f.remeasured.push_back({point, *result.time_us, *g->second.time_us, one(result.devices),
                                  one(g->second.devices)});
          remeasured_differences.push_back(f.remeasured.back().relative_difference());
        }
        continue;
      }
      if (!result.bank_check_passed) {
        ++f.statistics.bank_failures;
        continue;
      }
      HeldOutPoint h;
      h.point = point;
      h.measured_us = *result.time_us;
      try {
        if (!tables) throw LookupError("no grid rows passed the weight-bank control");
        const auto answer =
            tables->query(f.component, point.tokens, point.activated, point.assignments);
        h.predicted_us = answer.time_us;
        errors.push_back(h.relative_error());
        std::vector<const std::vector<int>*> vertex_devices;
        h.run_spread = result.run_spread.value_or(0.0);
        for (const auto& v : answer.vertices) {
          const auto& row = grid.at(v.point);
          vertex_devices.push_back(&row.devices);
          h.run_spread = std::max(h.run_spread, row.run_spread.value_or(0.0));
        }
        h.same_device = same_device(result.devices, vertex_devices);
        if (h.same_device)
          (*h.same_device ? same_device_errors : across_devices_errors)
              .push_back(h.relative_error());
        if (experts) {
          h.balanced = balanced_point(contract.geometry, f.target, point.tokens) == point;
          (*h.balanced ? balanced_errors : off_balance_errors).push_back(h.relative_error());
        }
        if (experts && waves && point.activated > 0) {
          h.spans_wave_step = prediction_spans_wave_step(waves, point, answer);
          (*h.spans_wave_step ? across_waves_errors : same_waves_errors)
              .push_back(h.relative_error());
        }
      } catch (const LookupError& e) {
        h.unpredicted_reason = e.what();
        ++f.statistics.unpredicted;
      }
      f.held_out.push_back(std::move(h));
    }
    f.statistics.set_errors(errors);
    f.remeasured_statistics.set_errors(remeasured_differences);
    if (experts) {
      f.balanced.emplace().set_errors(balanced_errors);
      f.off_balance.emplace().set_errors(off_balance_errors);
    }
    if (!same_device_errors.empty() || !across_devices_errors.empty()) {
      f.same_device.emplace().set_errors(same_device_errors);
      f.across_devices.emplace().set_errors(across_devices_errors);
    }
    if (!same_waves_errors.empty() || !across_waves_errors.empty()) {
      f.same_waves.emplace().set_errors(same_waves_errors);
      f.across_waves.emplace().set_errors(across_waves_errors);
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::string held_out_summary(const json& component_fidelity) {
  const auto& h = component_fidelity.at("held_out");
  char line[160];
  std::snprintf(line, sizeof(line), "%d points, |error| median %.2f%%, p95 %.2f%%, max %.2f%%",
                h.at("count").get<int>(), 100 * h.at("median_abs_relative_error").get<double>(),
                100 * h.at("p95_abs_relative_error").get<double>(),
                100 * h.at("max_abs_relative_error").get<double>());
  return line;
}

std::string repeatability_summary(const json& component_fidelity) {
  const auto r = component_fidelity.value("repeatability", json::object());
  if (r.value("count", 0) == 0) return "";
  char line[200];
  std::snprintf(line, sizeof(line),
                "%d held-out points measured again as grid rows, |grid - held-out| median "
                "%.2f%%, max %.2f%% (no interpolation)",
                r.at("count").get<int>(),
                100 * r.at("median_abs_relative_difference").get<double>(),
                100 * r.at("max_abs_relative_difference").get<double>());
  return line;
}

std::string device_spread_summary(const json& component_fidelity) {
  char part[200];
  std::string spread, anchored;
  const auto across = component_fidelity.value("repeatability", json::object())
                          .value("by_device", json::object())
                          .value("across_devices", json::object());
  if (across.value("count", 0) > 0) {
    std::snprintf(part, sizeof(part),
                  "%d points measured on two devices, |difference| median %.2f%%, max %.2f%%",
                  across.at("count").get<int>(),
                  100 * across.at("median_abs_relative_difference").get<double>(),
                  100 * across.at("max_abs_relative_difference").get<double>());
    spread = part;
  }
  const auto anchors = component_fidelity.value("device_anchors", json::object());
  for (const auto& p : anchors.value("device_pairs", json::array())) {
    if (p.at("row_device") == p.at("anchor_device")) continue;  // a device against itself
    anchored += (anchored.empty() ? "anchors: " : ", ") + anchor_pair_summary(p);
  }
  if (const auto off = anchor_clock_off_summary(anchors); !off.empty())
    anchored += (anchored.empty() ? "anchors: " : ", ") + off;
  return spread.empty() || anchored.empty() ? spread + anchored : spread + "; " + anchored;
}

bool prediction_spans_wave_step(const ExpertWaves& waves, const GridPoint& point,
                                const LookupResult& answer) {
  const auto own = waves(point.activated, point.assignments);
  return std::any_of(answer.vertices.begin(), answer.vertices.end(), [&](const auto& v) {
    return v.point.activated > 0 && waves(v.point.activated, v.point.assignments) != own;
  });
}

NextStage next_stage_of(const JobSpec& job, const ComponentFidelity& f,
                        const std::vector<std::int64_t>& expert_time_steps,
                        const ExpertWaves& waves) {
  const auto& fid = job.fidelity;
  NextStage next;
  std::set<GridPoint> grid, measured_held_out;
  for (const auto& p : f.table) grid.insert(p.point);
  for (const auto& h : f.held_out) {
    measured_held_out.insert(h.point);
    if (h.refinable_miss(fid.tolerance)) next.misses.push_back({h.point, h.relative_error()});
    if (h.miss_within_run_movement(fid.tolerance)) ++next.within_movement;
  }
  next.stage_limit = f.stages >= kMaxRefinementStages;
  next.cap_spent = f.added_points >= fid.max_added_points;
  if (next.stage_limit) return next;
  if (fid.refine)
    next.step = refinement_step(job, f.target, f.component, f.stages + 1, grid, measured_held_out,
                                next.misses, fid.max_added_points - f.added_points,
                                expert_time_steps, f.kernel_changes, waves);
  for (const auto& p : f.failed)
    if (f.measured_times.at(p) <= fid.remeasure_limit) next.remeasure.push_back(p);
  return next;
}

}  // namespace moe
