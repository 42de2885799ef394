// GPU tests (label `gpu`): skipped when no CUDA device is visible.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cuda_testing.h"
#include "kernels/stimulus.h"
#include "kernels/workload.h"

namespace moe {
namespace {

#define REQUIRE_GPU()                                               \
  do {                                                              \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (false)

void expect_matches_reference(const ModelGeometry& g, const Target& t, Component c, GridPoint p,
                              int banks = 1) {
  auto backend = make_cuda_backend("cublas_grouped", 0);
  WorkloadSpec spec{g, t, c, p, banks, 12345 + static_cast<std::uint64_t>(p.tokens)};
  auto w = backend->make(spec, backend->make_weights(spec));
  const auto errors = w->verify();
  ASSERT_EQ(errors.size(), static_cast<std::size_t>(c == Component::experts ? banks : 1));
  for (std::size_t b = 0; b < errors.size(); ++b)
    EXPECT_LE(errors[b], backend->tolerance())
        << to_string(c) << " N=" << p.tokens << " A=" << p.activated << " M=" << p.assignments
        << " bank " << b;
  EXPECT_FALSE(w->take_route_error());
}

TEST(GpuBackend, EveryComponentMatchesItsReference) {
  REQUIRE_GPU();
  const auto tiny = *find_preset("tiny");
  const auto qwen = *find_preset("qwen3-30b-a3b");
  const auto ds = *find_preset("deepseek-v3");
  const Target ep2{1, 2, 2, 1, false}, ep1{1, 1, 1, 0, false};
  for (auto n : {1, 7, 64, 300})
    expect_matches_reference(qwen, ep2, Component::gate_routing, {n, 0, 0});
  expect_matches_reference(ds, ep1, Component::gate_routing, {33, 0, 0});   // fp32 router
  expect_matches_reference(qwen, ep2, Component::experts, {1, 1, 1}, 4);    // N=1, A=1, M=A
  expect_matches_reference(qwen, ep2, Component::experts, {16, 1, 16}, 4);  // A=1
  expect_matches_reference(qwen, ep2, Component::experts, {16, 5, 5}, 2);   // M=A
  expect_matches_reference(qwen, ep2, Component::experts, {64, 64, 256}, 2);
  expect_matches_reference(qwen, ep2, Component::experts, {64, 0, 0}, 2);  // all remote
  expect_matches_reference(qwen, ep1, Component::experts, {512, 128, 4096}, 2);
  expect_matches_reference(tiny, ep1, Component::experts, {5, 8, 10}, 2);
  const Target tiny_ep2{1, 2, 2, 0, false};
  for (GridPoint p :
       {GridPoint{32, 4, 64}, GridPoint{128, 4, 256}, GridPoint{2, 1, 2}, GridPoint{64, 3, 100}})
    expect_matches_reference(tiny, tiny_ep2, Component::experts, p, 8);
  expect_matches_reference(qwen, ep2, Component::finalize_copy, {100, 0, 0});
  expect_matches_reference(ds, ep1, Component::wrapper, {17, 0, 0});
  expect_matches_reference(tiny, ep1, Component::wrapper, {3, 0, 0});
}

TEST(GpuBackend, InvalidRoutesEqualThePaddingOracleAndRaiseTheFlag) {
  REQUIRE_GPU();
  auto g = *find_preset("tiny");
  const Target t{1, 1, 1, 0, false};
  Rng rng(99);
  const int rows = 4;
  const auto x = random_values(static_cast<std::size_t>(rows) * g.hidden, 1.0f, Dtype::bf16, rng);
  const auto w = random_mlp(g.experts, g.hidden, g.intermediate, Dtype::bf16, rng);
  const Routes valid{
      rows, 2, {0, 1, 2, 3, 4, 5, 6, 7}, {0.5f, 0.5f, 0.4f, 0.6f, 0.3f, 0.7f, 0.2f, 0.8f}};
  const auto base = run_experts_on_device(0, g, t, x, valid, w);
  EXPECT_FALSE(base.route_error);
  struct Case {
    const char* name;
    int lane;
    int id;
    float weight;
  };
  for (const auto& c :
       {Case{"NaN", 1, 1, NAN}, Case{"+Inf", 2, 2, INFINITY}, Case{"-Inf", 3, 3, -INFINITY},
        Case{"negative", 4, 4, -0.1f}, Case{"id=E", 5, 8, 0.7f}, Case{"id=-2", 6, -2, 0.2f}}) {
    Routes bad = valid, pad = valid;
    bad.ids[c.lane] = c.id;
    bad.weights[c.lane] = c.weight;
    pad.ids[c.lane] = -1;
    pad.weights[c.lane] = 0.0f;
    const auto got = run_experts_on_device(0, g, t, x, bad, w);
    const auto want = run_experts_on_device(0, g, t, x, pad, w);
    EXPECT_TRUE(got.route_error) << c.name;
    EXPECT_FALSE(want.route_error) << c.name;
    EXPECT_EQ(got.out, want.out) << c.name;
  }
  Routes all_bad = valid;
  for (auto& id : all_bad.ids) id = 99;
  const auto none = run_experts_on_device(0, g, t, x, all_bad, w);
  EXPECT_TRUE(none.route_error);
  for (float v : none.out) EXPECT_EQ(v, 0.0f);
  Routes dup = valid;
  dup.ids[1] = dup.ids[0];  // duplicate routes stay legal
  EXPECT_FALSE(run_experts_on_device(0, g, t, x, dup, w).route_error);
}

}  // namespace
}  // namespace moe
