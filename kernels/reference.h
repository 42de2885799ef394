// CPU reference implementations of every MoE component (fp32 accumulation). They are the
// correctness oracle for the CUDA backends and the compute of the `cpu_reference` backend.
// Layouts (row-major): x [rows][H]; router weight [E][H]; routed expert weights
// w13 [L][2I][H] (gate rows then up rows) and w2 [L][H][I]; shared experts likewise with S experts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/geometry.h"

namespace moe {

struct Routes {
  int rows = 0;
  int k = 0;
  std::vector<std::int32_t> ids;  // [rows][k], -1 = padding
  std::vector<float> weights;     // [rows][k]
};

// docs/measurement.md: ids outside [0,E) other than -1, and weights that are NaN, +-Inf or
// negative, turn the lane into padding (id -1, weight 0). Returns the number of lanes sanitized.
int sanitize_routes(Routes& r, int experts);

// One expert's gated-MLP weights: w13 [2I][H], w2 [H][I] (not owned).
struct ExpertView {
  const float* w13;
  const float* w2;
};

// The experts a reference call may use, by local index.
struct MlpView {
  int hidden = 0, intermediate = 0;
  std::vector<ExpertView> experts;
};

struct MlpWeights {
  int experts = 0, hidden = 0, intermediate = 0;
  std::vector<float> w13;  // [experts][2I][H]
  std::vector<float> w2;   // [experts][H][I]
  [[nodiscard]] MlpView view() const;
};

// logits = x wg^T, softmax over E, top-k (ties to the lower id), optional renormalization, then
// route validation. Output routes carry global expert ids.
void gate_routing_ref(std::span<const float> x, int rows, std::span<const float> router_weight,
                      const ModelGeometry& g, Routes& out);

// Precision of the values stored between steps: fp32 (the cpu_reference backend) or bf16, as
// the GPU backends store them (projections, activation, per-expert output).
enum class Intermediates { fp32, bf16 };

// out[row] = sum over valid lanes routed to a local expert e of w * W2_e (silu(G_e x) * (U_e x)).
// Rows without local routes are zero. `first_expert` maps global ids to local weights.
void experts_ref(std::span<const float> x, const Routes& routes, const MlpView& w, int first_expert,
                 std::span<float> out, Intermediates inter = Intermediates::fp32);

// out = in (the locally reduced rows returned to the local output).
void finalize_copy_ref(std::span<const float> in, std::span<float> out);

// out = routed + sum over shared experts of W2 (silu(G x) * (U x)).
void wrapper_ref(std::span<const float> x, int rows, std::span<const float> routed,
                 const MlpView& shared, std::span<float> out,
                 Intermediates inter = Intermediates::fp32);

// max |got - want| / max(|want|, tiny): the scale-relative error used for every comparison.
[[nodiscard]] double relative_error(std::span<const float> got, std::span<const float> want);

}  // namespace moe
