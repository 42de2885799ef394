#include "kernels/native_tile_rule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <vector>

#include "core/geometry.h"
#include "kernels/staircase_backend.h"

namespace moe {
namespace {

std::int64_t tiles(NativeTile t, std::int64_t rows) {
  return std::max<std::int64_t>(1, (rows + native_tile_tokens(t) - 1) / native_tile_tokens(t));
}

// What `of_rows(rule's tile, rows)` says of a forward changes between b and just above b rows per
// expert only where the rule declares a step (the planner needs no more rows than those).
template <class F>
void expect_changes_only_at_declared_steps(const F& of_rows) {
  const auto steps = native_time_steps(1024);
  for (std::int64_t b = 1; b < 1024; ++b) {
    const auto rows = static_cast<double>(b);
    if (of_rows(native_tile_for(rows), rows) != of_rows(native_tile_for(rows + 0.5), rows + 0.5)) {
      EXPECT_TRUE(std::binary_search(steps.begin(), steps.end(), b)) << b;
    }
  }
}

TEST(NativeTileRule, StepsAreExactlyWhereTheForwardChanges) {
  const auto steps = native_time_steps(1024);
  ASSERT_TRUE(std::is_sorted(steps.begin(), steps.end()));
  for (std::int64_t b = 1; b < 1024; ++b) {
    // Between b and b + 1 rows per expert: the tile of a forward whose mean is above b, and the
    // tiles an expert of b and of b + 1 rows takes under it.
    const auto at = native_tile_for(static_cast<double>(b));
    const auto above = native_tile_for(static_cast<double>(b) + 0.25);
    const bool changes =
        at != above || tiles(at, b) != tiles(above, b) || tiles(above, b) != tiles(above, b + 1);
    EXPECT_EQ(std::binary_search(steps.begin(), steps.end(), b), changes) << b;
  }
  // With the documented tile costs (narrow 0.82, the wgmma tiles from medium 1 to wide 1.27 in
  // steps of 0.0675 per 16 tokens): narrow to medium above 16 rows, then one tile of the next 16
  // tokens every 16 rows up to 128, two tiles the same way up to 256, then three: every expert's
  // tiles are the fewest, sized to within 16 padding rows each.
  EXPECT_EQ(std::vector<std::int64_t>(steps.begin(), steps.begin() + 14),
            (std::vector<std::int64_t>{16, 64, 80, 96, 112, 128, 160, 192, 224, 256, 288, 336, 384,
                                       448}));
}

// The rule chooses from kNativeRuleTiles only: wide160 is built, forced and tested
// (HARNESS_NATIVE_TILE), as is the split160 experiment (kNativeExperimentTiles, in none of the
// other lists), but the rule never returns either, at any rows per expert, until a sweep on the
// GPU the tile costs come from says it should. Every tile has its own name and token rows.
TEST(NativeTileRule, ChoosesOnlyAmongTheRuleTiles) {
  for (double rows = 0.25; rows <= 1024.0; rows += 0.25) {
    const auto t = native_tile_for(rows);
    EXPECT_NE(std::ranges::find(kNativeRuleTiles, t), std::end(kNativeRuleTiles)) << rows;
    EXPECT_NE(t, NativeTile::wide160) << rows;
    EXPECT_NE(t, NativeTile::split160) << rows;
  }
  for (const auto t : kNativeExperimentTiles)
    EXPECT_EQ(std::ranges::find(kNativeTiles, t), std::end(kNativeTiles)) << to_string(t);
  EXPECT_EQ(native_tile_tokens(NativeTile::split160), 160);
  EXPECT_STREQ(to_string(NativeTile::split160), "split160");
  for (const auto t : kNativeRuleTiles)
    EXPECT_NE(std::ranges::find(kNativeTiles, t), std::end(kNativeTiles)) << to_string(t);
  EXPECT_EQ(native_tile_tokens(NativeTile::wide160), 160);
  EXPECT_STREQ(to_string(NativeTile::wide160), "wide160");
  std::vector<int> tokens;
  for (const auto t : kNativeTiles) tokens.push_back(native_tile_tokens(t));
  EXPECT_TRUE(std::ranges::is_sorted(tokens));
  EXPECT_EQ(std::ranges::adjacent_find(tokens), tokens.end());
}

// Pairs of tiles share their weights only where an expert takes more than one tile; the narrow
// tile has no clustered schedule.
TEST(NativeTileRule, TilesArePairedWhereAnExpertTakesSeveral) {
  for (const auto t : kNativeTiles) {
    const double tokens = native_tile_tokens(t);
    const bool wgmma = t != NativeTile::narrow;
    EXPECT_FALSE(native_pairs_tiles(t, 1.0)) << to_string(t);
    EXPECT_FALSE(native_pairs_tiles(t, tokens)) << to_string(t);
    EXPECT_EQ(native_pairs_tiles(t, tokens + 0.5), wgmma) << to_string(t);
    EXPECT_EQ(native_pairs_tiles(t, 4 * tokens), wgmma) << to_string(t);
  }
  // The schedule the rule's tile gets changes only at declared steps.
  expect_changes_only_at_declared_steps(native_pairs_tiles);
}

// W2 runs 128-feature tiles sized to an expert's rows where the rule pairs tiles and the rows
// fit one (129-256 rows per expert), and changes that tile only at declared steps.
TEST(NativeTileRule, W2RunsOneTallTilePerExpertFrom129To256Rows) {
  EXPECT_EQ(native_w2_tall_tokens(native_tile_for(128.0), 128.0), 0);
  EXPECT_EQ(native_w2_tall_tokens(native_tile_for(128.5), 128.5), 160);
  EXPECT_EQ(native_w2_tall_tokens(native_tile_for(144.6), 144.6), 160);
  EXPECT_EQ(native_w2_tall_tokens(native_tile_for(160.0), 160.0), 160);
  EXPECT_EQ(native_w2_tall_tokens(native_tile_for(160.2), 160.2), 192);
  EXPECT_EQ(native_w2_tall_tokens(native_tile_for(211.4), 211.4), 224);
  EXPECT_EQ(native_w2_tall_tokens(native_tile_for(256.0), 256.0), 256);
  EXPECT_EQ(native_w2_tall_tokens(native_tile_for(256.5), 256.5), 0);
  EXPECT_EQ(native_w2_tall_tokens(NativeTile::narrow, 200.0), 0);
  EXPECT_EQ(native_w2_tall_tokens(NativeTile::medium, 64.0), 0);    // one tile: not paired
  EXPECT_EQ(native_w2_tall_tokens(NativeTile::medium, 75.0), 160);  // a forced tile, paired
  expect_changes_only_at_declared_steps(native_w2_tall_tokens);
}

// The routes' own tiles size the pipelined launches' grids: each expert's rows padded to whole
// tiles, at least one tile (no active expert still launches a block), and the mean that picks the
// tile.
TEST(NativeTileRule, TileCountPadsEachExpertsRowsToWholeTiles) {
  const std::vector<int> ten_of_32(10, 32), mixed{1, 64, 65, 128, 129};
  EXPECT_EQ(native_tile_count(ten_of_32, 64), 10);
  EXPECT_EQ(native_tile_count(ten_of_32, 16), 20);
  EXPECT_EQ(native_tile_count(mixed, 64), 1 + 1 + 2 + 2 + 3);
  EXPECT_EQ(native_tile_count(mixed, 160), 5);
  EXPECT_EQ(native_tile_count({}, 64), 1);
  EXPECT_DOUBLE_EQ(native_rows_per_expert(ten_of_32), 32.0);
  EXPECT_DOUBLE_EQ(native_rows_per_expert(mixed), 387.0 / 5);
  EXPECT_EQ(native_rows_per_expert({}), 0.0);
}

// The tile tables' bound holds for any routes (random splits of the lanes over the experts); the
// worst split, every expert one row past a whole tile, comes within one tile of it.
TEST(NativeTileRule, NoRoutesNeedMoreTilesThanTheBound) {
  std::mt19937 rng(20261205);
  for (int trial = 0; trial < 2000; ++trial) {
    const int experts = std::uniform_int_distribution<int>(1, 160)(rng);
    const int lanes = std::uniform_int_distribution<int>(1, 9000)(rng);
    const int tokens = std::array{16, 64, 128, 160, 256}[trial % 5];
    std::vector<int> rows(static_cast<std::size_t>(experts), 0);
    std::uniform_int_distribution<int> pick(0, experts - 1);
    for (int l = 0; l < lanes; ++l) ++rows[static_cast<std::size_t>(pick(rng))];
    ASSERT_LE(native_tile_count(rows, tokens), native_max_tile_count(lanes, experts, tokens))
        << lanes << " lanes, " << experts << " experts, " << tokens << "-row tiles";
  }
  const std::vector<int> one_past(8, 65);  // 8 experts of 65 rows: 2 tiles each
  EXPECT_EQ(native_tile_count(one_past, 64), 16);
  EXPECT_EQ(native_max_tile_count(8 * 65, 8, 64), 9 + 8);
  EXPECT_EQ(native_max_tile_count(3, 128, 64), 1 + 3);  // no more experts with rows than rows
}

TEST(NativeTileRule, OnlyNativeDeclaresSteps) {
  EXPECT_FALSE(expert_time_steps("native", 1024).empty());
  EXPECT_TRUE(expert_time_steps("cublas_grouped", 1024).empty());
  EXPECT_TRUE(expert_time_steps("cpu_reference", 1024).empty());
  EXPECT_TRUE(expert_time_steps("staircase_model", 1024).empty());
}

TEST(NativeTileRule, JobBoundIsTheLargestRowCountOnOneExpertShare) {
  const auto job = parse_job(
      "model:\n  preset: qwen3-30b-a3b\ndeployment:\n  tp: 1\n  dp: 1\ntokens:\n"
      "  max_num_batched_tokens: 8192\n",
      "test");
  // 8192 tokens x k = 8 on the fewest active experts (k = 8): 8192 rows per expert at most.
  EXPECT_EQ(expert_time_steps("native", job), native_time_steps(8192));
  EXPECT_EQ(expert_time_steps("native", job).back(), 8064);
}

// The waves of each launch on 132 SMs (Qwen3-30B-A3B: W13 has 2 x 768 weight rows, W2 2048),
// counted by hand from the blocks the forward launches.
TEST(NativeLaunchWaves, FollowTheBlocksOfEachLaunch) {
  const auto g = *find_preset("qwen3-30b-a3b");
  const auto waves = [&](std::int64_t a, std::int64_t m, int sms = 132) {
    return native_launch_waves(g, sms, a, m);
  };
  using W = std::array<std::int64_t, 2>;
  // Narrow tile (1-2 rows each), one tile per expert, blocks of 64 weight rows, two per SM:
  // W13 24 blocks a tile, W2 32, 264 at a time.
  EXPECT_EQ(waves(11, 16), (W{1, 2}));  // 264 and 352 blocks
  EXPECT_EQ(waves(12, 16), (W{2, 2}));  // 288 and 384
  // Medium tile (29 rows each), one tile per expert, 256-row blocks, one per SM: W13 6 a tile,
  // W2 8: W2 steps above 16 experts, W13 above 22.
  EXPECT_EQ(waves(16, 640), (W{1, 1}));
  EXPECT_EQ(waves(17, 640), (W{1, 2}));
  EXPECT_EQ(waves(22, 640), (W{1, 2}));
  EXPECT_EQ(waves(23, 640), (W{2, 2}));
  EXPECT_EQ(waves(23, 640, 264), (W{1, 1}));  // twice the SMs
  // Paired wide tiles (1024 rows each: 8 tiles of 128), clusters of two CTAs, 66 at a time:
  // 32 pairs x 6 = 192 W13 units, x 8 = 256 W2 units; 9 experts (8 tiles each): 36 pairs.
  EXPECT_EQ(waves(8, 8192), (W{3, 4}));
  EXPECT_EQ(waves(9, 8192), (W{4, 5}));
  // 200 rows each: two wide112 tiles, paired; W2 on one tall tile of 224 rows per expert, 16
  // blocks of 128 features each, one per SM: 40 pairs x 6 = 240 units, 40 x 16 = 640 blocks.
  EXPECT_EQ(waves(40, 8000), (W{4, 5}));
  EXPECT_EQ(waves(0, 0), (W{0, 0}));
  EXPECT_EQ(waves(8, 8192, 0), (W{0, 0}));
}

TEST(NativeLaunchWaves, DeclaredForNativeOnAKnownDeviceAndForTheStaircaseModel) {
  const auto g = *find_preset("qwen3-30b-a3b");
  const auto native = expert_launch_waves("native", g, 132);
  ASSERT_TRUE(native);
  EXPECT_EQ(native(23, 640), native_launch_waves(g, 132, 23, 640));
  EXPECT_FALSE(expert_launch_waves("native", g, 0));  // no SM count: nothing to count waves on
  EXPECT_FALSE(expert_launch_waves("cublas_grouped", g, 132));
  EXPECT_FALSE(expert_launch_waves("cpu_reference", g, 0));
  const auto staircase = expert_launch_waves("staircase_model", g, 0);
  ASSERT_TRUE(staircase);
  EXPECT_EQ(staircase(5, 40), (std::array<std::int64_t, 2>{staircase_waves(5, 40), 0}));
  // 5 experts of 8 rows: 2 tiles of 4 rows each, 10 tiles, 6 at a time.
  EXPECT_EQ(staircase_waves(5, 40), 2);
  EXPECT_EQ(staircase_waves(3, 24), 1);
}

}  // namespace
}  // namespace moe
