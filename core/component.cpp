#include "core/component.h"

namespace moe {

std::string_view to_string(Component c) {
  switch (c) {
    case Component::gate_routing:
      return "gate_routing";
    case Component::experts:
      return "experts";
    case Component::finalize_copy:
      return "finalize_copy";
    case Component::wrapper:
      return "wrapper";
  }
  return "?";
}

std::optional<Component> parse_component(std::string_view s) {
  for (auto c : kAllComponents)
    if (to_string(c) == s) return c;
  return std::nullopt;
}

std::string component_names() {
  std::string out;
  for (auto c : kAllComponents) out += (out.empty() ? "" : ", ") + std::string(to_string(c));
  return out;
}

}  // namespace moe
