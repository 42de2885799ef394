// harness validate: re-measures a fresh random held-out set of a published bundle on this machine
// and compares the bundle's answers with it (docs/measurement.md#validating-a-published-bundle).
//
// Rerun: harness validate ROOT/VARIANT [--tp 1 --dp 1] [--points 24] [--table-rows 6]
//        [--seed S] [--routing random|balanced]
// Per entry and component: draws --points random feasible points (or, with --routing balanced,
// balanced-routing points) inside the table's token range (off its rows) from a seed other than the
// acquisition's, measures them under the entry's own protocol (backend, rounds, iterations, weight
// banks; experts report the 2B arm), predicts them with the lookup library, and prints count,
// median / p95 / max |error| and every point. Beside them it re-measures --table-rows of the
// table's own rows: their error has no interpolation in it, only this device and day's offset.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "bundle/bundle_meta.h"
#include "bundle/fidelity.h"
#include "bundle/summary.h"
#include "core/contract.h"
#include "core/refinement.h"
#include "core/seed.h"
#include "core/statistics.h"
#include "harness/commands.h"
#include "kernels/native_tile_rule.h"
#include "lookup/lookup.h"
#include "ranks/forward_timer.h"
#include "ranks/protocol.h"

namespace po = boost::program_options;
using nlohmann::json;

