// The identity of a deployment cell and every name derived from it. Directory names, HDF5 cell
// ids, labels and the JSON form in contracts and meta.yaml all come from here (docs/design.md).
#pragma once

#include <compare>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "core/component.h"

namespace moe {

// "tp<N>": the bundle directory of a TP degree.
[[nodiscard]] std::string tp_dir_name(int tp);

// A deployment cell. EP is always TP*DP (full expert parallelism, linear placement).
struct Target {
  int tp = 1;
  int dp = 1;
  int ep = 1;
  int rank = 0;
  bool sp = false;
  bool operator==(const Target&) const = default;
  auto operator<=>(const Target&) const = default;

  [[nodiscard]] std::string dir_name() const;  // dp<D>_ep<E>_rank<r>_sp<0|1>
  [[nodiscard]] std::string tp_dir() const;    // tp<N>
  [[nodiscard]] std::string label() const;     // tp1/dp2_ep2_rank0_sp0
  // One table of the cell: tp1/dp2_ep2_rank0_sp0 experts
  [[nodiscard]] std::string label(Component c) const;
  [[nodiscard]] std::string cell_id() const;  // tp1_dp2_ep2_rank0_sp0 (HDF5 group names)

  [[nodiscard]] nlohmann::json to_json() const;  // {tp, dp, ep, rank, sp}
  // Throws std::invalid_argument naming the missing or mistyped key.
  [[nodiscard]] static Target from_json(const nlohmann::json& j);
};

}  // namespace moe
