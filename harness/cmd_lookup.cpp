// harness lookup: component or collective time from a bundle, interpolated inside measured
// support.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "bundle/bundle_meta.h"
#include "core/job_spec.h"
#include "core/statistics.h"
#include "harness/commands.h"
#include "lookup/lookup.h"

namespace po = boost::program_options;

namespace moe::cli {

namespace {

// Tables of the host backends time CPU code or a model: usable to test a simulator's plumbing,
// never as GPU data; say so on stderr (stdout keeps the number).
void warn_if_not_device_data(const nlohmann::json& contract) {
  const auto backend = contract.value("backend", "");
  if (host_backend(backend) || backend == "mpi_host")
    std::cerr << "harness lookup: warning: this table was measured with the " << backend
              << " backend on the host, not on a GPU: use it to test plumbing, not as device "
                 "time\n";
}

nlohmann::json collective_json(const std::string& collective, std::int64_t tokens,
                               const CollectiveResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : r.rows)
    rows.push_back({{"tokens", p.tokens},
                    {"bytes", p.bytes},
                    {"time_us", p.time_us},
                    {"steady_time_us", p.steady_time_us}});
  return {{"collective", collective},
          {"tokens", tokens},
          {"bytes", r.bytes},
          {"time_us", r.time_us},
          {"steady_time_us", r.steady_time_us},
          {"exact", r.exact},
          {"rows", rows}};
}

// The record of a vertex row; nullptr where there is none (an entry published before
// row_clocks.csv).
const RowRecord* record_of(const RowRecords& records, Component c, const GridPoint& point) {
  const auto it = records.find({c, point});
  return it == records.end() ? nullptr : &it->second;
}

// `rows`: the records --explain prints beside its vertices (nullptr without --explain).
nlohmann::json component_json(Deployment& d, Component c, std::int64_t tokens,
                              std::int64_t activated, std::int64_t assignments,
                              const LookupResult& r, const RowRecords* rows) {
  nlohmann::json out = {{"component", std::string(to_string(c))},
                        {"tokens", tokens},
                        {"time_us", r.time_us},
                        {"exact", r.exact}};
  if (c == Component::experts)
    out["activated_experts"] = activated, out["local_assignments"] = assignments;
  if (rows) {
    nlohmann::json v = nlohmann::json::array();
    for (const auto& x : r.vertices) {
      nlohmann::json vertex = {{"tokens", x.point.tokens},
                               {"activated_experts", x.point.activated},
                               {"local_assignments", x.point.assignments},
                               {"time_us", x.time_us},
                               {"weight", x.weight}};
      // How the row was measured: a power-capped clock or another device shows here.
      if (const auto* row = record_of(*rows, c, x.point)) {
        if (row->sm_clock_mean_mhz) vertex["sm_clock_mean_mhz"] = *row->sm_clock_mean_mhz;
        if (!row->devices.empty()) vertex["devices"] = row->devices;
        if (row->run_spread) vertex["run_spread"] = *row->run_spread;
        if (!row->launch_waves.empty()) vertex["launch_waves"] = row->launch_waves;
      }
      v.push_back(vertex);
    }
    out["vertices"] = v;
    if (const auto spans = d.spans_launch_wave_step(c, r)) {
      out["spans_launch_wave_step"] = *spans;
      const auto across = *spans ? d.held_out_errors_across_wave_steps(c) : std::nullopt;
      if (across) out["held_out_across_wave_steps"] = across->to_json();
    }
  }
  const auto held_out = d.held_out_errors(c, tokens, activated, assignments);
  out["held_out"] = held_out ? held_out->to_json() : nlohmann::json(nullptr);
  const auto spread = d.device_spread(c);
  out["device_spread"] = spread ? spread->to_json() : nlohmann::json(nullptr);
  return out;
}

int lookup_collective(const std::string& variant_dir, const DeploymentKey& key,
                      const std::string& collective, std::int64_t tokens,
                      const std::string& format) {
  const auto table = CollectiveTable::load(variant_dir, key);
  warn_if_not_device_data(table.contract());
  const auto r = table.query(collective, tokens);
  if (format == "json")
    std::cout << collective_json(collective, tokens, r).dump(1) << "\n";
  else
    std::cout << std::setprecision(10) << r.time_us << "\n";
  return 0;
}

// One line of a --queries file: "COMPONENT N", "experts N A M" or "COLLECTIVE N".
struct BatchQuery {
  int line = 0;
  std::optional<Component> component;
  std::string collective;
  std::int64_t tokens = 0, activated = 0, assignments = 0;
};

// Reads every query before answering any, so a malformed file is refused whole, naming the line.
std::vector<BatchQuery> read_queries(std::istream& in, const std::string& source) {
  std::vector<BatchQuery> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string name;
    if (!(fields >> name)) continue;
    const auto where = source + ":" + std::to_string(number) + ": ";
    BatchQuery q;
    q.line = number;
    q.component = parse_component(name);
    if (!q.component) q.collective = name;
    const bool experts = q.component == Component::experts;
    std::string extra;
    if (!(fields >> q.tokens) || (experts && !(fields >> q.activated >> q.assignments)) ||
        (fields >> extra))
      throw LookupError(where + "expected '" +
                        (experts ? std::string("experts N A M") : name + " N") +
                        "' (a component or a collective, then whole numbers), got '" + line + "'");
    out.push_back(q);
  }
  if (in.bad()) throw LookupError(source + ": read error");
  return out;
}