namespace moe::cli {

namespace {

class ValidateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

constexpr int kMaxPoints = 1000;
// Exit status when every component ran but some held-out p95 exceeds the entry's tolerance.
constexpr int kOutsideTolerance = 3;

// The device this machine's backend reports must be the kind the entry was measured on.
void require_same_device_kind(const BundleEntry& e, const Backend& backend,
                              const std::string& label) {
  const auto here = backend.device_properties().at("device");
  const auto devices =
      e.provenance.value("hardware", json::object()).value("devices", json::array());
  if (devices.empty())
    throw ValidateError(label +
                        " carries no hardware identity; it cannot be validated on a device "
                        "known to be the same kind");
  for (const auto& d : devices)
    if (d.value("device", "") != here)
      throw ValidateError(label + " was measured on " + d.value("device", "?") +
                          ", but this machine's " + backend.name() + " backend runs on " + here);
}

// The entry's protocol over `points`: its rounds, each a fresh cell round; the value of a point
// is what the publisher would publish (median of round medians, experts: the 2B arm).
std::vector<PointResult> measure(Backend& backend, ForwardTimer& timer, const json& contract,
                                 const Target& target, Component c,
                                 const std::vector<GridPoint>& points, std::uint64_t seed) {
  const auto& cond = contract.at("conditioning");
  StoredAcquisition acq;
  StoredCell cell;
  const int rounds = cond.at("rounds").get<int>();
  cell.info = {"validate", json{{"component", to_string(c)}}.dump(), points, rounds};
  for (int r = 0; r < rounds; ++r) {
    CellRoundSpec spec;
    spec.base.geometry = geometry_from_json(contract.at("geometry"));
    spec.base.target = target;
    spec.base.component = c;
    spec.points = points;
    spec.round = r;
    spec.iterations = cond.at("iterations").get<int>();
    spec.settle = {cond.value("settle_ms", 0.0), cond.value("capped_settle_ms", 0.0)};
    spec.weight_banks = cond.at("weight_banks").get<int>();
    spec.seed = mix_seed({seed, static_cast<std::uint64_t>(c), static_cast<std::uint64_t>(r)});
    cell.rounds.push_back(measure_cell_round(backend, timer, spec));
    cell.rounds_done.push_back(1);
  }
  acq.cells.push_back(std::move(cell));
  return summarize(acq).front().points;
}

struct Validated {
  Component component{};
  std::vector<json> points;
  std::vector<double> errors;
  std::vector<double> signed_errors;  // (bundle - measured) / measured
  HeldOutStatistics statistics;       // unpredicted and bank_failures counted while measuring
  // experts of a backend that declares its launch waves: the errors of the points interpolated
  // within their own waves and across a wave step (held_out.by_waves of the bundle, done again)
  std::vector<double> same_waves_errors, across_waves_errors;
  // Points above the tolerance, and those of them within their runs' movement: the point's own
  // run or a run of a row its prediction weighs moved at least as far (HeldOutPoint), which is
  // the device's wander, not the table's error. Counted, not left out: the bounds judge them all.
  int misses = 0, misses_within_run_movement = 0;
  // The errors of the points measured at a mean SM clock within the tolerance of their rows'
  // clock (as the prediction weighs the rows) and of those further off: a clock offset smaller
  // than the tolerance cannot alone move a point outside it, a larger one can (the device's state
  // now against the table's; docs/measurement.md#validating-a-published-bundle).
  std::vector<double> clock_matched_errors, clock_off_errors;
};

// Statistics of |relative error|s, with the bundle's key names.
json error_statistics(const std::vector<double>& errors) {
  HeldOutStatistics s;
  s.set_errors(errors);
  return s.errors_json();
}

// Statistics of |e - offset| over signed relative errors e.
json abs_error_statistics(const std::vector<double>& signed_errors, double offset) {
  std::vector<double> errors;
  for (const double e : signed_errors) errors.push_back(std::abs(e - offset));
  return error_statistics(errors);
}

json statistics_json(Validated& v, double tolerance) {
  v.statistics.set_errors(v.errors);
  const auto& s = v.statistics;
  json out = {{"component", to_string(v.component)},
              {"count", s.count},
              {"unpredicted", s.unpredicted},
              {"bank_failures", s.bank_failures},
              {"tolerance", tolerance},
              {"misses", v.misses},
              {"misses_within_run_movement", v.misses_within_run_movement},
              {"points", v.points}};
  if (s.count > 0) {
    out.update(s.errors_json());
    // A bias common to every point (this machine or day against the table's) rather than
    // interpolation error: the median of the signed errors, and what is left once it is removed.
    const double offset = quantile(v.signed_errors, 0.5);
    out["median_relative_error"] = offset;
    out["offset_removed"] = abs_error_statistics(v.signed_errors, offset);
  }
  if (!v.same_waves_errors.empty() || !v.across_waves_errors.empty())
    out["by_waves"] = {{"same_waves", error_statistics(v.same_waves_errors)},
                       {"across_waves", error_statistics(v.across_waves_errors)}};
  if (!v.clock_matched_errors.empty() || !v.clock_off_errors.empty())
    out["by_clock"] = {{"threshold", tolerance},
                       {"matched", error_statistics(v.clock_matched_errors)},
                       {"off", error_statistics(v.clock_off_errors)}};
  return out;
}

// `count` of the table's rows (distinct points), spread over its log token range: the row whose
// log N is nearest to the middle of each of `count` equal slices, the seed choosing among the
// rows of that N. Re-measured, they carry no interpolation error: what they miss by is this
// device and day against the table's (and the run-to-run spread).
std::vector<GridPoint> pick_table_rows(const std::vector<TableRow>& rows, int count,
                                       std::uint64_t seed) {
  std::map<std::int64_t, std::vector<GridPoint>> by_tokens;
  for (const auto& r : rows) by_tokens[r.point.tokens].push_back(r.point);
  std::set<GridPoint> picked;
  if (by_tokens.empty() || count < 1) return {};
  const double lo = std::log(static_cast<double>(by_tokens.begin()->first));
  const double hi = std::log(static_cast<double>(by_tokens.rbegin()->first));
  for (int i = 0; i < count && picked.size() < rows.size(); ++i) {
    const double target = lo + (i + 0.5) / count * (hi - lo);
    // The nearest token row whose points are not all picked yet.
    const std::vector<GridPoint>* best = nullptr;
    double best_distance = INFINITY;
    for (const auto& [n, points] : by_tokens) {
      const double d = std::abs(std::log(static_cast<double>(n)) - target);
      const bool left = std::any_of(points.begin(), points.end(),
                                    [&](const GridPoint& p) { return !picked.count(p); });
      if (left && d < best_distance) best = &points, best_distance = d;
    }
    if (!best) break;
    std::vector<GridPoint> left;
    for (const auto& p : *best)
      if (!picked.count(p)) left.push_back(p);
    picked.insert(left[mix_seed({seed, static_cast<std::uint64_t>(i)}) % left.size()]);
  }
  return {picked.begin(), picked.end()};
}

// The re-measured table rows of one component: the signed median is the offset.
json table_rows_json(const std::vector<json>& points, const std::vector<double>& signed_errors,
                     int bank_failures) {
  json out = abs_error_statistics(signed_errors, 0);
  out["bank_failures"] = bank_failures;
  out["points"] = points;
  if (!signed_errors.empty()) out["median_relative_error"] = quantile(signed_errors, 0.5);
  return out;
}

// A signed fraction as a percentage to 2 decimals, with no "-0.00" for a tiny negative value.
double signed_percent(const json& fraction) {
  return std::round(fraction.get<double>() * 1e4) / 100 + 0.0;
}

}  // namespace

int validate(const Args& args) {
  std::string variant_dir, format = "text";
  std::string routing_name = "random";
  int tp = 0, dp = 0, rank = -1, count = 24, table_rows = 6, device = 0;
  std::uint64_t seed = 0;
  po::options_description desc("harness validate ROOT/VARIANT [options]");
  desc.add_options()("bundle", po::value(&variant_dir), "bundle variant directory")(
      "tp", po::value(&tp), "only entries of this TP degree")(
      "dp", po::value(&dp), "only entries of this DP degree")("rank", po::value(&rank),
                                                              "only entries of this rank")(
      "points", po::value(&count)->default_value(24),
      "random held-out points per component (1-1000)")(
      "table-rows", po::value(&table_rows)->default_value(6),
      "also re-measure this many of the table's own rows per component (0-1000): their error is "
      "the device and day offset, without interpolation")(
      "seed", po::value(&seed), "seed of the draw (default: from the clock, printed)")(
      "routing", po::value(&routing_name),
      "experts points: random (feasible A and M) | balanced (the balanced-routing point of each "
      "N, where a serving step's routing sits)")("device", po::value(&device)->default_value(0),
                                                 "CUDA device for GPU backends")(
      "format", po::value(&format), "text | json");
  po::positional_options_description pos;
  pos.add("bundle", 1);
  const auto vm = parse(args, desc, pos);
  if (!vm) return 0;
  if (variant_dir.empty()) throw ValidateError("name the bundle variant directory (ROOT/VARIANT)");
  if (count < 1 || count > kMaxPoints)
    throw ValidateError("--points must be between 1 and " + std::to_string(kMaxPoints));
  if (table_rows < 0 || table_rows > kMaxPoints)
    throw ValidateError("--table-rows must be between 0 and " + std::to_string(kMaxPoints));
  if (format != "text" && format != "json") throw ValidateError("--format must be text or json");
  if (routing_name != "random" && routing_name != "balanced")
    throw ValidateError("--routing must be random or balanced, got '" + routing_name + "'");
  const auto routing = routing_name == "balanced" ? Routing::balanced : Routing::random;
  if (!vm->count("seed"))
    seed = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());

