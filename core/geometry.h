// Model geometry, deployment targets and token domains: the vocabulary shared by the planner,
// the kernels, the HDF5 store and the lookup library. Pure and deterministic.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/target.h"

namespace moe {

enum class Dtype { bf16, fp32 };
[[nodiscard]] std::string_view to_string(Dtype d);
[[nodiscard]] std::optional<Dtype> parse_dtype(std::string_view s);
[[nodiscard]] int bytes_of(Dtype d);

struct SharedExperts {
  int count = 0;
  int intermediate = 0;
  bool operator==(const SharedExperts&) const = default;
};

// One MoE layer's shape. Activation is always SiLU-gated.
struct ModelGeometry {
  std::string name;
  int hidden = 0;        // H
  int intermediate = 0;  // I (per routed expert)
  int experts = 0;       // E (global routed experts)
  int top_k = 0;         // k
  bool renormalize = true;
  Dtype weight_dtype = Dtype::bf16;
  Dtype router_dtype = Dtype::bf16;
  SharedExperts shared;
  int layers = 1;
  bool operator==(const ModelGeometry&) const = default;

  [[nodiscard]] bool has_shared_experts() const { return shared.count > 0; }
  // Bytes of one routed expert's weights (gate+up [H,2I] and down [I,H]).
  [[nodiscard]] std::int64_t expert_weight_bytes() const;
};

// Shipped presets: qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3, tiny.
[[nodiscard]] std::optional<ModelGeometry> find_preset(std::string_view name);
[[nodiscard]] std::vector<std::string> preset_names();

// Linear expert placement: rank r owns [r*L, (r+1)*L), L = E/EP.
struct ExpertOwnership {
  int local_experts = 0;  // L
  int first_expert = 0;
  [[nodiscard]] static ExpertOwnership of(const ModelGeometry& g, const Target& t);
  [[nodiscard]] bool owns(int expert) const {
    return expert >= first_expert && expert < first_expert + local_experts;
  }
};

// Maps padded per-DP-rank token counts to a rank's local rows and the gathered expert rows.
class TokenDomains {
 public:
  TokenDomains(int tp, int dp, bool sp);
  [[nodiscard]] std::int64_t local_rows(std::int64_t n_i) const;
  [[nodiscard]] std::int64_t expert_rows(std::span<const std::int64_t> counts) const;
  // Expert rows when every DP rank holds `n` tokens: the (G,)*DP mapping.
  [[nodiscard]] std::int64_t uniform_expert_rows(std::int64_t n) const;
  [[nodiscard]] bool sequence_parallel() const { return sp_; }

 private:
  int tp_;
  int dp_;
  bool sp_;
};

}  // namespace moe
