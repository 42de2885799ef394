#include "core/geometry.h"

#include <array>
#include <stdexcept>

namespace moe {

std::string_view to_string(Dtype d) {
  return d == Dtype::bf16 ? "bf16" : "fp32";
}

std::optional<Dtype> parse_dtype(std::string_view s) {
  if (s == "bf16") return Dtype::bf16;
  if (s == "fp32") return Dtype::fp32;
  return std::nullopt;
}

int bytes_of(Dtype d) {
  return d == Dtype::bf16 ? 2 : 4;
}

std::int64_t ModelGeometry::expert_weight_bytes() const {
  return std::int64_t{3} * hidden * intermediate * bytes_of(weight_dtype);
}

namespace {
ModelGeometry preset(std::string name, int h, int i, int e, int k, Dtype router, SharedExperts s,
                     int layers) {
  ModelGeometry g;
  g.name = std::move(name);
  g.hidden = h;
  g.intermediate = i;
  g.experts = e;
  g.top_k = k;
  g.renormalize = true;
  g.router_dtype = router;
  g.shared = s;
  g.layers = layers;
  return g;
}

const std::array<ModelGeometry, 4>& presets() {
  static const std::array<ModelGeometry, 4> all = {
      preset("qwen3-30b-a3b", 2048, 768, 128, 8, Dtype::bf16, {}, 48),
      preset("qwen3-235b-a22b", 4096, 1536, 128, 8, Dtype::bf16, {}, 94),
      preset("deepseek-v3", 7168, 2048, 256, 8, Dtype::fp32, {1, 2048}, 58),
      // Small enough for a CPU to acquire in seconds; has a shared expert so `wrapper` is covered.
      preset("tiny", 64, 32, 8, 2, Dtype::bf16, {1, 32}, 2),
  };
  return all;
}
}  // namespace

std::optional<ModelGeometry> find_preset(std::string_view name) {
  for (const auto& g : presets())
    if (g.name == name) return g;
  return std::nullopt;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& g : presets()) names.push_back(g.name);
  return names;
}

ExpertOwnership ExpertOwnership::of(const ModelGeometry& g, const Target& t) {
  if (t.ep <= 0 || g.experts % t.ep != 0)
    throw std::invalid_argument("experts " + std::to_string(g.experts) +
                                " are not divisible by EP " + std::to_string(t.ep));
  const int l = g.experts / t.ep;
  return {l, t.rank * l};
}

TokenDomains::TokenDomains(int tp, int dp, bool sp) : tp_(tp), dp_(dp), sp_(sp && tp > 1) {
  if (tp < 1 || dp < 1) throw std::invalid_argument("TP and DP must be positive");
}

std::int64_t TokenDomains::local_rows(std::int64_t n_i) const {
  return sp_ ? (n_i + tp_ - 1) / tp_ : n_i;
}

std::int64_t TokenDomains::expert_rows(std::span<const std::int64_t> counts) const {
  std::int64_t rows = 0;
  for (auto n : counts) rows += local_rows(n);
  return sp_ ? rows * tp_ : rows;
}

std::int64_t TokenDomains::uniform_expert_rows(std::int64_t n) const {
  return (sp_ ? tp_ * local_rows(n) : n) * dp_;
}

}  // namespace moe
