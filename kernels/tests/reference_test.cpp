#include "kernels/reference.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/stimulus.h"

namespace moe {
namespace {

ModelGeometry small() {
  ModelGeometry g = *find_preset("tiny");
  g.hidden = 8;
  g.intermediate = 4;
  return g;
}

TEST(Reference, SanitizeMakesInvalidLanesPadding) {
  Routes r{1, 7, {0, 8, -2, 3, 5, 6, -1}, {0.5f, 0.1f, 0.1f, NAN, INFINITY, -0.25f, 0.0f}};
  EXPECT_EQ(sanitize_routes(r, 8), 5);  // id=E, id=-2, NaN, +Inf, negative
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{0, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(r.weights[1], 0.0f);
  Routes neg_inf{1, 1, {2}, {-INFINITY}};
  EXPECT_EQ(sanitize_routes(neg_inf, 8), 1);
  Routes dup{1, 2, {3, 3}, {0.5f, 0.5f}};
  EXPECT_EQ(sanitize_routes(dup, 8), 0) << "duplicate routes stay legal";
}

TEST(Reference, ExpertsEqualsHandComputedMlp) {
  ModelGeometry g = small();
  g.hidden = 2;
  g.intermediate = 1;
  MlpWeights w{1, 2, 1, {1.0f, 0.0f, 0.0f, 1.0f}, {2.0f, -1.0f}};  // gate=x0, up=x1
  Routes r{1, 2, {4, 9}, {0.5f, 0.5f}};  // expert 4 local (first_expert 4), 9 remote
  std::vector<float> x{1.0f, 3.0f}, out(2);
  experts_ref(x, r, w.view(), 4, out);
  const float act = 1.0f / (1.0f + std::exp(-1.0f)) * 3.0f;
  EXPECT_NEAR(out[0], 0.5f * 2.0f * act, 1e-6);
  EXPECT_NEAR(out[1], 0.5f * -1.0f * act, 1e-6);
}

TEST(Reference, InvalidLaneEqualsPaddingOracle) {
  const auto g = small();
  Rng rng(7);
  const auto x = random_values(3 * g.hidden, 1.0f, Dtype::bf16, rng);
  const auto w = random_mlp(8, g.hidden, g.intermediate, Dtype::bf16, rng);
  Routes bad{3, 2, {1, 8, 2, 3, 4, 5}, {0.5f, 0.5f, NAN, 0.2f, 0.3f, -1.0f}};
  Routes pad{3, 2, {1, -1, -1, 3, 4, -1}, {0.5f, 0.0f, 0.0f, 0.2f, 0.3f, 0.0f}};
  std::vector<float> a(3 * g.hidden), b(3 * g.hidden);
  Routes cleaned = bad;
  sanitize_routes(cleaned, 8);
  experts_ref(x, cleaned, w.view(), 0, a);
  experts_ref(x, pad, w.view(), 0, b);
  EXPECT_EQ(a, b);
}

TEST(Reference, GateRoutingPicksTopKAndRenormalizes) {
  ModelGeometry g = small();
  g.hidden = 2;
  g.experts = 4;
  g.top_k = 2;
  // logits for x=(1,0): router rows' first column.
  std::vector<float> router{0.1f, 0, 3.0f, 0, 2.0f, 0, -1.0f, 0};
  std::vector<float> x{1.0f, 0.0f};
  Routes r;
  gate_routing_ref(x, 1, router, g, r);
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 2}));
  EXPECT_NEAR(r.weights[0] + r.weights[1], 1.0f, 1e-6);
  EXPECT_NEAR(r.weights[0] / r.weights[1], std::exp(1.0f), 1e-4);
  g.renormalize = false;
  gate_routing_ref(x, 1, router, g, r);
  EXPECT_LT(r.weights[0] + r.weights[1], 1.0f);
}

TEST(Reference, WrapperAddsSharedExpertToRouted) {
  ModelGeometry g = small();
  Rng rng(3);
  const auto x = random_values(2 * g.hidden, 1.0f, Dtype::bf16, rng);
  const auto routed = random_values(2 * g.hidden, 1.0f, Dtype::bf16, rng);
  const auto shared = random_mlp(1, g.hidden, g.intermediate, Dtype::bf16, rng);
  std::vector<float> out(x.size()), only(x.size());
  wrapper_ref(x, 2, routed, shared.view(), out);
  Routes r{2, 1, {0, 0}, {1.0f, 1.0f}};
  experts_ref(x, r, shared.view(), 0, only);
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], routed[i] + only[i], 1e-5);
}

TEST(Reference, RelativeErrorIsScaleRelativeAndNanIsInfinite) {
  std::vector<float> want{2.0f, -4.0f}, got{2.0f, -3.96f};
  EXPECT_NEAR(relative_error(got, want), 0.01, 1e-6);
  got[0] = NAN;
  EXPECT_TRUE(std::isinf(relative_error(got, want)));
}

}  // namespace
}  // namespace moe
