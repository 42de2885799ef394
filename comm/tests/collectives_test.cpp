#include "comm/collectives.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(Collectives, BusFactorsMatchNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_reduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_gather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::reduce_scatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_to_all, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_reduce, 1), 0.0);
  // 1 GB in 10 ms: algbw 100 GB/s; AllReduce over 4 ranks: busbw 150 GB/s.
  const auto b = bandwidth(CollectiveOp::all_reduce, 4, 1'000'000'000, 10'000.0);
  EXPECT_DOUBLE_EQ(b.algbw_gbps, 100.0);
  EXPECT_DOUBLE_EQ(b.busbw_gbps, 150.0);
}

TEST(Collectives, RingEnvelopeOnHandComputedCases) {
  // Equal chunks of 100 bytes over 4 ranks, 1 µs per step, 10 bytes/µs: 3 * (1 + 10) = 33 µs.
  const std::vector<std::int64_t> equal{100, 100, 100, 100};
  EXPECT_DOUBLE_EQ(ring_envelope_us(CollectiveOp::all_gather, equal, 1.0, 10.0), 33.0);
  // Unequal DP counts: the largest chunk (300) bounds every step: 3 * (1 + 30) = 93 µs.
  const std::vector<std::int64_t> unequal{100, 300, 50, 100};
  EXPECT_DOUBLE_EQ(ring_envelope_us(CollectiveOp::reduce_scatter, unequal, 1.0, 10.0), 93.0);
  // AllReduce of 400-byte buffers over 4 ranks: 6 steps of 100-byte chunks: 6 * (1 + 10).
  const std::vector<std::int64_t> ar{400, 400, 400, 400};
  EXPECT_DOUBLE_EQ(ring_envelope_us(CollectiveOp::all_reduce, ar, 1.0, 10.0), 66.0);
  EXPECT_DOUBLE_EQ(
      ring_envelope_us(CollectiveOp::all_gather, std::vector<std::int64_t>{5}, 1.0, 1.0), 0.0);
}

TEST(Collectives, GroupsFollowTpMajorPlacement) {
  const Target non_sp{2, 3, 6, 3, false};  // dp_index 1, tp_index 1
  EXPECT_EQ(group_members(non_sp, "tp"), (std::vector<int>{2, 3}));
  EXPECT_EQ(group_members(non_sp, "gather"), (std::vector<int>{1, 3, 5}));
  const Target sp{2, 3, 6, 3, true};
  EXPECT_EQ(group_members(sp, "gather"), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(group_members(non_sp, "ep"), (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(Collectives, CasesOfTheDpEpSequence) {
  const auto g = *find_preset("qwen3-30b-a3b");
  const std::vector<std::int64_t> tokens{64};
  const auto dp_only = collective_cases(g, {1, 2, 2, 0, false}, tokens);
  ASSERT_EQ(dp_only.size(), 6u);
  EXPECT_EQ(dp_only[0].name, "allgather_hidden");
  EXPECT_EQ(dp_only[0].total_bytes, 2 * 64 * 2048 * 2);
  EXPECT_EQ(dp_only[1].total_bytes, 2 * 64 * 8 * 4);
  EXPECT_EQ(dp_only[3].op, CollectiveOp::reduce_scatter);
  // The EP exchange: each rank sends its 64 rows' k = 8 bf16 hidden-state copies.
  for (std::size_t i : {4u, 5u}) {
    EXPECT_EQ(dp_only[i].op, CollectiveOp::all_to_all);
    EXPECT_EQ(dp_only[i].group, "ep");
    EXPECT_EQ(dp_only[i].group_size, 2);
    EXPECT_EQ(dp_only[i].total_bytes, 64 * 8 * 2048 * 2);
  }
  EXPECT_EQ(dp_only[4].name, "ep_dispatch");
  EXPECT_EQ(dp_only[5].name, "ep_combine");
  const auto sp = collective_cases(g, {2, 2, 4, 0, true}, tokens);
  ASSERT_EQ(sp.size(), 7u);
  EXPECT_EQ(sp[0].group_size, 4);
  EXPECT_EQ(sp[0].total_bytes, 4 * 32 * 2048 * 2);  // SP: ceil(64/2) local rows, 4 ranks
  EXPECT_EQ(sp[4].group_size, 4);                   // EP = TP x DP ranks
  EXPECT_EQ(sp[6].name, "tp_allgather");
  const auto tp_only = collective_cases(g, {2, 1, 2, 0, false}, tokens);
  ASSERT_EQ(tp_only.size(), 1u);
  EXPECT_EQ(tp_only[0].name, "tp_allreduce");
  EXPECT_TRUE(collective_cases(g, {1, 1, 1, 0, false}, tokens).empty());
}

}  // namespace
}  // namespace moe
