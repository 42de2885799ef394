// harness lookup: component time from a bundle, interpolated inside measured support.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "harness/commands.h"
#include "lookup/lookup.h"

namespace po = boost::program_options;

namespace moe::cli {

int lookup(const Args& args) {
  std::string variant_dir, component, format = "text", sp;
  DeploymentKey key;
  std::int64_t tokens = 0, activated = 0, assignments = 0;
  bool explain = false;
  po::options_description desc(
      "harness lookup ROOT/VARIANT --tp T --dp D --rank R --component C --tokens N [options]");
  desc.add_options()("bundle", po::value(&variant_dir),
                     "bundle variant directory (holds meta.yaml)")(
      "tp", po::value(&key.tp)->required(), "TP degree")("dp", po::value(&key.dp)->required(),
                                                         "DP degree")(
      "rank", po::value(&key.rank)->default_value(0), "rank within the deployment")(
      "sp", po::value(&sp), "0 or 1 (needed only when both exist)")(
      "expect-device", po::value(&key.expect_device),
      "refuse a table not measured on this device (GPU UUID, or part of its name: H200)")(
      "component", po::value(&component)->required(),
      "gate_routing | experts | finalize_copy | wrapper")(
      "tokens", po::value(&tokens)->required(), "rows (local rows, or expert rows N for experts)")(
      "activated", po::value(&activated), "activated local experts A (experts)")(
      "assignments", po::value(&assignments), "local token-expert assignments M (experts)")(
      "explain", po::bool_switch(&explain), "list the measured vertices and weights used")(
      "format", po::value(&format), "text | json");
  po::positional_options_description pos;
  pos.add("bundle", 1);
  if (!parse(args, desc, pos)) return 0;  // --help was printed
  if (variant_dir.empty()) throw LookupError("name the bundle variant directory (ROOT/VARIANT)");
  if (!sp.empty()) {
    if (sp != "0" && sp != "1") throw LookupError("--sp must be 0 or 1");
    key.sp = sp == "1";
  }
  if (format != "text" && format != "json") throw LookupError("--format must be text or json");
  const auto c = parse_component(component);
  if (!c) throw LookupError("unknown component '" + component + "' (" + component_names() + ")");
  auto d = Deployment::load(variant_dir, key);
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
  }
  return 0;
}

}  // namespace moe::cli
