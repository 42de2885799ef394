// harness inspect FILE.h5|BUNDLE: coverage, failed weight-bank points, dropped records, the
// co-location verdict and the sanity block, as text or JSON.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <tuple>
#include <vector>

#include "bundle/bundle_meta.h"
#include "bundle/fidelity.h"
#include "bundle/format.h"
#include "bundle/hardware.h"
#include "bundle/sanity.h"
#include "bundle/summary.h"
#include "core/contract.h"
#include "core/files.h"
#include "harness/commands.h"
#include "store/acquisition_file.h"
#include "store/campaign.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using nlohmann::json;

namespace moe::cli {

namespace {

json colocation_of(const fs::path& variant_dir) {
  const auto verdict = load_colocation(variant_dir);
  if (!verdict) return nullptr;
  const auto& v = *verdict;
  return {{"file", (variant_dir / bundle_format::kColocationFile).string()},
          {"passed", v.value("passed", false)},
          {"allowed_regime", v["allowed_regime"]},
          {"label", v.value("label", "")}};
}

// `held_out_points`: each fidelity table also lists every held-out point (--held-out).
json inspect_file(const std::string& path, bool held_out_points) {
  const auto acq = read_acquisition(path);
  // A text the file keeps as JSON that does not parse is named, not left to the parser's message.
  if (const auto bad = unparsable_json(acq)) throw FileError("'" + path + "': " + *bad);
  const auto summaries = summarize(acq);
  // Cells per table: the planned grid's parts, its held-out set, then each refinement stage's,
  // then each set of anchors (the file holds them by name, where part10 precedes part2).
  std::vector<std::size_t> order(summaries.size());
  std::vector<std::tuple<std::string, int, int, bool, int>> keys;
  for (std::size_t i = 0; i < acq.cells.size(); ++i) {
    const auto j = json::parse(acq.cells[i].info.json);
    const auto role = cell_role(j);
    keys.emplace_back(Target::from_json(j.at("target")).cell_id() + "." + summaries[i].component,
                      role.anchors, role.stage, role.held_out, role.part);
  }
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
  json cells = json::array();
  for (const auto i : order) {
    const auto& c = summaries[i];
    cells.push_back({{"cell", c.id},
                     {"component", c.component},
                     {"rounds_complete", c.rounds_complete},
                     {"rounds_planned", c.rounds_planned},
                     {"points", c.points.size()},
                     {"bank_checked_points", c.checked_points},
                     {"bank_failed_points", c.failed_points},
                     {"max_relative_change", c.max_relative_change},
                     {"unsteady_points", c.unsteady_points},
                     {"max_run_spread", c.max_run_spread}});
  }
  json fidelity = json::array();
  const double tolerance = Contract::parse(acq.contract_json).fidelity.tolerance;
  for (const auto& f : evaluate_fidelity(acq, summaries, stored_expert_waves(acq))) {
    auto j = f.to_json(tolerance);
    j["table"] = f.target.label(f.component);
    j["complete"] = f.complete;
    if (held_out_points) j["held_out_points"] = f.held_out_points_json(tolerance);
    fidelity.push_back(j);
  }
  auto sanity = sanity_of(acq, summaries);
  // The campaign's own count of dropped activity records (summed over ranks at every commit).
  json dropped = nullptr, campaign_problem = nullptr;
  if (const auto state = fs::path(path).parent_path() / kCampaignFile; fs::exists(state)) {
    try {
      dropped = load_campaign_document(state)["records"].value("dropped", std::int64_t{0});
      if (dropped.get<std::int64_t>() != 0)
        sanity.flag(dropped.dump() + " activity records were dropped (campaign.json)");
    } catch (const std::exception& e) {
      campaign_problem = e.what();
      sanity.flag(e.what());
    }
  }
  json devices = json::array();
  try {
    devices = hardware_identity(acq)["devices"];
  } catch (const std::runtime_error& e) {  // several device kinds: the publisher refuses it
    sanity.flag(e.what());
  }
  const auto json_contract = json::parse(acq.contract_json);
  const fs::path variant =
      fs::path(acq.attributes.count("out_root") ? acq.attributes.at("out_root") : "") /
      (acq.attributes.count("variant") ? acq.attributes.at("variant") : "");
  return {{"kind", "acquisition"},
          {"file", path},
          {"backend", json_contract.value("backend", "")},
          {"backend_version", backend_version_of(json_contract)},
          {"timing", json_contract.value("timing", "")},
          // [{run, from, to}]: resumes that raised fidelity.max_added_points (core/contract.h)
          {"refinement_cap_raises", acq.attributes.count("refinement_cap_raises")
                                        ? json::parse(acq.attributes.at("refinement_cap_raises"))
                                        : json::array()},
          {"cells", cells},
          {"fidelity", fidelity},
          {"devices", devices},
          {"collective_tables", acq.collectives.size()},
          {"fidelity_evaluations_recorded", acq.fidelity_evaluations.size()},
          {"dropped_records", dropped},  // null: no campaign.json beside the file
          {"campaign_problem", campaign_problem},
          {"colocation", colocation_of(variant)},
          {"sanity", sanity.to_json()}};
}

json inspect_bundle(const fs::path& dir) {
  const auto meta = load_bundle_meta(dir);
  if (meta.empty()) throw BundleError(dir.string() + ": no meta.yaml here");
  SanityBlock sanity;
  json entries = json::array();
  for (const auto section : {Section::moe_components, Section::collectives})
    for (const auto& [tp, list] : meta.per_tp(section))
      for (const auto& e : list) {
        const auto csv_path = dir / tp_dir_name(tp) / e.path;
        const auto csv = read_file(csv_path);
        const bool checksum_ok = sha256_hex(csv) == e.coverage.value("table_sha256", "");
        if (!checksum_ok)
          sanity.flag("checksum mismatch: " + csv_path.string() +
                      " differs from its table_sha256 in meta.yaml");
        std::istringstream in(csv);
        std::string line;
        std::getline(in, line);
        std::vector<double> times;
        std::size_t rows = 0;
        while (std::getline(in, line)) {
          ++rows;
          const auto f = split_csv_line(line);
          const double t = csv_real(f.at(5));  // time_us in both table kinds
          times.push_back(t);
          sanity.add(section == Section::moe_components ? "time_us" : "collective_time_us", t);
          if (section == Section::collectives)
            sanity.add("collective_busbw_gbps", csv_real(f.at(7)));
        }
        sanity.add_table(csv_path.string(), times);
        if (e.coverage.contains("completion"))
          sanity.add("completion", e.coverage["completion"].get<double>(),
                     SanityBlock::Kind::ratio);
        json item = {
            {"section", section == Section::moe_components ? bundle_format::kComponentsDir
                                                           : bundle_format::kCollectivesDir},
            {"target", e.target.to_json()},
            {"path", e.path},
            {"rows", rows},
            {"checksum_ok", checksum_ok},
            {"backend", e.contract.value("backend", "")},
            {"backend_version", backend_version_of(e.contract)}};
        if (const auto fidelity = e.fidelity(); !fidelity.empty()) {
          item["fidelity"] = fidelity;
          const auto components = e.fidelity_components();  // items() refers to it
          for (const auto& [name, c] : components.items())
            sanity.add("held_out_p95", c["held_out"]["p95_abs_relative_error"].get<double>());
        }
        if (e.provenance.contains("hardware")) item["hardware"] = e.provenance["hardware"];
        if (e.contract.contains("placement")) item["placement"] = e.contract["placement"];
        if (e.coverage.contains("conditioning_summary")) {
          item["conditioning_summary"] = e.coverage["conditioning_summary"];
          sanity.add("failed_points", e.coverage["conditioning_summary"].value("failed_points", 0),
                     SanityBlock::Kind::counter);
        }
        entries.push_back(item);
      }
  return {{"kind", "bundle"},
          {"variant", dir.string()},
          {"entries", entries},
          {"colocation", colocation_of(dir)},
          {"sanity", sanity.to_json()}};
}

// The devices of a hardware identity, numbered as rows_per_device refers to them.
void print_devices(const json& devices, std::ostream& os) {
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto& d = devices[i];
    os << "    #" << i << " " << d.value("device", "?") << (d.contains("uuid") ? " " : "")
       << d.value("uuid", "") << " (host " << d.value("host", "?") << ")\n";
  }
}

// One line of held-out errors over a subset (HeldOutStatistics::errors_json) under `label`.
void print_errors(const std::string& label, const json& r, std::ostream& os) {
  char line[256];
  std::snprintf(line, sizeof(line), "      %s: %d points, median %.2f%%, p95 %.2f%%, max %.2f%%\n",
                label.c_str(), r["count"].get<int>(),
                100 * r["median_abs_relative_error"].get<double>(),
                100 * r["p95_abs_relative_error"].get<double>(),
                100 * r["max_abs_relative_error"].get<double>());
  os << line;
}

// Every held-out point (inspect --held-out), as held_out_points_json lists them.
void print_held_out_points(const json& points, std::ostream& os) {
  os << "      held-out points (" << points.size() << ", the largest |error| first):\n";
  char line[256];
  for (const auto& p : points) {
    if (p["predicted_us"].is_null()) {
      os << "        " << p["point"].dump() << ": measured " << p["measured_us"].get<double>()
         << " us, not predicted (" << p["unpredicted_reason"].get<std::string>() << ")\n";
      continue;
    }
    std::snprintf(line, sizeof(line), "        %s: measured %.3f us, interpolated %.3f us, %+.2f%%",
                  p["point"].dump().c_str(), p["measured_us"].get<double>(),
                  p["predicted_us"].get<double>(),
                  100 * (p["predicted_us"].get<double>() / p["measured_us"].get<double>() - 1));
    os << line;
    if (p["miss"].get<bool>())
      os << (p["miss_within_run_movement"].get<bool>() ? "; a miss within its runs' movement"
                                                       : "; MISS");
    if (!p["balanced"].is_null())
      os << (p["balanced"].get<bool>() ? "; balanced" : "; off balance");
    if (p["spans_launch_wave_step"] == true) os << "; across a launch-wave step";
    if (p["same_device"] == false) os << "; from another device's rows too";
    os << "\n";
  }
}

// Repeatability on one device and across devices, and each pair of devices' offset (older
// bundles and campaigns on one device without recorded runs have no by_device).
void print_repeatability_by_device(const json& repeatability, std::ostream& os) {
  if (!repeatability.contains("by_device")) return;
  const auto& d = repeatability["by_device"];
  char line[256];
  for (const char* key : {"same_device", "across_devices"}) {
    const auto& r = d[key];
    if (r["count"].get<int>() == 0) continue;
    std::snprintf(line, sizeof(line), "        %s: %d points, median %.2f%%, max %.2f%%\n",
                  key == std::string("same_device") ? "on the same device" : "on two devices",
                  r["count"].get<int>(), 100 * r["median_abs_relative_difference"].get<double>(),
                  100 * r["max_abs_relative_difference"].get<double>());
    os << line;
  }
  for (const auto& p : d["device_pairs"]) {
    std::snprintf(
        line, sizeof(line),
        "        grid on #%d, held-out on #%d: %d points, grid - held-out median %+.2f%%\n",
        p["grid_device"].get<int>(), p["held_out_device"].get<int>(), p["count"].get<int>(),
        100 * p["median_signed_relative_difference"].get<double>());
    os << line;
  }
}

// Held-out statistics per table, the worst points and every grid point that failed B/2B.
void print_fidelity(const json& tables, std::ostream& os) {
  for (const auto& t : tables) {
    const auto& h = t["held_out"];
    char line[256];
    std::snprintf(line, sizeof(line),
                  "    %s: held-out %s (tolerance %.2f%%); %d outside support, %d left out for "
                  "failing B/2B; refinement %d stages, +%d points\n",
                  t["table"].get<std::string>().c_str(), held_out_summary(t).c_str(),
                  100 * t["tolerance"].get<double>(), h["unpredicted"].get<int>(),
                  h["bank_failures"].get<int>(), t["refinement"]["stages"].get<int>(),
                  t["refinement"]["added_points"].get<int>());
    os << line;
    const auto clock = t.value("sm_clock_mean_mhz", json::object());
    if (clock.value("recorded", 0) > 0)
      std::snprintf(line, sizeof(line),
                    "      mean SM clock of its rows: median %.0f MHz (%.0f-%.0f), recorded at %d "
                    "of %d rows\n",
                    clock["median"].get<double>(), clock["min"].get<double>(),
                    clock["max"].get<double>(), clock["recorded"].get<int>(),
                    clock["rows"].get<int>());
    else
      std::snprintf(line, sizeof(line), "      mean SM clock of its rows: not recorded (%s)\n",
                    clock.empty() ? "published before harness recorded it"
                                  : "the backend has no device clock");
    os << line;
    // Since rounds record their run: which device measured the rows (#: the devices listed
    // under "measured on"), and the held-out errors with and without another device's rows.
    if (const auto rows = t.value("rows_per_device", json::array()); !rows.empty()) {
      os << "      rows by measuring device:";
      for (const auto& d : rows) {
        if (d["device"].is_null())
          os << " unrecorded";
        else
          os << " #" << d["device"];
        os << " " << d["rows"];
      }
      os << "\n";
    }
    if (h.contains("by_device"))
      for (const char* side : {"same_device", "across_devices"}) {
        const auto& r = h["by_device"][side];
        const std::string label =
            std::string("interpolated ") + (side == std::string("same_device")
                                                ? "from its own device's rows"
                                                : "from another device's rows too");
        if (r["count"].get<int>() == 0)
          os << "      " << label << ": no points\n";
        else
          print_errors(label, r, os);
      }
    if (h.contains("by_waves"))  // experts tables of a backend that declares its launch waves
      for (const char* side : {"same_waves", "across_waves"}) {
        const auto& r = h["by_waves"][side];
        const std::string label = side == std::string("same_waves")
                                      ? "interpolated within its launch waves"
                                      : "interpolated across a launch-wave step";
        if (r["count"].get<int>() == 0)
          os << "      " << label << ": no points\n";
        else
          print_errors(label, r, os);
      }
    if (h.contains("by_routing"))  // experts tables since the split existed
      for (const char* routing : {"balanced", "off_balance"})
        print_errors(
            routing == std::string("balanced") ? "balanced routing" : "off-balance routing",
            h["by_routing"][routing], os);
    for (const auto& w : h["worst"]) {
      std::snprintf(line, sizeof(line), "      worst %s: measured %.3f us, interpolated %.3f us\n",
                    w["point"].dump().c_str(), w["measured_us"].get<double>(),
                    w["predicted_us"].get<double>());
      os << line;
    }
    if (t.contains("held_out_points")) print_held_out_points(t["held_out_points"], os);
    // Older bundles have no such key; none where refinement took no held-out point.
    if (const auto summary = repeatability_summary(t); !summary.empty()) {
      os << "      repeatability: " << summary << "\n";
      print_repeatability_by_device(t["repeatability"], os);
      for (const auto& m : t["repeatability"]["most_apart"]) {
        std::snprintf(line, sizeof(line), "      most apart %s: held-out %.3f us, grid %.3f us\n",
                      m["point"].dump().c_str(), m["held_out_us"].get<double>(),
                      m["grid_us"].get<double>());
        os << line;
      }
    }
    // Rows measured again on devices new to the campaign (absent where none was).
    const auto anchors = t.value("device_anchors", json::object());
    for (const auto& p : anchors.value("device_pairs", json::array()))
      os << "      anchors: " << anchor_pair_summary(p) << "\n";
    if (const auto off = anchor_clock_off_summary(anchors); !off.empty())
      os << "      anchors: " << off << "\n";
    for (const auto& p : t["failed_points"])
      os << "      FAILED B/2B at (N, A, M) = " << p.dump() << " (not in the table)\n";
    // Older bundles have no such key.
    for (const auto& c : t["refinement"].value("kernel_changes", json::array()))
      os << "      kernels change between token rows " << c[0] << " and " << c[1]
         << " (a step may lie between them)\n";
  }
}

void print_text(const json& r, std::ostream& os) {
  if (r["kind"] == "acquisition") {
    os << "acquisition " << r["file"].get<std::string>() << " (" << r["backend"].get<std::string>()
       << " version " << r["backend_version"] << ", " << r["timing"].get<std::string>() << ")\n";
    std::int64_t complete = 0, point_rounds = 0, point_rounds_done = 0;
    for (const auto& c : r["cells"]) {
      const auto done = c["rounds_complete"].get<std::int64_t>();
      const auto planned = c["rounds_planned"].get<std::int64_t>();
      const auto points = c["points"].get<std::int64_t>();
      complete += done == planned ? 1 : 0;
      point_rounds += points * planned;
      point_rounds_done += points * done;
    }
    os << "  " << complete << " of " << r["cells"].size() << " cells complete, "
       << point_rounds_done << " of " << point_rounds << " point-rounds\n";
    for (const auto& raise : r["refinement_cap_raises"])
      os << "  fidelity.max_added_points raised from " << raise["from"] << " to " << raise["to"]
         << " by run " << raise["run"] << " (refinement went on past the earlier cap)\n";
    for (const auto& c : r["cells"])
      os << "  " << c["cell"].get<std::string>() << ": " << c["rounds_complete"] << "/"
         << c["rounds_planned"] << " rounds, " << c["points"] << " points, B/2B failed "
         << c["bank_failed_points"] << "/" << c["bank_checked_points"]
         << unsteady_runs(c["unsteady_points"].get<int>(), c["max_run_spread"].get<double>())
         << "\n";
    os << "  collective tables: " << r["collective_tables"] << "; dropped records: "
       << (r["dropped_records"].is_null() ? std::string("unknown (no campaign.json)")
                                          : r["dropped_records"].dump())
       << "\n";
    if (!r["campaign_problem"].is_null())
      os << "  campaign.json: " << r["campaign_problem"].get<std::string>() << "\n";
    os << "  held-out evaluations recorded by refinement: " << r["fidelity_evaluations_recorded"]
       << " (/fidelity; the statistics below are recomputed from the rounds)\n";
    if (!r["devices"].empty()) os << "  measured on:\n";
    print_devices(r["devices"], os);
    print_fidelity(r["fidelity"], os);
  } else {
    os << "bundle " << r["variant"].get<std::string>() << "\n";
    for (const auto& e : r["entries"])
      os << "  " << e["section"].get<std::string>() << " " << e["path"].get<std::string>() << ": "
         << e["rows"] << " rows, checksum " << (e["checksum_ok"].get<bool>() ? "ok" : "MISMATCH")
         << (e.contains("conditioning_summary")
                 ? ", B/2B failed " + e["conditioning_summary"]["failed_points"].dump() + "/" +
                       e["conditioning_summary"]["checked_points"].dump()
                 : "")
         << "\n";
    for (const auto& e : r["entries"]) {
      os << "  measured on";
      if (!e.contains("hardware")) os << ": unknown (no hardware identity in this entry)";
      os << ": " << e["path"].get<std::string>() << "\n";
      print_devices(e.value("hardware", json::object()).value("devices", json::array()), os);
    }
    for (const auto& e : r["entries"]) {
      const auto p = e.value("placement", json::object());
      os << "  placement of " << e["path"].get<std::string>() << ": "
         << (p.empty() ? std::string("not recorded")
                       : std::string(p["verified"].get<bool>() ? "verified" : "UNVERIFIED") +
                             ", regimes " + p["regimes"].dump() + ", " + p["gates"].dump())
         << "\n";
    }
    for (const auto& e : r["entries"])
      if (e.contains("fidelity")) {
        os << "  fidelity of " << e["path"].get<std::string>() << ": "
           << e["fidelity"]["status"].get<std::string>() << "\n";
        json tables = json::array();
        for (const auto& [name, c] : e["fidelity"]["components"].items()) {
          auto t = c;
          t["table"] = name;
          tables.push_back(t);
        }
        print_fidelity(tables, os);
      }
  }
  const auto& c = r["colocation"];
  os << "  co-location: "
     << (c.is_null()
             ? std::string("no verdict")
             : std::string(c["passed"].get<bool>() ? "passed" : "STOPPED") + ", allowed regime " +
                   c["allowed_regime"].dump() + " (" + c["label"].get<std::string>() + ")")
     << "\n";
  os << "sanity:\n";
  for (const auto& [name, f] : r["sanity"]["families"].items())
    os << "  " << name << ": finite " << f["finite"] << ", missing " << f["missing"] << ", min "
       << f["min"] << ", max " << f["max"] << ", distinct " << f["distinct"] << "\n";
  if (r["sanity"]["red_flags"].empty()) os << "  red flags: none\n";
  for (const auto& fl : r["sanity"]["red_flags"])
    os << "  RED FLAG: " << fl.get<std::string>() << "\n";
}

}  // namespace