  const auto meta = load_bundle_meta(variant_dir);
  if (meta.empty()) throw ValidateError(variant_dir + ": no bundle here (no meta.yaml)");
  std::vector<const BundleEntry*> entries;
  for (const auto& [t, list] : meta.per_tp(Section::moe_components))
    for (const auto& e : list)
      if ((!tp || e.target.tp == tp) && (!dp || e.target.dp == dp) &&
          (rank < 0 || e.target.rank == rank))
        entries.push_back(&e);
  if (entries.empty())
    throw ValidateError(variant_dir + ": no component table matches" +
                        (tp || dp || rank >= 0 ? " --tp/--dp/--rank" : " (empty bundle)"));

  json report = {{"bundle", variant_dir},
                 {"seed", seed},
                 {"routing", routing_name},
                 {"entries", json::array()}};
  bool within = true;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ForwardTimer> timer;
  for (const auto* e : entries) {
    const auto label = variant_dir + " " + e->target.label();
    DeploymentKey key;  // loading first validates the entry (hashes, checksums, table)
    key.tp = e->target.tp, key.dp = e->target.dp, key.rank = e->target.rank, key.sp = e->target.sp;
    auto deployment = Deployment::load(variant_dir, key);
    // The clock each row was measured at and the devices that measured it: beside a re-measured
    // row's clock and device now, they tell an offset of the device (same clock, another device)
    // from one of the clock (docs/measurement.md).
    const auto row_records =
        read_row_records(std::filesystem::path(variant_dir) / tp_dir_name(e->target.tp), *e);
    const auto backend_name = e->contract.value("backend", "");
    if (!backend || backend->name() != backend_name) {
      backend = make_backend(backend_name, device);
      timer = make_forward_timer(backend->timing());
    }
    require_same_device_kind(*e, *backend, label);
    // The waves this GPU runs the points at (the same kind as the table's, so its SM count).
    const auto waves = expert_launch_waves(
        backend->name(), geometry_from_json(e->contract.at("geometry")), backend->sm_count());
    const double tolerance = e->contract.at("fidelity").at("tolerance").get<double>();
    // Which device measured now and which measured the table: another device of the same kind
    // (or the same one on another day) adds its own offset to the error.
    const auto here = backend->device_properties();
    json measured_on = json::array();
    for (const auto& d :
         e->provenance.value("hardware", json::object()).value("devices", json::array()))
      measured_on.push_back(d.value("uuid", d.value("device", "?")));
    const auto here_id = here.contains("uuid") ? here.at("uuid") : here.at("device");
    const auto here_position = static_cast<int>(
        std::find(measured_on.begin(), measured_on.end(), here_id) - measured_on.begin());
    json entry = {
        {"target", e->target.to_json()},
        {"device", here_id},
        {"table_devices", measured_on},
        {"same_device", measured_on.size() == 1 && measured_on[0] == here_id},
        // false for entries published before row_clocks.csv: no row's own clock
        {"row_clocks_recorded", e->fidelity().contains("row_clocks_table")},
        // the version of the code measured now and for the table: another version's
        // times differ by what its change did, not by device or day
        {"backend_version",
         {{"now", backend->version()}, {"table", backend_version_of(e->contract)}}},
        // the timing loop now and the table's (core/contract.h, kTimingProtocol)
        {"timing_protocol", {{"now", kTimingProtocol}, {"table", timing_protocol_of(e->contract)}}},
        {"components", json::array()}};
    for (const auto c : deployment.components()) {
      std::set<GridPoint> grid;
      for (const auto& r : deployment.rows(c)) grid.insert(r.point);
      const auto component_seed = mix_seed(
          {seed, static_cast<std::uint64_t>(e->target.tp), static_cast<std::uint64_t>(e->target.dp),
           static_cast<std::uint64_t>(e->target.rank), static_cast<std::uint64_t>(c)});
      const auto points =
          random_feasible_points(geometry_from_json(e->contract.at("geometry")), e->target, c, grid,
                                 count, component_seed, routing);
      if (points.empty()) {  // a table of one token row has no interior: said, not dropped
        entry["components"].push_back(
            {{"component", to_string(c)},
             {"count", 0},
             {"points", json::array()},
             {"skipped", "no feasible point between the table's token rows"}});
        continue;
      }
      const auto rows = pick_table_rows(deployment.rows(c), table_rows, component_seed);
      auto measured_points = points;
      measured_points.insert(measured_points.end(), rows.begin(), rows.end());
      const std::set<GridPoint> row_set(rows.begin(), rows.end());
      Validated v;
      v.component = c;
      std::vector<json> row_points;
      std::vector<double> row_errors, clocks_now;
      int row_bank_failures = 0;
      for (const auto& p :
           measure(*backend, *timer, e->contract, e->target, c, measured_points, seed)) {
        json j = {{"point", {p.point.tokens, p.point.activated, p.point.assignments}},
                  {"measured_us", *p.time_us}};
        if (p.sm_clock_mean_mhz) {
          j["sm_clock_mean_mhz"] = *p.sm_clock_mean_mhz;
          clocks_now.push_back(*p.sm_clock_mean_mhz);
        }
        if (row_set.count(p.point)) {  // a table row: answered exactly, no interpolation
          if (const auto r = row_records.find({c, p.point}); r != row_records.end()) {
            if (r->second.sm_clock_mean_mhz)
              j["table_sm_clock_mean_mhz"] = *r->second.sm_clock_mean_mhz;
            if (!r->second.devices.empty()) {
              j["table_row_devices"] = r->second.devices;  // positions in table_devices above
              j["table_row_on_this_device"] =
                  std::find(r->second.devices.begin(), r->second.devices.end(), here_position) !=
                  r->second.devices.end();
            }
          }
          if (!p.bank_check_passed) {
            ++row_bank_failures;
            j["bank_check"] = "failed";
          } else {
            const double table_us =
                deployment.query(c, p.point.tokens, p.point.activated, p.point.assignments).time_us;
            j["table_us"] = table_us;
            row_errors.push_back((table_us - *p.time_us) / *p.time_us);
          }
          row_points.push_back(j);
          continue;
        }
        if (!p.bank_check_passed) {
          ++v.statistics.bank_failures;
          j["bank_check"] = "failed";
        } else {
          try {
            const auto answer =
                deployment.query(c, p.point.tokens, p.point.activated, p.point.assignments);
            HeldOutPoint held;
            held.point = p.point;
            held.measured_us = *p.time_us;
            held.predicted_us = answer.time_us;
            held.run_spread = p.run_spread.value_or(0.0);
            double rows_clock = 0;  // the rows' mean SM clock, weighted as the prediction is
            bool rows_clock_known = p.sm_clock_mean_mhz && !answer.vertices.empty();
            for (const auto& vertex : answer.vertices) {
              const auto r = row_records.find({c, vertex.point});
              const auto* row = r == row_records.end() ? nullptr : &r->second;
              if (row) held.run_spread = std::max(held.run_spread, row->run_spread.value_or(0.0));
              if (row && row->sm_clock_mean_mhz)
                rows_clock += vertex.weight * *row->sm_clock_mean_mhz;
              else
                rows_clock_known = false;
            }
            const double error = held.relative_error();
            j["predicted_us"] = answer.time_us;
            j["relative_error"] = error;
            if (rows_clock_known) {
              const double clock_offset = *p.sm_clock_mean_mhz / rows_clock - 1;
              j["rows_sm_clock_mean_mhz"] = rows_clock;
              j["clock_vs_rows"] = clock_offset;
              (std::abs(clock_offset) <= tolerance ? v.clock_matched_errors : v.clock_off_errors)
                  .push_back(error);
            }
            if (c == Component::experts) j["run_spread"] = held.run_spread;
            if (held.miss(tolerance)) {
              ++v.misses;
              const bool within_movement = held.miss_within_run_movement(tolerance);
              j["miss_within_run_movement"] = within_movement;
              v.misses_within_run_movement += within_movement ? 1 : 0;
            }
            v.signed_errors.push_back((answer.time_us - *p.time_us) / *p.time_us);
            v.errors.push_back(error);
            if (waves && c == Component::experts && p.point.activated > 0) {
              const bool across = prediction_spans_wave_step(waves, p.point, answer);
              j["spans_launch_wave_step"] = across;
              (across ? v.across_waves_errors : v.same_waves_errors).push_back(error);
            }
          } catch (const LookupError& err) {
            ++v.statistics.unpredicted;
            j["unpredicted"] = err.what();
          }
        }
        v.points.push_back(j);
      }
      auto stats = statistics_json(v, tolerance);
      stats["table_rows"] = table_rows_json(row_points, row_errors, row_bank_failures);
      // The clock now against the clock of the table's rows (an offset often follows it); null
      // where not recorded (host backends, bundles published before the clock was).
      const auto table_clock = e->fidelity_components()
                                   .value(std::string(to_string(c)), json::object())
                                   .value("sm_clock_mean_mhz", json::object());
      stats["sm_clock_mean_mhz"] = {
          {"now", clocks_now.empty() ? json(nullptr) : json(quantile(clocks_now, 0.5))},
          {"table", table_clock.value("median", json(nullptr))}};
      if (stats.contains("p95_abs_relative_error") &&
          stats["p95_abs_relative_error"].get<double>() > tolerance)
        within = false;
      entry["components"].push_back(stats);
    }
    report["entries"].push_back(entry);
  }
  report["within_tolerance"] = within;

