#include <gtest/gtest.h>

#include <numeric>

#include "bundle/fidelity.h"
#include "ranks/acquire.h"

namespace moe {
namespace {

// The work of rank `r` in wave [b, e): the points of its cells c (c % ranks == r).
std::int64_t rank_points(const std::vector<std::int64_t>& cells, int ranks, int r, std::size_t b,
                         std::size_t e) {
  std::int64_t sum = 0;
  for (std::size_t c = b; c < e; ++c)
    if (static_cast<int>(c % static_cast<std::size_t>(ranks)) == r) sum += cells[c];
  return sum;
}

TEST(Waves, EveryCellOnceAndNoRankOverTheBoundUnlessOneCellIs) {
  const std::vector<std::int64_t> cells{64, 10, 64, 64, 3, 64, 64, 200, 1, 64, 64, 64, 5};
  for (const int ranks : {1, 2, 3, 8}) {
    const auto bounds = wave_bounds(cells, ranks, 128);
    ASSERT_EQ(bounds.front(), 0u);
    ASSERT_EQ(bounds.back(), cells.size());
    for (std::size_t w = 0; w + 1 < bounds.size(); ++w) {
      ASSERT_LT(bounds[w], bounds[w + 1]) << "an empty wave";
      for (int r = 0; r < ranks; ++r) {
        const auto load = rank_points(cells, ranks, r, bounds[w], bounds[w + 1]);
        // Over the bound only as a single cell of its own (the 200-point one).
        if (load > 128) {
          EXPECT_EQ(load, 200) << ranks << " ranks, wave " << w;
        }
      }
      // Greedy: the next cell would have pushed its rank over the bound.
      if (bounds[w + 1] < cells.size()) {
        const auto next = bounds[w + 1];
        const int owner = static_cast<int>(next % static_cast<std::size_t>(ranks));
        EXPECT_GT(rank_points(cells, ranks, owner, bounds[w], next + 1), 128)
            << ranks << " ranks, wave " << w;
      }
    }
  }
  // One rank, cells of 64 under a bound of 128: two cells a wave.
  EXPECT_EQ(wave_bounds({64, 64, 64, 64, 64}, 1, 128), (std::vector<std::size_t>{0, 2, 4, 5}));
  EXPECT_EQ(wave_bounds({}, 4, 128), (std::vector<std::size_t>{0}));
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
