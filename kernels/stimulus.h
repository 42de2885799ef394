// Random stimuli: bf16-representable activations and weights, and expert routes realizing an
// exact (N, A, M) point.
#pragma once

#include <random>
#include <vector>

#include "core/geometry.h"
#include "kernels/reference.h"

namespace moe {

using Rng = std::mt19937_64;

// Uniform in [-scale, scale], rounded to bf16 when `dtype` is bf16. Never all zeros.
[[nodiscard]] std::vector<float> random_values(std::size_t count, float scale, Dtype dtype,
                                               Rng& rng);

// Weights for `experts` gated MLPs scaled so activations stay O(1).
[[nodiscard]] MlpWeights random_mlp(int experts, int hidden, int intermediate, Dtype dtype,
                                    Rng& rng);

// Routes over N rows with exactly M assignments to A distinct local experts (a random subset of
// the rank's L), a balanced histogram over those A (counts differ by at most one), per-row local
// counts differing by at most one, and the remaining k - c lanes of every row routed to distinct
// remote experts. Weights are positive (renormalized per row when the geometry says so).
// Requires a feasible point (or A = M = 0 with E - L >= k); throws std::invalid_argument otherwise.
[[nodiscard]] Routes make_expert_routes(std::int64_t rows, std::int64_t activated,
                                        std::int64_t assignments, const ModelGeometry& g,
                                        const ExpertOwnership& own, Rng& rng);

}  // namespace moe
