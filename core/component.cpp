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
  for (auto c :
       {Component::gate_routing, Component::experts, Component::finalize_copy, Component::wrapper})
    if (to_string(c) == s) return c;
  return std::nullopt;
}

}  // namespace moe
