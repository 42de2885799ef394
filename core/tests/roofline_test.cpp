#include "core/roofline.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

// The floors issue 7 states for Qwen3-30B-A3B on an H200 taken as 4.3 TB/s and 790 TFLOP/s:
// N=1 17.6 µs, N=16 180 µs, N=64..1024 281 µs, N=4096 391 µs.
TEST(Roofline, ReproducesTheStatedQwen3Floors) {
  const auto g = *find_preset("qwen3-30b-a3b");
  const Roofline h200{4.3e12, 790e12};
  const auto at = [&](std::int64_t n) {
    return floor_of(g, Component::experts, {n, balanced_activated(g, n), n * g.top_k}, h200);
  };
  EXPECT_EQ(balanced_activated(g, 1), 8);
  EXPECT_EQ(balanced_activated(g, 16), 82);
  EXPECT_EQ(balanced_activated(g, 1024), 128);
  EXPECT_NEAR(at(1).us, 17.6, 0.1);
  EXPECT_EQ(at(1).bound, "bytes");
  EXPECT_NEAR(at(16).us, 180.0, 1.0);
  EXPECT_NEAR(at(1024).us, 281.0, 2.0);  // all 128 experts plus 8 MiB of rows
  EXPECT_NEAR(at(4096).us, 391.0, 1.0);
  EXPECT_EQ(at(4096).bound, "flops");
}

TEST(Roofline, BalancedActivationStaysFeasible) {
  const auto tiny = *find_preset("tiny");  // E=8, k=2
  for (std::int64_t n : {1, 2, 3, 10, 1000}) {
    const auto a = balanced_activated(tiny, n);
    EXPECT_GE(a, tiny.top_k) << n;
    EXPECT_LE(a, std::min<std::int64_t>(tiny.experts, n * tiny.top_k)) << n;
  }
  EXPECT_EQ(balanced_activated(tiny, 1000), 8);
}

TEST(Roofline, OtherComponentsCountTheirOwnBytes) {
  const auto ds = *find_preset("deepseek-v3");  // fp32 router, one shared expert
  const Roofline r{1e12, 1e15};
  const auto gate = floor_of(ds, Component::gate_routing, {256, 0, 0}, r);
  EXPECT_DOUBLE_EQ(gate.bytes, 256.0 * 7168 * 2 + 256.0 * 7168 * 4 + 256.0 * 8 * 8);
  EXPECT_DOUBLE_EQ(gate.flops, 2.0 * 256 * 256 * 7168);
  const auto copy = floor_of(ds, Component::finalize_copy, {100, 0, 0}, r);
  EXPECT_DOUBLE_EQ(copy.bytes, 2.0 * 100 * 7168 * 2);
  EXPECT_DOUBLE_EQ(copy.us, copy.bytes / 1e12 * 1e6);
  const auto wrap = floor_of(ds, Component::wrapper, {10, 0, 0}, r);
  EXPECT_DOUBLE_EQ(wrap.bytes, 3.0 * 7168 * 2048 * 2 + 3.0 * 10 * 7168 * 2);
}

}  // namespace
}  // namespace moe
