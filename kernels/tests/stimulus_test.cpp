#include "kernels/stimulus.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

namespace moe {
namespace {

void check_routes(const ModelGeometry& g, const Target& t, std::int64_t n, std::int64_t a,
                  std::int64_t m) {
  const auto own = ExpertOwnership::of(g, t);
  Rng rng(n * 1000 + a * 10 + m);
  const auto r = make_expert_routes(n, a, m, g, own, rng);
  ASSERT_EQ(r.rows, n);
  std::map<int, int> hist;
  std::int64_t local = 0;
  std::int64_t min_row = g.top_k, max_row = 0;
  for (int row = 0; row < r.rows; ++row) {
    std::set<int> seen;
    std::int64_t row_local = 0;
    float sum = 0;
    for (int j = 0; j < r.k; ++j) {
      const int id = r.ids[row * r.k + j];
      ASSERT_GE(id, 0);
      ASSERT_LT(id, g.experts);
      EXPECT_TRUE(seen.insert(id).second) << "expert repeated within a row";
      EXPECT_GT(r.weights[row * r.k + j], 0.0f);
      sum += r.weights[row * r.k + j];
      if (own.owns(id)) ++hist[id], ++local, ++row_local;
    }
    if (g.renormalize) {
      EXPECT_NEAR(sum, 1.0f, 1e-5);
    }
    min_row = std::min(min_row, row_local);
    max_row = std::max(max_row, row_local);
  }
  EXPECT_EQ(local, m) << "exact M";
  EXPECT_EQ(static_cast<std::int64_t>(hist.size()), a) << "exact A";
  if (!hist.empty()) {
    int lo = 1 << 30, hi = 0;
    for (auto [id, c] : hist) lo = std::min(lo, c), hi = std::max(hi, c);
    EXPECT_LE(hi - lo, 1) << "balanced histogram";
  }
  EXPECT_LE(max_row - min_row, 1);
}

TEST(Stimulus, RealizesExactPoints) {
  const auto q = *find_preset("qwen3-30b-a3b");
  check_routes(q, {1, 2, 2, 1, false}, 16, 5, 37);
  check_routes(q, {1, 2, 2, 0, false}, 1, 1, 1);       // A=1, M=A, N=1
  check_routes(q, {1, 2, 2, 0, false}, 7, 3, 21);      // M = N*min(k,A)
  check_routes(q, {1, 2, 2, 0, false}, 33, 0, 0);      // all remote
  check_routes(q, {1, 1, 1, 0, false}, 20, 128, 160);  // EP1: M = N*k
  ModelGeometry forced = q;
  forced.experts = 8;
  forced.top_k = 6;
  check_routes(forced, {1, 2, 2, 1, false}, 5, 4, 10);  // >= 2 local routes per row
}

TEST(Stimulus, RejectsInfeasiblePoints) {
  const auto q = *find_preset("qwen3-30b-a3b");
  const auto own = ExpertOwnership::of(q, {1, 2, 2, 0, false});
  Rng rng(1);
  EXPECT_THROW((void)make_expert_routes(2, 3, 2, q, own, rng), std::invalid_argument);  // M < A
  EXPECT_THROW((void)make_expert_routes(2, 2, 17, q, own, rng),
               std::invalid_argument);  // M > N*min(k,A)
  EXPECT_THROW((void)make_expert_routes(2, 65, 70, q, own, rng), std::invalid_argument);  // A > L
}

TEST(Stimulus, RandomValuesAreBf16AndNotZero) {
  Rng rng(5);
  const auto v = random_values(1000, 1.0f, Dtype::bf16, rng);
  int nonzero = 0;
  for (float x : v) {
    nonzero += x != 0.0f;
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    EXPECT_EQ(u & 0xffffu, 0u) << "not bf16-representable";
  }
  EXPECT_GT(nonzero, 990);
}

}  // namespace
}  // namespace moe
