#include "core/roofline.h"

#include <algorithm>
#include <cmath>

namespace moe {

Floor floor_of(const ModelGeometry& g, Component c, const GridPoint& p, const Roofline& device) {
  Floor f;
  // Hidden states are bf16 in every backend.
  const double rows_bytes = static_cast<double>(p.tokens) * g.hidden * 2;
  switch (c) {
    case Component::experts:
      f.bytes = static_cast<double>(p.activated) * static_cast<double>(g.expert_weight_bytes()) +
                2 * rows_bytes;
      f.flops = 6.0 * static_cast<double>(p.assignments) * g.hidden * g.intermediate;
      break;
    case Component::gate_routing:
      f.bytes = rows_bytes + static_cast<double>(g.experts) * g.hidden * bytes_of(g.router_dtype) +
                static_cast<double>(p.tokens) * g.top_k * 8;  // int32 id + fp32 weight per lane
      f.flops = 2.0 * static_cast<double>(p.tokens) * g.experts * g.hidden;
      break;
    case Component::finalize_copy:
      f.bytes = 2 * rows_bytes;
      break;
    case Component::wrapper: {
      const double shared = static_cast<double>(g.shared.count) * g.shared.intermediate;
      f.bytes = 3.0 * g.hidden * shared * bytes_of(g.weight_dtype) + 3 * rows_bytes;
      f.flops = 6.0 * static_cast<double>(p.tokens) * g.hidden * shared;
      break;
    }
  }
  const double bytes_us = f.bytes / device.bytes_per_s * 1e6;
  const double flops_us = f.flops / device.flops_per_s * 1e6;
  f.us = std::max(bytes_us, flops_us);
  f.bound = flops_us > bytes_us ? "flops" : "bytes";
  return f;
}

double expected_distinct_experts(const ModelGeometry& g, int pool, std::int64_t tokens) {
  const double e = g.experts, k = g.top_k;
  return pool * (1.0 - std::pow(1.0 - k / e, static_cast<double>(tokens)));
}

std::int64_t balanced_activated(const ModelGeometry& g, std::int64_t tokens) {
  const auto a = std::llround(expected_distinct_experts(g, g.experts, tokens));
  return std::clamp<std::int64_t>(a, g.top_k, std::min<std::int64_t>(g.experts, tokens * g.top_k));
}

}  // namespace moe