// Answers every query of the file, one line each in order: the time, or "error: ..." where the
// table refuses it (outside the support, infeasible, not in the table). Exit status 3 when any
// was refused. The tables the queries need are loaded first, so a bundle that cannot answer at
// all (no such entry, a checksum mismatch) is refused before any answer is printed.
int lookup_batch(const std::string& variant_dir, const DeploymentKey& key,
                 const std::string& source, const std::string& format, bool explain) {
  std::ifstream file;
  if (source != "-") {
    file.open(source);
    if (!file) throw LookupError(source + ": cannot open the queries file");
  }
  const auto queries = read_queries(source == "-" ? std::cin : file, source);
  std::optional<Deployment> deployment;
  const RowRecords* rows = nullptr;  // --explain
  std::optional<CollectiveTable> collectives;
  for (const auto& q : queries) {
    if (q.component && !deployment) {
      deployment.emplace(Deployment::load(variant_dir, key));
      warn_if_not_device_data(deployment->contract());
      if (explain) rows = &deployment->row_records();
    }
    if (!q.component && !collectives) {
      try {
        collectives.emplace(CollectiveTable::load(variant_dir, key));
      } catch (const LookupError& e) {
        throw LookupError(source + ":" + std::to_string(q.line) + ": '" + q.collective +
                          "' is no component (" + component_names() +
                          "), so it names a collective, but " + e.what());
      }
      warn_if_not_device_data(collectives->contract());
    }
  }
  const bool json = format == "json";
  int refused = 0;
  for (const auto& q : queries) {
    nlohmann::json answer;  // --format json
    double time_us = 0;
    try {
      if (q.component) {
        const auto r = deployment->query(*q.component, q.tokens, q.activated, q.assignments);
        time_us = r.time_us;
        if (json)
          answer = component_json(*deployment, *q.component, q.tokens, q.activated, q.assignments,
                                  r, rows);
      } else {
        const auto r = collectives->query(q.collective, q.tokens);
        time_us = r.time_us;
        if (json) answer = collective_json(q.collective, q.tokens, r);
      }
    } catch (const LookupError& e) {
      ++refused;
      if (!json) {
        std::cout << "error: " << e.what() << "\n";
        continue;
      }
      answer = {{"error", e.what()}};
    }
    if (json)
      std::cout << answer.dump() << "\n";
    else
      std::cout << std::setprecision(10) << time_us << "\n";
  }
  if (refused > 0)
    std::cerr << "harness lookup: " << refused << " of " << queries.size()
              << " queries refused (their lines say why)\n";
  return refused > 0 ? 3 : 0;
}

}  // namespace

