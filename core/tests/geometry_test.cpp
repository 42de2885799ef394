#include "core/geometry.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(TokenDomains, NonSpKeepsRowsAndSumsAcrossDp) {
  const TokenDomains d(2, 3, false);
  EXPECT_EQ(d.local_rows(7), 7);
  const std::vector<std::int64_t> counts{7, 3, 5};
  EXPECT_EQ(d.expert_rows(counts), 15);
  EXPECT_EQ(d.uniform_expert_rows(5), 15);
}

TEST(TokenDomains, SpSplitsRowsOverTpWithCeilingOnOddCounts) {
  const TokenDomains d(2, 2, true);
  EXPECT_EQ(d.local_rows(7), 4);  // ceil(7/2)
  EXPECT_EQ(d.local_rows(3), 2);
  const std::vector<std::int64_t> counts{7, 3};
  EXPECT_EQ(d.expert_rows(counts), 2 * (4 + 2));  // TP * sum(ceil(n_i/TP))
  EXPECT_EQ(d.uniform_expert_rows(5), 2 * 2 * 3);
}

TEST(TokenDomains, Tp1IsNeverSequenceParallel) {
  const TokenDomains d(1, 1, true);
  EXPECT_FALSE(d.sequence_parallel());
  EXPECT_EQ(d.local_rows(9), 9);
  const std::vector<std::int64_t> counts{9};
  EXPECT_EQ(d.expert_rows(counts), 9);
}

TEST(Geometry, PresetsMatchTheSpec) {
  auto q = find_preset("qwen3-30b-a3b");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->hidden, 2048);
  EXPECT_EQ(q->intermediate, 768);
  EXPECT_EQ(q->experts, 128);
  EXPECT_EQ(q->top_k, 8);
  EXPECT_FALSE(q->has_shared_experts());
  auto d = find_preset("deepseek-v3");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->hidden, 7168);
  EXPECT_EQ(d->experts, 256);
  EXPECT_EQ(d->shared.count, 1);
  EXPECT_EQ(d->shared.intermediate, 2048);
  auto b = find_preset("qwen3-235b-a22b");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->hidden, 4096);
  EXPECT_EQ(b->intermediate, 1536);
  EXPECT_FALSE(find_preset("qwen4"));
  EXPECT_EQ(q->expert_weight_bytes(), 3LL * 2048 * 768 * 2);
}

TEST(Geometry, LinearExpertOwnership) {
  const auto g = *find_preset("qwen3-30b-a3b");
  const auto own = ExpertOwnership::of(g, Target{2, 2, 4, 3, false});
  EXPECT_EQ(own.local_experts, 32);
  EXPECT_EQ(own.first_expert, 96);
  EXPECT_TRUE(own.owns(96));
  EXPECT_TRUE(own.owns(127));
  EXPECT_FALSE(own.owns(95));
  EXPECT_THROW((void)ExpertOwnership::of(g, Target{3, 1, 3, 0, false}), std::invalid_argument);
}

}  // namespace
}  // namespace moe
