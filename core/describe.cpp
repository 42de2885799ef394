#include "core/describe.h"

#include <ctime>

namespace moe {

nlohmann::json geometry_json(const ModelGeometry& g) {
  return {
      {"name", g.name},
      {"hidden_size", g.hidden},
      {"moe_intermediate_size", g.intermediate},
      {"num_experts", g.experts},
      {"top_k", g.top_k},
      {"renormalize", g.renormalize},
      {"activation", "silu_gated"},
      {"weight_dtype", to_string(g.weight_dtype)},
      {"router_dtype", to_string(g.router_dtype)},
      {"shared_experts", {{"count", g.shared.count}, {"intermediate_size", g.shared.intermediate}}},
      {"num_layers", g.layers}};
}

std::string utc_now() {
  const auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace moe
