// Components of one MoE forward (docs/measurement.md) and grid coordinates.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moe {

enum class Component { gate_routing, experts, finalize_copy, wrapper };
// Every component, in measurement and publication order.
inline constexpr std::array<Component, 4> kAllComponents = {
    Component::gate_routing, Component::experts, Component::finalize_copy, Component::wrapper};
[[nodiscard]] std::string_view to_string(Component c);
[[nodiscard]] std::optional<Component> parse_component(std::string_view s);
// "gate_routing, experts, finalize_copy, wrapper" (for messages).
[[nodiscard]] std::string component_names();

// One coordinate of a component grid. Local components use `tokens` only (A = M = 0).
struct GridPoint {
  std::int64_t tokens = 0;       // local rows n, or expert rows N
  std::int64_t activated = 0;    // A
  std::int64_t assignments = 0;  // M
  bool operator==(const GridPoint&) const = default;
  auto operator<=>(const GridPoint&) const = default;
};

}  // namespace moe