int inspect(const Args& args) {
  std::string target, format = "text";
  bool held_out_points = false;
  po::options_description desc(
      "harness inspect FILE.h5|BUNDLE_VARIANT_DIR [--format text|json] [--held-out]");
  desc.add_options()("path", po::value(&target), "acquisition file or bundle variant directory")(
      "format", po::value(&format), "text | json")(
      "held-out", po::bool_switch(&held_out_points),
      "an acquisition file: list every held-out point of each table (measured, interpolated, "
      "error, and how it was predicted)");
  po::positional_options_description pos;
  pos.add("path", 1);
  if (!parse(args, desc, pos)) return 0;  // --help was printed
  if (target.empty()) throw BundleError("name an acquisition file or a bundle variant directory");
  if (format != "text" && format != "json") throw BundleError("--format must be text or json");
  if (held_out_points && fs::is_directory(target))
    throw BundleError(
        "--held-out lists the held-out points of an acquisition file; a bundle lists each "
        "entry's in its held_out.csv (measured and predicted)");
  const auto r =
      fs::is_directory(target) ? inspect_bundle(target) : inspect_file(target, held_out_points);
  if (format == "json")
    std::cout << r.dump(1) << "\n";
  else
    print_text(r, std::cout);
  return r["sanity"]["red_flags"].empty() ? 0 : 4;
}

}  // namespace moe::cli
