#include <gtest/gtest.h>

#include <numeric>

#include "bundle/fidelity.h"
#include "ranks/acquire.h"

namespace moe {
namespace {

// The load of rank `r` in wave [b, e): the loads of its cells c (c % ranks == r).
double rank_load(const std::vector<double>& cells, int ranks, int r, std::size_t b, std::size_t e) {
  double sum = 0;
  for (std::size_t c = b; c < e; ++c)
    if (static_cast<int>(c % static_cast<std::size_t>(ranks)) == r) sum += cells[c];
  return sum;
}

TEST(Waves, EveryCellOnceAndNoRankOverTheBoundUnlessOneCellIs) {
  const std::vector<double> cells{0.5, 0.08, 0.5, 0.5, 0.02, 0.5, 0.5,
                                  1.6, 0.01, 0.5, 0.5, 0.5,  0.04};
  for (const int ranks : {1, 2, 3, 8}) {
    const auto bounds = wave_bounds(cells, ranks);
    ASSERT_EQ(bounds.front(), 0u);
    ASSERT_EQ(bounds.back(), cells.size());
    for (std::size_t w = 0; w + 1 < bounds.size(); ++w) {
      ASSERT_LT(bounds[w], bounds[w + 1]) << "an empty wave";
      for (int r = 0; r < ranks; ++r) {
        const auto load = rank_load(cells, ranks, r, bounds[w], bounds[w + 1]);
        // Over the bound only as a single cell of its own (the 1.6 one).
        if (load > 1) {
          EXPECT_EQ(load, 1.6) << ranks << " ranks, wave " << w;
        }
      }
      // Greedy: the next cell would have pushed its rank over the bound.
      if (bounds[w + 1] < cells.size()) {
        const auto next = bounds[w + 1];
        const int owner = static_cast<int>(next % static_cast<std::size_t>(ranks));
        EXPECT_GT(rank_load(cells, ranks, owner, bounds[w], next + 1), 1)
            << ranks << " ranks, wave " << w;
      }
    }
  }
  EXPECT_EQ(wave_bounds({0.5, 0.5, 0.5, 0.5, 0.5}, 1), (std::vector<std::size_t>{0, 2, 4, 5}));
  EXPECT_EQ(wave_bounds({}, 4), (std::vector<std::size_t>{0}));
}

// Full cells (kCellPoints) of a fast backend fill a wave by points; slow ones (the H200's
// 1.4 s per point-round at large N under the power cap) by predicted seconds, down to one cell
// a wave, so a kill loses about kWaveSeconds, not 256 points' worth.
TEST(Waves, AWaveIsBoundedByPointsAndByPredictedSeconds) {
  const auto points = static_cast<std::int64_t>(kCellPoints);
  const double fast = 0.01 * static_cast<double>(points), slow = 1.4 * static_cast<double>(points);
  EXPECT_DOUBLE_EQ(wave_load(points, fast), static_cast<double>(points) / kWavePoints);
  EXPECT_DOUBLE_EQ(wave_load(points, slow), slow / kWaveSeconds);
  EXPECT_DOUBLE_EQ(wave_load(points, 0), static_cast<double>(points) / kWavePoints);  // no cost yet
  const std::vector<double> fast_cells(8, wave_load(points, fast));
  EXPECT_EQ(wave_bounds(fast_cells, 1), (std::vector<std::size_t>{0, 4, 8}));
  const std::vector<double> slow_cells(3, wave_load(points, slow));
  EXPECT_EQ(wave_bounds(slow_cells, 1), (std::vector<std::size_t>{0, 1, 2, 3}));
  // Two ranks: one slow cell each measured side by side in one wave.
  EXPECT_EQ(wave_bounds(std::vector<double>(4, wave_load(points, 0.9 * kWaveSeconds)), 2),
            (std::vector<std::size_t>{0, 2, 4}));
}

// --time-limit holds back the reservation margin only until this run's waves show how far their
// predictions are off: then the largest overrun of the recent waves, never less than
// kTimeLimitMinMargin; a wave shorter than the next counts its seconds over, not its ratio.
TEST(Waves, TheTimeLimitTrustsThePredictionsAsFarAsThisRunsWavesBoreThemOut) {
  EXPECT_DOUBLE_EQ(time_limit_margin({}, 100), kReservationMargin);
  EXPECT_DOUBLE_EQ(time_limit_margin({{100, 97}, {100, 101}, {100, 99}}, 100), kTimeLimitMinMargin);
  EXPECT_DOUBLE_EQ(time_limit_margin({{100, 102}, {100, 140}, {100, 110}}, 100), 1.4);
  EXPECT_DOUBLE_EQ(time_limit_margin({{100, 160}}, 80), 1.6);  // above the reservation margin too
  // The forty-first session's H200 call: waves of 104-106 s predicted within 1 %; with 421 s gone
  // and --time-limit 540, the next wave ends at 421 + 106 x 1.05 = 532 s and is measured.
  EXPECT_LT(421 + 106 * time_limit_margin({{106, 106}, {106, 104.9}, {105, 106}}, 106), 540);
  EXPECT_GT(421 + 106 * time_limit_margin({}, 106), 540);
}

// The forty-fifth session's fourth call: three short waves (17-47 s), one of them 2.3 times its
// prediction (here the last, 6.5 s predicted and 15 s measured: the log gives the ratio only), then
// a 105 s wave at 84 s of --time-limit 290. As a ratio the overrun stopped the call
// (84 + 105 x 2.3 = 326 s); as 8.5 s over, the wave fits (and took 35 s in the next call).
TEST(Waves, AShortWavesOverrunCountsInSecondsAgainstALongerOne) {
  const std::vector<WaveWall> waves{{18, 20}, {45, 47}, {6.5, 15}};
  EXPECT_NEAR(time_limit_margin(waves, 105), 1 + 8.5 / 105, 1e-12);
  EXPECT_LT(84 + 105 * time_limit_margin(waves, 105), 290);
  EXPECT_NEAR(time_limit_margin(waves, 6.5), 15 / 6.5, 1e-12) << "a wave as short: its ratio";
  EXPECT_NEAR(time_limit_margin(waves, 5), 15 / 6.5, 1e-12) << "a shorter one: its ratio";
}

// Only the last kTimeLimitWaves waves count: the forty-fourth session's wave where the capped
// settle began overran 2.56 times before the costs caught up; the later waves' own overruns take
// over once it is older than that.
TEST(Waves, OnlyTheRecentWavesSayHowFarThePredictionsAreOff) {
  std::vector<WaveWall> waves{{50, 128}};
  EXPECT_NEAR(time_limit_margin(waves, 50), 2.56, 1e-12);
  for (std::size_t i = 0; i < kTimeLimitWaves - 1; ++i) waves.push_back({139, 135});
  EXPECT_NEAR(time_limit_margin(waves, 50), 2.56, 1e-12) << "still among the recent ones";
  waves.push_back({139, 150});
  EXPECT_NEAR(time_limit_margin(waves, 139), 150.0 / 139, 1e-12);
}

TEST(Waves, CellPartsHaveTheirOwnIdsAndRoles) {
  const Target t{1, 1, 1, 0, false};
  const CellRole part{2, true, 3};
  EXPECT_EQ(fidelity_cell_id(t, Component::experts, part),
            fidelity_cell_id(t, Component::experts, {2, true, 0}) + ".part3");
  const auto role = cell_role(fidelity_cell_json(t, Component::experts, part, 3, 2));
  EXPECT_EQ(role.stage, 2);
  EXPECT_TRUE(role.held_out);
  EXPECT_EQ(role.part, 3);
  EXPECT_EQ(cell_role(fidelity_cell_json(t, Component::experts, {0, false, 0}, 3, 2)).part, 0);
}

}  // namespace
}  // namespace moe