int lookup(const Args& args) {
  std::string variant_dir, component, collective, format = "text", sp, queries;
  DeploymentKey key;
  std::int64_t tokens = 0, activated = 0, assignments = 0;
  bool explain = false;
  po::options_description desc(
      "harness lookup ROOT/VARIANT --tp T --dp D --rank R (--component C | --collective NAME) "
      "--tokens N [options]\n"
      "harness lookup ROOT/VARIANT --tp T --dp D --rank R --queries FILE [options]");
  desc.add_options()("bundle", po::value(&variant_dir),
                     "bundle variant directory (holds meta.yaml)")(
      "tp", po::value(&key.tp)->required(), "TP degree")("dp", po::value(&key.dp)->required(),
                                                         "DP degree")(
      "rank", po::value(&key.rank)->default_value(0), "rank within the deployment")(
      "sp", po::value(&sp), "0 or 1 (needed only when both exist)")(
      "expect-device", po::value(&key.expect_device),
      "refuse a table not measured on this device (GPU UUID, or part of its name: H200)")(
      "component", po::value(&component), "gate_routing | experts | finalize_copy | wrapper")(
      "collective", po::value(&collective),
      "a collective of the deployment's table (allgather_hidden, ep_dispatch, tp_allreduce, ...)")(
      "tokens", po::value(&tokens),
      "rows (local rows, expert rows N for experts, per-DP-rank tokens for collectives)")(
      "activated", po::value(&activated), "activated local experts A (experts)")(
      "assignments", po::value(&assignments), "local token-expert assignments M (experts)")(
      "explain", po::bool_switch(&explain), "list the measured vertices and weights used")(
      "queries", po::value(&queries),
      "answer every line of FILE (- for stdin): 'COMPONENT N', 'experts N A M' or "
      "'COLLECTIVE N', one answer per line")("format", po::value(&format), "text | json");
  po::positional_options_description pos;
  pos.add("bundle", 1);
  const auto vm = parse(args, desc, pos);
  if (!vm) return 0;  // --help was printed
  if (variant_dir.empty()) throw LookupError("name the bundle variant directory (ROOT/VARIANT)");
  if (!sp.empty()) {
    if (sp != "0" && sp != "1") throw LookupError("--sp must be 0 or 1");
    key.sp = sp == "1";
  }
  if (format != "text" && format != "json") throw LookupError("--format must be text or json");
  if (!queries.empty()) {
    if (!component.empty() || !collective.empty() || vm->count("tokens") ||
        vm->count("activated") || vm->count("assignments"))
      throw LookupError(
          "--queries takes the queries from its file: drop --component, --collective, --tokens, "
          "--activated and --assignments");
    if (explain && format != "json")
      throw LookupError("--explain with --queries needs --format json (one object per line)");
    return lookup_batch(variant_dir, key, queries, format, explain);
  }
  if (component.empty() == collective.empty())
    throw LookupError("name exactly one of --component and --collective (or --queries FILE)");
  if (!vm->count("tokens")) throw LookupError("--tokens N is required");
  if (!collective.empty()) return lookup_collective(variant_dir, key, collective, tokens, format);
  const auto c = parse_component(component);
  if (!c) throw LookupError("unknown component '" + component + "' (" + component_names() + ")");
  if (*c == Component::experts && (!vm->count("activated") || !vm->count("assignments")))
    throw LookupError(
        "experts needs --activated A and --assignments M (the all-remote row is A = M = 0)");
  auto d = Deployment::load(variant_dir, key);
  warn_if_not_device_data(d.contract());
  const auto r = d.query(*c, tokens, activated, assignments);
  const RowRecords* rows = explain ? &d.row_records() : nullptr;
  if (format == "json") {
    std::cout << component_json(d, *c, tokens, activated, assignments, r, rows).dump(1) << "\n";
    return 0;
  }
  std::cout << std::setprecision(10) << r.time_us << "\n";
  if (explain) {
    std::cout << (r.exact
                      ? "exact measured row\n"
                      : "interpolated from " + std::to_string(r.vertices.size()) + " vertices:\n");
    for (const auto& x : r.vertices) {
      std::cout << "  N=" << x.point.tokens << " A=" << x.point.activated
                << " M=" << x.point.assignments << "  time_us=" << x.time_us
                << "  weight=" << x.weight;
      if (const auto* row = record_of(*rows, *c, x.point)) {
        if (row->sm_clock_mean_mhz)
          std::cout << "  at " << std::lround(*row->sm_clock_mean_mhz) << " MHz";
        if (!row->devices.empty()) {
          std::cout << "  on";
          for (const int dev : row->devices) std::cout << " #" << dev;
        }
        // An unsteady row: its run moved more than the steady bound (measurement.md, Protocol 6).
        if (row->run_spread && unsteady_run(*row->run_spread))
          std::cout << "  its run moved " << std::setprecision(2) << std::fixed
                    << 100 * *row->run_spread << " %" << std::defaultfloat << std::setprecision(10);
        if (!row->launch_waves.empty()) {
          std::cout << "  waves ";
          for (std::size_t i = 0; i < row->launch_waves.size(); ++i)
            std::cout << (i ? "+" : "") << row->launch_waves[i];
        }
      }
      std::cout << "\n";
    }
    if (d.spans_launch_wave_step(*c, r).value_or(false)) {
      std::cout << "the vertices run different launch waves: a wave step lies between them";
      const auto h = d.held_out_errors_across_wave_steps(*c);
      if (h && h->count == 0) {
        std::cout << "; no held-out point of the table spans one, so its error there is unmeasured";
      } else if (h) {
        char line[200];
        std::snprintf(line, sizeof(line),
                      "; the table's held-out error across such steps: median %.2f%%, p95 %.2f%%, "
                      "max %.2f%% over %d points",
                      100 * h->median, 100 * h->p95, 100 * h->max, h->count);
        std::cout << line;
      }
      std::cout << "\n";
    }
    if (const auto h = d.held_out_errors(*c, tokens, activated, assignments)) {
      const char* routing = h->routing.empty()         ? ""
                            : h->routing == "balanced" ? " at balanced routing"
                                                       : " off balanced routing";
      char line[200];
      std::snprintf(line, sizeof(line),
                    "the table's held-out error%s: median %.2f%%, p95 %.2f%%, max %.2f%% over %d "
                    "points\n",
                    routing, 100 * h->median, 100 * h->p95, 100 * h->max, h->count);
      std::cout << line;
    }
    if (const auto s = d.device_spread(*c); s && (s->count > 0 || s->pairs > 0)) {
      char line[256];
      if (s->count > 0)
        std::snprintf(line, sizeof(line),
                      "GPUs of the kind measured the same points %.2f%% apart (median; max %.2f%% "
                      "over %d points measured on two devices; the pair furthest apart: %+.2f%%): "
                      "a GPU that did not measure the table may be off by as much\n",
                      100 * s->median, 100 * s->max, s->count, 100 * s->largest_offset);
      else  // only anchors: rows a device new to the campaign measured again
        std::snprintf(line, sizeof(line),
                      "GPUs of the kind measured the same rows %+.2f%% apart (median of the pair "
                      "furthest apart of %d): a GPU that did not measure the table may be off by "
                      "as much\n",
                      100 * s->largest_offset, s->pairs);
      std::cout << line;
    }
  }
  return 0;
}

}  // namespace moe::cli
