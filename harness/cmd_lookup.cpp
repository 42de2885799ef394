// harness lookup: component or collective time from a bundle, interpolated inside measured
// support.
#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/job_spec.h"
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

int lookup_collective(const std::string& variant_dir, const DeploymentKey& key,
                      const std::string& collective, std::int64_t tokens,
                      const std::string& format) {
  const auto table = CollectiveTable::load(variant_dir, key);
  warn_if_not_device_data(table.contract());
  const auto r = table.query(collective, tokens);
  if (format == "json") {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& p : r.rows)
      rows.push_back({{"tokens", p.tokens},
                      {"bytes", p.bytes},
                      {"time_us", p.time_us},
                      {"steady_time_us", p.steady_time_us}});
    std::cout << nlohmann::json{{"collective", collective},
                                {"tokens", tokens},
                                {"bytes", r.bytes},
                                {"time_us", r.time_us},
                                {"steady_time_us", r.steady_time_us},
                                {"exact", r.exact},
                                {"rows", rows}}
                     .dump(1)
              << "\n";
  } else {
    std::cout << std::setprecision(10) << r.time_us << "\n";
  }
  return 0;
}

}  // namespace

int lookup(const Args& args) {
  std::string variant_dir, component, collective, format = "text", sp;
  DeploymentKey key;
  std::int64_t tokens = 0, activated = 0, assignments = 0;
  bool explain = false;
  po::options_description desc(
      "harness lookup ROOT/VARIANT --tp T --dp D --rank R (--component C | --collective NAME) "
      "--tokens N [options]");
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
      "tokens", po::value(&tokens)->required(),
      "rows (local rows, expert rows N for experts, per-DP-rank tokens for collectives)")(
      "activated", po::value(&activated), "activated local experts A (experts)")(
      "assignments", po::value(&assignments), "local token-expert assignments M (experts)")(
      "explain", po::bool_switch(&explain), "list the measured vertices and weights used")(
      "format", po::value(&format), "text | json");
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
  if (component.empty() == collective.empty())
    throw LookupError("name exactly one of --component and --collective");
  if (!collective.empty()) return lookup_collective(variant_dir, key, collective, tokens, format);
  const auto c = parse_component(component);
  if (!c) throw LookupError("unknown component '" + component + "' (" + component_names() + ")");
  if (*c == Component::experts && (!vm->count("activated") || !vm->count("assignments")))
    throw LookupError(
        "experts needs --activated A and --assignments M (the all-remote row is A = M = 0)");
  auto d = Deployment::load(variant_dir, key);
  warn_if_not_device_data(d.contract());
  const auto r = d.query(*c, tokens, activated, assignments);
  if (format == "json") {
    nlohmann::json v = nlohmann::json::array();
    for (const auto& x : r.vertices)
      v.push_back({{"tokens", x.point.tokens},
                   {"activated_experts", x.point.activated},
                   {"local_assignments", x.point.assignments},
                   {"time_us", x.time_us},
                   {"weight", x.weight}});
    nlohmann::json out = {
        {"component", component}, {"tokens", tokens}, {"time_us", r.time_us}, {"exact", r.exact}};
    if (*c == Component::experts)
      out["activated_experts"] = activated, out["local_assignments"] = assignments;
    if (explain) out["vertices"] = v;
    const auto held_out = d.held_out_errors(*c, tokens, activated, assignments);
    out["held_out"] = held_out ? held_out->to_json() : nlohmann::json(nullptr);
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  std::cout << std::setprecision(10) << r.time_us << "\n";
  if (explain) {
    std::cout << (r.exact
                      ? "exact measured row\n"
                      : "interpolated from " + std::to_string(r.vertices.size()) + " vertices:\n");
    for (const auto& x : r.vertices)
      std::cout << "  N=" << x.point.tokens << " A=" << x.point.activated
                << " M=" << x.point.assignments << "  time_us=" << x.time_us
                << "  weight=" << x.weight << "\n";
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
  }
  return 0;
}

}  // namespace moe::cli