  if (format == "json") {
    std::cout << report.dump(1) << "\n";
  } else {
    std::cout << "validate " << variant_dir << ": seed " << seed << ", " << routing_name
              << " routing (rerun with --seed to draw the same points)\n";
    for (const auto& entry : report["entries"]) {
      std::cout << "  " << Target::from_json(entry["target"]).label() << ": measured now on "
                << entry["device"].get<std::string>() << ", the table on";
      const auto& table_devices = entry["table_devices"];  // numbered as a row's devices are
      for (std::size_t d = 0; d < table_devices.size(); ++d)
        std::cout << (d ? ", #" : " #") << d << " " << table_devices[d].get<std::string>();
      std::cout << (entry["same_device"].get<bool>() ? " (the same device)\n"
                                                     : " (another device of the same kind)\n");
      if (!entry["row_clocks_recorded"].get<bool>())
        std::cout << "    no row's own clock: this entry was published before bundles recorded "
                     "row_clocks.csv\n";
      if (const auto& v = entry["backend_version"]; v["now"] != v["table"])
        std::cout << "    another version of the measured code: this build runs version "
                  << v["now"] << ", the table was measured by version " << v["table"]
                  << " (their times differ by what changed: docs/bundle-format.md)\n";
      if (const auto& v = entry["timing_protocol"]; v["now"] != v["table"])
        std::cout << "    another timing protocol: this build times with protocol " << v["now"]
                  << ", the table was measured with protocol " << v["table"]
                  << " (docs/measurement.md#protocol: under the power cap its clocks, and so its "
                     "times, differ)\n";
      for (const auto& c : entry["components"]) {
        std::cout << "    " << c["component"].get<std::string>() << ": " << c["count"] << " points";
        if (c.contains("skipped")) {
          std::cout << " (skipped: " << c["skipped"].get<std::string>() << ")\n";
          continue;
        }
        if (c.contains("p95_abs_relative_error"))
          std::cout << std::fixed << std::setprecision(2) << ", |error| median "
                    << 100 * c["median_abs_relative_error"].get<double>() << "%, p95 "
                    << 100 * c["p95_abs_relative_error"].get<double>() << "%, max "
                    << 100 * c["max_abs_relative_error"].get<double>() << "% (tolerance "
                    << 100 * c["tolerance"].get<double>() << "%), bundle - measured median "
                    << std::showpos << signed_percent(c["median_relative_error"]) << std::noshowpos
                    << "% (with it removed: median "
                    << 100 * c["offset_removed"]["median_abs_relative_error"].get<double>()
                    << "%, p95 "
                    << 100 * c["offset_removed"]["p95_abs_relative_error"].get<double>()
                    << "%, max "
                    << 100 * c["offset_removed"]["max_abs_relative_error"].get<double>() << "%)";
        std::cout << "; " << c["unpredicted"] << " outside support, " << c["bank_failures"]
                  << " failing B/2B\n";
        if (const int misses = c["misses"].get<int>(); misses > 0)
          std::cout << "      above the tolerance: " << misses
                    << " points; within their runs' movement: " << c["misses_within_run_movement"]
                    << " of them (the point's run or a row it is interpolated from moved at least "
                       "as far: the device's wander, not the table's error)\n";
        // One class of a split: its points and their |error| statistics.
        const auto print_class = [](const std::string& label, const json& w) {
          std::cout << "      " << label << ": " << w["count"] << " points";
          if (w["count"].get<int>() > 0)
            std::cout << std::fixed << std::setprecision(2) << ", |error| median "
                      << 100 * w["median_abs_relative_error"].get<double>() << "%, p95 "
                      << 100 * w["p95_abs_relative_error"].get<double>() << "%, max "
                      << 100 * w["max_abs_relative_error"].get<double>() << "%";
          std::cout << "\n";
        };
        if (c.contains("by_waves")) {
          print_class("interpolated within its launch waves", c["by_waves"]["same_waves"]);
          print_class("interpolated across a launch-wave step", c["by_waves"]["across_waves"]);
        }
        if (c.contains("by_clock")) {
          std::ostringstream threshold;
          threshold << std::fixed << std::setprecision(2)
                    << 100 * c["by_clock"]["threshold"].get<double>() << "%";
          print_class("measured within " + threshold.str() + " of its rows' clock",
                      c["by_clock"]["matched"]);
          print_class("measured further from its rows' clock", c["by_clock"]["off"]);
        }
        if (const auto& rows = c["table_rows"]; !rows["points"].empty()) {
          std::cout << "      " << rows["points"].size() << " table rows re-measured";
          if (rows["count"].get<int>() > 0)
            std::cout << std::fixed << std::setprecision(2) << ": bundle - measured median "
                      << std::showpos << signed_percent(rows["median_relative_error"])
                      << std::noshowpos << "% (|error| median "
                      << 100 * rows["median_abs_relative_error"].get<double>() << "%, max "
                      << 100 * rows["max_abs_relative_error"].get<double>()
                      << "%): this device and day against the table's, without interpolation";
          if (rows["bank_failures"].get<int>() > 0)
            std::cout << "; " << rows["bank_failures"] << " failing B/2B (left out)";
          std::cout << "\n";
        }
        const auto mhz = [](const json& v) {
          return v.is_null() ? std::string("not recorded")
                             : std::to_string(std::lround(v.get<double>())) + " MHz";
        };
        std::cout << "      mean SM clock (median): now " << mhz(c["sm_clock_mean_mhz"]["now"])
                  << ", the table's rows " << mhz(c["sm_clock_mean_mhz"]["table"]) << "\n";
        // A held-out point (bundle prediction) or, with "row ", a re-measured table row.
        const auto print_point = [](const json& p, const char* prefix) {
          std::cout << "      " << prefix << p["point"].dump() << ": measured "
                    << std::setprecision(3) << p["measured_us"].get<double>() << " us";
          if (p.contains("predicted_us"))
            std::cout << ", bundle " << p["predicted_us"].get<double>() << " us, error "
                      << 100 * p["relative_error"].get<double>() << "%";
          if (p.value("miss_within_run_movement", false))
            std::cout << " (within its runs' movement, " << 100 * p["run_spread"].get<double>()
                      << "%)";
          if (p.contains("table_us"))
            std::cout << ", table " << p["table_us"].get<double>() << " us";
          if (p.contains("sm_clock_mean_mhz"))
            std::cout << ", at " << std::lround(p["sm_clock_mean_mhz"].get<double>()) << " MHz";
          if (p.contains("clock_vs_rows"))  // to 0.1 %, with no "-0.0"
            std::cout << " (" << std::setprecision(1) << std::showpos
                      << std::round(1000 * p["clock_vs_rows"].get<double>()) / 10 + 0.0
                      << std::noshowpos << std::setprecision(3) << "% against its rows')";
          if (p.contains("table_sm_clock_mean_mhz") || p.contains("table_row_devices")) {
            std::cout << " (the row:";
            if (p.contains("table_sm_clock_mean_mhz"))
              std::cout << " " << std::lround(p["table_sm_clock_mean_mhz"].get<double>()) << " MHz";
            if (p.contains("table_row_devices")) {
              if (p["table_row_on_this_device"].get<bool>()) {
                std::cout << " on this device";
              } else {
                std::cout << " on";
                for (const auto& d : p["table_row_devices"]) std::cout << " #" << d.get<int>();
              }
            }
            std::cout << ")";
          }
          if (p.contains("unpredicted")) std::cout << ", " << p["unpredicted"].get<std::string>();
          if (p.contains("bank_check")) std::cout << ", failed B/2B";
          std::cout << "\n";
        };
        for (const auto& p : c["points"]) print_point(p, "");
        for (const auto& p : c["table_rows"]["points"]) print_point(p, "row ");
        std::cout.unsetf(std::ios::fixed);
      }
    }
    std::cout << (within ? "within tolerance\n" : "OUTSIDE TOLERANCE\n");
  }
  return within ? 0 : kOutsideTolerance;
}

}  // namespace moe::cli
