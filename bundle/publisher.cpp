#include "bundle/publisher.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "bundle/bundle_meta.h"
#include "bundle/fidelity.h"
#include "bundle/format.h"
#include "bundle/hardware.h"
#include "bundle/sanity.h"
#include "bundle/summary.h"
#include "core/contract.h"
#include "core/files.h"
#include "core/statistics.h"
#include "core/timestamp.h"
#include "lookup/tables.h"
#include "store/acquisition_file.h"
#include "store/campaign.h"

namespace moe {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A CSV number with `decimals` fixed decimals (times and bandwidths 4, clocks 1).
std::string csv_number(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

struct TargetWork {
  Section section = Section::moe_components;
  Target target;
  const TargetContract* target_contract = nullptr;
  json contract;         // the published contract of this table
  std::string label;     // tp1/dp2_ep2_rank0_sp0
  fs::path dir;          // bundle directory of the target
  std::string rel_path;  // relative to tp<N>/
  std::string csv;
  std::string samples;        // samples.jsonl content (optional)
  std::string held_out;       // held_out.csv content (component tables)
  std::string row_clocks;     // row_clocks.csv content (component tables)
  std::string triangulation;  // triangulation.json content (empty: no experts rows with A > 0)
  json coverage;
};

// The device pairs of an entry's device_anchors, and the anchors left out for their clock as a
// pair (-1, -1), by their integers only (the medians went through YAML in a published entry):
// what tells anchors measured since publication from those it holds.
std::set<std::array<int, 3>> anchor_pairs(const json& device_anchors) {
  std::set<std::array<int, 3>> out;
  if (!device_anchors.is_object()) return out;
  for (const auto& p : device_anchors.value("device_pairs", json::array()))
    out.insert({p.at("row_device").get<int>(), p.at("anchor_device").get<int>(),
                p.at("count").get<int>()});
  if (device_anchors.contains("clock_off"))
    out.insert({-1, -1, device_anchors.at("clock_off").at("count").get<int>()});
  return out;
}

// The components whose device anchors in `fresh` (this file's coverage of a table already
// published with the same contract and table) differ from those of the published `coverage`: a
// run on a device new to the campaign measured them after the table was published, or this build
// counts them otherwise (e.g. leaves some out for their clock). `replaced`: the published entry
// held anchors of one of those components already, which publishing replaces.
struct AnchorUpdate {
  std::vector<std::string> components;
  bool replaced = false;
};
AnchorUpdate anchors_changed_since(const json& coverage, const json& fresh) {
  AnchorUpdate out;
  const json none = json::object();
  const json published = coverage.value("fidelity", none).value("components", none);
  const json measured = fresh.value("fidelity", none).value("components", none);
  for (const auto& [component, block] : measured.items()) {
    const auto mine = anchor_pairs(block.value("device_anchors", json()));
    const auto theirs = published.contains(component)
                            ? anchor_pairs(published.at(component).value("device_anchors", json()))
                            : std::set<std::array<int, 3>>{};
    if (mine.empty() || mine == theirs) continue;
    out.components.push_back(component);
    out.replaced = out.replaced || !theirs.empty();
  }
  return out;
}

}  // namespace

PublishReport publish(const std::string& h5_path, const PublishOptions& options) {
  return publish(read_acquisition(h5_path), h5_path, options);
}

PublishReport publish(const StoredAcquisition& acq, const std::string& h5_path,
                      const PublishOptions& options) {
  // The campaign's record counters (campaign.json beside the file) must balance with the rows in
  // complete rounds, with nothing dropped.
  try {
    check_record_balance(fs::path(h5_path).parent_path(), acq.complete_rows());
  } catch (const std::runtime_error& e) {
    throw PublishError("nothing published from '" + h5_path + "': " + e.what());
  }
  Contract contract;
  try {
    contract = Contract::parse(acq.contract_json);
  } catch (const ContractError& e) {
    throw PublishError("nothing published from '" + h5_path + "': " + e.what());
  }
  const auto attr = [&](const char* k) {
    auto it = acq.attributes.find(k);
    return it == acq.attributes.end() ? std::string() : it->second;
  };
  const std::string out_root = options.out_root.empty() ? attr("out_root") : options.out_root;
  const std::string variant = options.variant.empty() ? attr("variant") : options.variant;
  if (out_root.empty() || variant.empty())
    throw PublishError("'" + h5_path +
                       "' records no out_root/variant; pass --out-root and --variant");
  try {
    require_path_component(variant, options.variant.empty() ? "the file's variant" : "--variant");
  } catch (const std::invalid_argument& e) {
    throw PublishError(std::string("nothing published: ") + e.what());
  }
  const fs::path variant_dir = fs::path(out_root) / variant;

  std::vector<ComponentFidelity> fidelity;
  ExpertWaves waves;  // the backend's declared launch waves (row_clocks.csv, held_out.by_waves)
  json hardware, runs, placement, placement_summary;
  try {
    waves = options.declared_waves ? options.declared_waves(acq) : ExpertWaves{};
    fidelity = evaluate_fidelity(acq, summarize(acq), waves);
    hardware = hardware_identity(acq);
    runs = run_history(acq);
    placement = placement_of(acq);
    placement_summary = placement;
    placement_summary.erase("runs");  // per run, in the provenance
  } catch (const std::exception& e) {
    throw PublishError("nothing published from '" + h5_path + "': " + e.what());
  }
  const double tolerance = contract.fidelity.tolerance;
  std::vector<TargetWork> work;
  std::vector<std::string> problems;
  for (const auto& t : contract.targets) {
    TargetWork w;
    w.target = t.target;
    w.target_contract = &t;
    w.label = w.target.label();
    w.rel_path = bundle_format::components_path(w.target);
    w.dir = bundle_format::target_dir(variant_dir, w.target, bundle_format::kComponentsDir);
    std::ostringstream csv, samples, held_out, row_clocks;
    std::map<Component, std::vector<TableRow>> published;  // the rows of csv, in its order
    csv << bundle_format::kComponentsHeader << "\n";
    held_out << bundle_format::kHeldOutHeader << "\n";
    row_clocks << bundle_format::kRowClocksHeader << "\n";
    int rows = 0, checked = 0, failed = 0, unsteady = 0;
    double max_change = 0, max_spread = 0;
    bool ok = true, accepted = false;
    json per_component = json::object();
    for (const auto component : t.components()) {
      const std::string name(to_string(component));
      const auto f = std::find_if(fidelity.begin(), fidelity.end(), [&](const auto& x) {
        return x.target.cell_id() == t.target.cell_id() && x.component == component;
      });
      if (f == fidelity.end()) {
        problems.push_back(w.label + ": component " + name + " is missing from the file");
        ok = false;
        continue;
      }
      if (!f->complete) {
        problems.push_back(w.label + ": " + name +
                           " is incomplete (a round of the grid, its held-out set or a refinement "
                           "stage is missing); run acquire again to resume");
        ok = false;
        continue;
      }
      for (const auto index : f->cells) {
        const auto& cell = acq.cells[index];
        for (const auto& r : cell.rounds)
          for (const auto& c : r.checks)
            if (!c.pass) {
              problems.push_back(w.label + ": " + name + " failed its correctness check (cell " +
                                 cell.info.id + ", round " + std::to_string(r.round) + ")");
              ok = false;
            }
      }
      // The fidelity gate: no grid point may have failed B/2B at its last measurement, and the
      // held-out p95 must meet the tolerance.
      std::vector<std::string> misses;
      if (!f->failed.empty())
        misses.push_back(std::to_string(f->failed.size()) +
                         " grid points failed the weight-bank control after every re-measure");
      if (f->statistics.p95 > tolerance)
        misses.push_back("held-out p95 error " + std::to_string(f->statistics.p95 * 100) +
                         "% exceeds the tolerance " + std::to_string(tolerance * 100) + "%");
      if (!misses.empty()) {
        std::string why;
        for (const auto& m : misses) why += (why.empty() ? "" : "; ") + m;
        if (options.accept_failures) {
          accepted = true;
        } else {
          problems.push_back(w.label + ": " + name + ": " + why +
                             " (see harness inspect; publish --accept-failures records them)");
          ok = false;
        }
      }
      int published_points = 0;
      for (const auto& p : f->table) {
        if (p.relative_change) {
          ++checked;
          failed += p.bank_check_passed ? 0 : 1;
          max_change = std::max(max_change, *p.relative_change);
        }
        if (p.run_spread) {
          unsteady += unsteady_run(*p.run_spread) ? 1 : 0;
          max_spread = std::max(max_spread, *p.run_spread);
        }
        if (!p.bank_check_passed) continue;  // listed in coverage.fidelity.failed_points
        csv << name << ",eager," << p.point.tokens << "," << p.point.activated << ","
            << p.point.assignments << "," << csv_number(*p.time_us, 4) << "\n";
        row_clocks << name << "," << p.point.tokens << "," << p.point.activated << ","
                   << p.point.assignments << ","
                   << (p.sm_clock_mean_mhz ? csv_number(*p.sm_clock_mean_mhz, 1) : "") << ",";
        for (std::size_t d = 0; d < p.devices.size(); ++d)
          row_clocks << (d ? ";" : "") << p.devices[d];
        row_clocks << "," << (p.run_spread ? csv_number(*p.run_spread, 4) : "") << ",";
        if (waves && component == Component::experts && p.point.activated > 0)
          row_clocks << bundle_format::launch_waves_field(
              waves(p.point.activated, p.point.assignments));
        row_clocks << "\n";
        published[component].push_back({p.point, *p.time_us});
        ++published_points;
      }
      rows += published_points;
      if (published_points == 0) {
        problems.push_back(w.label + ": " + name +
                           " has no point that passed the weight-bank control");
        ok = false;
      }
      per_component[name] = f->to_json(tolerance);
      for (const auto& h : f->held_out)
        held_out << name << "," << h.point.tokens << "," << h.point.activated << ","
                 << h.point.assignments << "," << csv_number(h.measured_us, 4) << ","
                 << (h.predicted_us ? csv_number(*h.predicted_us, 4) : "") << "\n";
      if (options.samples)
        for (const auto index : f->cells) {
          const auto& cell = acq.cells[index];
          const auto role = cell_role(json::parse(cell.info.json));
          for (const auto& r : cell.rounds)
            for (const auto& s : r.samples) {
              const auto& p = cell.info.points.at(static_cast<std::size_t>(s.point));
              samples << json{{"component", name},
                              {"tokens", p.tokens},
                              {"activated_experts", p.activated},
                              {"local_assignments", p.assignments},
                              {"stage", role.stage},
                              {"held_out", role.held_out},
                              {"round", s.round},
                              {"arm", s.arm},
                              {"bank", s.bank},
                              {"forward", s.forward},
                              {"time_us", s.value_us},
                              {"activity_count", s.activity_count}}
                             .dump()
                      << "\n";
            }
        }
    }
    if (!ok) continue;
    w.csv = csv.str();
    w.samples = samples.str();
    w.held_out = held_out.str();
    w.row_clocks = row_clocks.str();
    w.contract = contract.component_table(t);
    w.contract["placement"] = placement_summary;  // the co-location regime: a condition
    // The triangulation every reader interpolates the experts rows over (lookup uses it, it does
    // not triangulate again): the one of the rows as published.
    json triangulation_coverage = nullptr;
    try {
      const ComponentTables published_tables(
          published, {contract.geometry.experts, contract.geometry.top_k,
                      ExpertOwnership::of(contract.geometry, t.target).local_experts});
      if (auto stored = stored_triangulation(published_tables)) {
        w.triangulation = std::move(stored->text);
        triangulation_coverage = std::move(stored->coverage);
      }
    } catch (const LookupError& e) {
      problems.push_back(w.label + ": " + e.what());
      continue;
    }
    SanityBlock table_sanity;
    {
      std::istringstream rows_in(w.csv);
      std::string row;
      std::getline(rows_in, row);
      while (std::getline(rows_in, row))
        table_sanity.add("time_us", std::stod(row.substr(row.rfind(',') + 1)));
    }
    w.coverage = {
        {"sanity", table_sanity.to_json()},
        {"completion", 1.0},
        {"completed_rounds", contract.conditioning.rounds},
        {"planned_rounds", contract.conditioning.rounds},
        {"rows", rows},
        {"table_sha256", sha256_hex(w.csv)},
        {"triangulation", triangulation_coverage},
        {"conditioning_summary",
         {{"checked_points", checked},
          {"failed_points", failed},
          {"max_relative_change", max_change},
          {"unsteady_points", unsteady},
          {"max_run_spread", max_spread}}},
        {"fidelity",
         {{"status", accepted ? "accepted-with-failures" : "validated"},
          {"components", per_component},
          {"held_out_table",
           {{"file", bundle_format::kHeldOutFile}, {"sha256", sha256_hex(w.held_out)}}},
          {"row_clocks_table",
           {{"file", bundle_format::kRowClocksFile}, {"sha256", sha256_hex(w.row_clocks)}}}}}};
    work.push_back(std::move(w));
  }
  // Collective tables beside the MoE tables.
  for (const auto& c : acq.collectives) {
    const auto* mine = [&]() -> const TargetWork* {
      for (const auto& w : work)
        if (w.target.cell_id() == c.target_id) return &w;
      return nullptr;
    }();
    if (!mine) continue;  // its MoE table is not publishable; the error above says why
    TargetWork w;
    w.section = Section::collectives;
    w.target = mine->target;
    w.label = mine->label + " collectives";
    w.rel_path = bundle_format::collectives_path(w.target);
    w.dir = bundle_format::target_dir(variant_dir, w.target, bundle_format::kCollectivesDir);
    std::ostringstream csv;
    csv << bundle_format::kCollectivesHeader << "\n";
    for (const auto& r : c.rows)
      csv << r.name << "," << r.op << "," << r.group_size << "," << r.tokens << "," << r.bytes
          << "," << csv_number(r.time_us, 4) << "," << csv_number(r.algbw_gbps, 4) << ","
          << csv_number(r.busbw_gbps, 4) << "," << csv_number(r.model_time_us, 4) << ","
          << csv_number(r.steady_time_us, 4) << "\n";
    w.csv = csv.str();
    w.contract = contract.collective_table(*mine->target_contract, c.backend);
    w.contract["placement"] = placement_summary;
    w.coverage = {{"rows", c.rows.size()}, {"table_sha256", sha256_hex(w.csv)}};
    work.push_back(std::move(w));
  }
  if (!problems.empty()) {
    std::string msg = "nothing published from '" + h5_path + "':";
    for (const auto& p : problems) msg += "\n  " + p;
    throw PublishError(msg);
  }

  // Writer locks of every target first (fail fast on a second writer), then the variant lock.
  fs::create_directories(variant_dir);
  std::vector<std::unique_ptr<FileLock>> writer_locks;
  for (const auto& w : work) {
    fs::create_directories(w.dir);
    writer_locks.push_back(
        std::make_unique<FileLock>(w.dir / bundle_format::kWriterLock, FileLock::Mode::try_once));
  }
  FileLock meta_lock(variant_dir / bundle_format::kMetaLock, FileLock::Mode::wait);
  auto meta = load_bundle_meta(variant_dir);  // throws on a corrupt meta.yaml: nothing changed
  PublishReport report{variant_dir.string(), {}, {}, {}, {}};
  std::vector<const TargetWork*> fresh;
  std::vector<std::pair<const TargetWork*, AnchorUpdate>> anchored;
  for (const auto& w : work) {
    const auto contract_sha = contract_sha256(w.contract);
    const auto* existing = meta.find(w.target, w.section);
    if (!existing) {
      fresh.push_back(&w);
      continue;
    }
    if (existing->contract_sha256 != contract_sha)
      problems.push_back(
          w.label + " is already published under a different contract (differs in: " +
          json_difference(existing->contract, w.contract) +
          "); a changed condition is a new contract: publish into another --out-root or variant");
    else if (existing->coverage.value("table_sha256", "") != w.coverage.at("table_sha256"))
      problems.push_back(w.label +
                         " is already published from another acquisition of the same contract; "
                         "published tables are never replaced: publish into another --out-root");
    else if (auto update = anchors_changed_since(existing->coverage, w.coverage);
             !update.components.empty())
      anchored.emplace_back(&w, std::move(update));
    else
      report.unchanged.push_back(w.label);
  }
  if (!problems.empty()) {
    std::string msg = "nothing published into '" + variant_dir.string() + "':";
    for (const auto& p : problems) msg += "\n  " + p;
    throw PublishError(msg);
  }
  for (const auto* w : fresh) {
    write_file_atomic(w->dir / fs::path(w->rel_path).filename(), w->csv);
    if (w->section == Section::moe_components) {
      write_file_atomic(w->dir / bundle_format::kHeldOutFile, w->held_out);
      write_file_atomic(w->dir / bundle_format::kRowClocksFile, w->row_clocks);
    }
    if (!w->triangulation.empty())
      write_file_atomic(w->dir / bundle_format::kTriangulationFile, w->triangulation);
    if (options.samples && w->section == Section::moe_components)
      write_file_atomic(w->dir / bundle_format::kSamplesFile, w->samples);
    json provenance = {{"acquisition_file", fs::absolute(h5_path).string()},
                       {"harness_revision", attr("harness_revision")},
                       {"published_utc", utc_now()},
                       {"hardware", hardware},
                       {"runs", runs},
                       {"placement", placement["runs"]},
                       {"job_text", latest_job_text(acq)}};
    meta.add({w->target, w->rel_path, w->contract, "", w->coverage, provenance}, w->section);
    report.published.push_back(w->label);
  }
  // The table and its files stay as published; the entry gains the anchors and the runs that
  // measured them (docs/bundle-format.md#identity-and-updates).
  for (const auto& [w, update] : anchored) {
    auto& entry = *meta.find(w->target, w->section);
    for (const auto& c : update.components)
      entry.coverage["fidelity"]["components"][c]["device_anchors"] =
          w->coverage.at("fidelity").at("components").at(c).at("device_anchors");
    entry.provenance["hardware"] = hardware;
    entry.provenance["runs"] = runs;
    entry.provenance["anchors_added_utc"] = utc_now();
    (update.replaced ? report.reanchored : report.anchored).push_back(w->label);
  }
  if (!fresh.empty() || !anchored.empty()) save_bundle_meta(variant_dir, meta);
  return report;
}

}  // namespace moe
