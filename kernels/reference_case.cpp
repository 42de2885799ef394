#include "kernels/reference_case.h"

#include <cmath>
#include <stdexcept>

namespace moe {

ReferenceCase::ReferenceCase(const WorkloadSpec& s) : spec(s) {
  const auto& g = s.geometry;
  Rng rng(s.seed);
  rows = static_cast<int>(s.point.tokens);
  if (rows < 1) throw std::invalid_argument("a workload needs at least one row");
  x = random_values(static_cast<std::size_t>(rows) * g.hidden, 1.0f, g.weight_dtype, rng);
  switch (s.component) {
    case Component::gate_routing:
      router = random_values(static_cast<std::size_t>(g.experts) * g.hidden,
                             1.0f / std::sqrt(static_cast<float>(g.hidden)), g.router_dtype, rng);
      break;
    case Component::experts: {
      const auto own = ExpertOwnership::of(g, s.target);
      routes = make_expert_routes(s.point.tokens, s.point.activated, s.point.assignments, g, own, rng);
      for (int b = 0; b < s.banks; ++b)
        banks.push_back(random_mlp(own.local_experts, g.hidden, g.intermediate, g.weight_dtype, rng));
      break;
    }
    case Component::finalize_copy:
      break;
    case Component::wrapper:
      routed = random_values(x.size(), 1.0f, g.weight_dtype, rng);
      banks.push_back(random_mlp(g.shared.count, g.hidden, g.shared.intermediate, g.weight_dtype, rng));
      break;
  }
}

std::size_t ReferenceCase::output_size() const { return x.size(); }

void ReferenceCase::run(int bank, std::vector<float>& out, Routes* routes_out) const {
  const auto& g = spec.geometry;
  out.assign(output_size(), 0.0f);
  switch (spec.component) {
    case Component::gate_routing: {
      Routes r;
      gate_routing_ref(x, rows, router, g, r);
      // The output tensor of gate_routing is its weights; ids go to routes_out.
      out.assign(r.weights.begin(), r.weights.end());
      if (routes_out) *routes_out = std::move(r);
      break;
    }
    case Component::experts:
      experts_ref(x, routes, banks.at(static_cast<std::size_t>(bank)),
                  ExpertOwnership::of(g, spec.target).first_expert, out);
      break;
    case Component::finalize_copy:
      finalize_copy_ref(x, out);
      break;
    case Component::wrapper:
      wrapper_ref(x, rows, routed, banks.front(), out);
      break;
  }
}

}  // namespace moe
