#include "kernels/stimulus.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "kernels/bf16.h"

namespace moe {

std::vector<float> random_values(std::size_t count, float scale, Dtype dtype, Rng& rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(count);
  for (auto& x : v) {
    x = dist(rng);
    if (dtype == Dtype::bf16) x = round_to_bf16(x);
  }
  return v;
}

MlpWeights random_mlp(int experts, int hidden, int intermediate, Dtype dtype, Rng& rng) {
  MlpWeights w{experts, hidden, intermediate, {}, {}};
  w.w13 = random_values(static_cast<std::size_t>(experts) * 2 * intermediate * hidden,
                        1.0f / std::sqrt(static_cast<float>(hidden)), dtype, rng);
  w.w2 = random_values(static_cast<std::size_t>(experts) * hidden * intermediate,
                       1.0f / std::sqrt(static_cast<float>(intermediate)), dtype, rng);
  return w;
}

Routes make_expert_routes(std::int64_t rows, std::int64_t activated, std::int64_t assignments,
                          const ModelGeometry& g, const ExpertOwnership& own, Rng& rng) {
  const int k = g.top_k, e = g.experts, l = own.local_experts;
  const std::int64_t forced = std::max(0, k - (e - l));
  const bool all_remote = activated == 0 && assignments == 0 && e - l >= k;
  const bool feasible = activated >= 1 && activated <= l &&
                        std::max(activated, rows * forced) <= assignments &&
                        assignments <= rows * std::min<std::int64_t>(k, activated);
  if (rows < 1 || (!all_remote && !feasible))
    throw std::invalid_argument("infeasible expert point N=" + std::to_string(rows) + " A=" +
                                std::to_string(activated) + " M=" + std::to_string(assignments));
  std::vector<int> local(l);
  std::iota(local.begin(), local.end(), own.first_expert);
  std::shuffle(local.begin(), local.end(), rng);
  local.resize(static_cast<std::size_t>(activated));
  std::vector<int> remote;
  for (int x = 0; x < e; ++x)
    if (!own.owns(x)) remote.push_back(x);
  std::shuffle(remote.begin(), remote.end(), rng);

  Routes r;
  r.rows = static_cast<int>(rows);
  r.k = k;
  r.ids.resize(static_cast<std::size_t>(rows) * k);
  r.weights.resize(r.ids.size());
  std::uniform_real_distribution<float> wdist(0.05f, 1.0f);
  std::size_t next_local = 0, next_remote = 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    // Row `row` gets floor(M/N) local lanes, plus one for the first M mod N rows.
    const std::int64_t c = assignments / rows + (row < assignments % rows ? 1 : 0);
    auto* ids = r.ids.data() + row * k;
    // Consecutive positions of a round-robin over the active experts: distinct within the row
    // (c <= A) and balanced over the whole table.
    for (std::int64_t j = 0; j < c; ++j) ids[j] = local[next_local++ % local.size()];
    for (std::int64_t j = c; j < k; ++j) ids[j] = remote[next_remote++ % remote.size()];
    float sum = 0;
    for (int j = 0; j < k; ++j) sum += (r.weights[row * k + j] = wdist(rng));
    if (g.renormalize)
      for (int j = 0; j < k; ++j) r.weights[row * k + j] /= sum;
  }
  return r;
}

}  // namespace moe
