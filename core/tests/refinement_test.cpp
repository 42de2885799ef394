#include "core/refinement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "core/planner.h"

namespace moe {
namespace {

JobSpec tiny_job(int dp) {
  return parse_job("model: {preset: tiny}\ndeployment: {tp: [1], dp: [" + std::to_string(dp) +
                       "]}\ntokens: {max_num_batched_tokens: 64, max_num_seqs: 16}\n",
                   "test");
}

TEST(HeldOut, DisjointFromTheGridFeasibleAndDeterministic) {
  for (const int dp : {1, 2}) {
    const auto job = tiny_job(dp);
    const auto plan = make_plan(job);
    for (const auto& t : plan.targets)
      for (const auto& g : t.components) {
        ASSERT_FALSE(g.held_out.empty()) << to_string(g.component);
        const std::set<GridPoint> grid(g.points.begin(), g.points.end());
        for (const auto& p : g.held_out) {
          EXPECT_FALSE(grid.contains(p));
          EXPECT_GT(p.tokens, grid.begin()->tokens);  // strictly inside the token range
          if (g.component == Component::experts) {
            EXPECT_FALSE(feasibility_violation(p.tokens, p.activated, p.assignments,
                                               t.ownership.local_experts, job.geometry.experts,
                                               job.geometry.top_k))
                << p.tokens << "," << p.activated << "," << p.assignments;
          }
        }
        EXPECT_EQ(held_out_points(job, t.target, g.component, g.points), g.held_out);
      }
  }
}

TEST(HeldOut, AnotherSeedDrawsOtherRandomPoints) {
  auto job = tiny_job(1);
  const auto t = job.targets().front();
  const auto grid = expert_grid(job, t);
  const auto a = held_out_points(job, t, Component::experts, grid);
  job.seed += 1;
  EXPECT_NE(held_out_points(job, t, Component::experts, grid), a);
}

TEST(HeldOut, AWideTokenIntervalIsProbedInBothHalvesWhereItsBisectionWouldProbe) {
  auto job = tiny_job(1);
  job.fidelity.random_points = 0;
  const auto t = job.targets().front();
  const std::vector<GridPoint> grid{{2048, 0, 0}, {2300, 0, 0}, {4096, 0, 0}};
  const auto held = held_out_points(job, t, Component::gate_routing, grid);
  // 2048 → 2300 (a factor 1.12): its midpoint. 2300 → 4096 (1.78): its midpoint 3069, and both
  // halves (1.33 each) theirs; their halves (1.15) are narrow enough.
  EXPECT_EQ(held, (std::vector<GridPoint>{{2170, 0, 0}, {2657, 0, 0}, {3069, 0, 0}, {3546, 0, 0}}));
  // A miss at the midpoint is bisected there, and the probes of the halves are the ones already
  // measured: nothing new to probe.
  std::set<GridPoint> measured(held.begin(), held.end());
  const auto step = refinement_step(job, t, Component::gate_routing, 1, {grid.begin(), grid.end()},
                                    measured, {{{3069, 0, 0}, 0.1}}, 10);
  EXPECT_EQ(step.grid, (std::vector<GridPoint>{{3069, 0, 0}}));
  EXPECT_TRUE(step.held_out.empty());
}

TEST(HeldOut, RandomPointsFallOneInEachSliceOfTheLogTokenRange) {
  const auto job = tiny_job(1);
  const auto t = job.targets().front();
  const std::set<GridPoint> grid{{1, 0, 0}, {8192, 0, 0}};
  const int count = 12;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    const auto points =
        random_feasible_points(job.geometry, t, Component::gate_routing, grid, count, seed);
    ASSERT_EQ(points.size(), static_cast<std::size_t>(count));
    std::vector<int> per_slice(count, 0);
    for (const auto& p : points) {
      const double fraction = std::log(static_cast<double>(p.tokens)) / std::log(8192.0);
      ++per_slice[std::min(count - 1, static_cast<int>(fraction * count))];
    }
    // Rounding N to an integer may move a draw across a slice edge, never further.
    for (int s = 0; s < count; ++s) EXPECT_LE(per_slice[s], 2) << "seed " << seed << " slice " << s;
    EXPECT_GE(std::count(per_slice.begin(), per_slice.end(), 1), count - 2) << "seed " << seed;
  }
  // Free points only near the top of the range (7 of 64 token counts): the empty slices' draws
  // come from the whole range and still find them.
  std::set<GridPoint> crowded;
  for (std::int64_t n = 1; n <= 64; ++n)
    if (n < 50 || n % 2 == 1) crowded.insert({n, 0, 0});  // free: 50, 52, ..., 62
  for (std::uint64_t seed = 1; seed <= 20; ++seed)
    EXPECT_EQ(
        random_feasible_points(job.geometry, t, Component::gate_routing, crowded, 6, seed).size(),
        6u)
        << "seed " << seed;
  // A range with fewer free points than asked for gives what there is.
  EXPECT_EQ(random_feasible_points(job.geometry, t, Component::gate_routing, {{1, 0, 0}, {4, 0, 0}},
                                   count, 7),
            (std::vector<GridPoint>{{2, 0, 0}, {3, 0, 0}}));
}

TEST(Refinement, BisectsTheTokenIntervalOfAMissAndProbesBothHalves) {
  auto job = tiny_job(1);
  job.fidelity.random_points = 0;  // the bisection's probes alone (fresh draws: below)
  const auto t = job.targets().front();
  const std::set<GridPoint> grid{{1, 0, 0}, {16, 0, 0}, {64, 0, 0}};
  const auto step = refinement_step(job, t, Component::gate_routing, 1, grid, {{32, 0, 0}},
                                    {{{32, 0, 0}, 0.1}}, 10);
  // sqrt(16 * 64) = 32: the miss itself becomes the new row; probes at sqrt(16*32), sqrt(32*64).
  EXPECT_EQ(step.grid, (std::vector<GridPoint>{{32, 0, 0}}));
  EXPECT_EQ(step.held_out, (std::vector<GridPoint>{{23, 0, 0}, {45, 0, 0}}));
}

TEST(Refinement, AddsWholeExpertRowsWithinTheBudgetAndPromotesUnsplittableMisses) {
  const auto job = tiny_job(1);
  const auto t = job.targets().front();
  std::set<GridPoint> grid;
  for (const auto n : {8, 32})
    for (const auto& p : expert_row(job, t, n)) grid.insert(p);
  const auto miss = *balanced_point(job, t, 16);
  const auto step =
      refinement_step(job, t, Component::experts, 1, grid, {miss}, {{miss, 0.2}}, 1000);
  const auto row = expert_row(job, t, 16);
  for (const auto& p : row)
    EXPECT_TRUE(std::count(step.grid.begin(), step.grid.end(), p)) << p.activated;
  EXPECT_TRUE(std::count(step.grid.begin(), step.grid.end(), miss));
  // A budget smaller than the row adds nothing (no partial rows).
  EXPECT_TRUE(
      refinement_step(job, t, Component::experts, 1, grid, {miss}, {{miss, 0.2}}, 1).grid.empty());
  // A miss on an existing row between adjacent A values cannot be bracketed: it joins the grid.
  const std::set<GridPoint> columns{{16, 2, 32}, {16, 3, 32}, {32, 2, 64}};
  const GridPoint between{16, 3, 20};
  EXPECT_EQ(refinement_step(job, t, Component::experts, 1, columns, {}, {{between, 0.3}}, 10).grid,
            (std::vector<GridPoint>{between}));
}

TEST(Refinement, ATakeThatDoesNotFitTheBudgetIsSkippedAndASmallerLaterOneStillFits) {
  const auto job = tiny_job(1);
  const auto t = job.targets().front();
  const std::set<GridPoint> grid{{16, 2, 32}, {16, 3, 32}, {32, 2, 64}};
  const auto wide = *balanced_point(job, t, 24);  // bisects N: more than one point
  const GridPoint between{16, 3, 20};             // unsplittable: joins the grid alone
  ASSERT_GT(
      refinement_step(job, t, Component::experts, 1, grid, {}, {{wide, 0.5}}, 1000).grid.size(),
      1u);
  const std::vector<HeldOutMiss> misses{{wide, 0.5}, {between, 0.3}};  // the wide one first
  EXPECT_EQ(refinement_step(job, t, Component::experts, 1, grid, {}, misses, 1).grid,
            (std::vector<GridPoint>{between}));
}

TEST(Refinement, AKernelChangeBetweenCloseRowsGetsTheRowBetweenUntilTheRowsAreAdjacent) {
  auto job = tiny_job(1);
  job.fidelity.random_points = 0;
  const auto t = job.targets().front();
  const std::set<GridPoint> grid{{1, 0, 0},  {4, 0, 0},  {8, 0, 0},  {9, 0, 0},
                                 {16, 0, 0}, {24, 0, 0}, {32, 0, 0}, {64, 0, 0}};
  // (8, 9) is adjacent, (32, 64) wider than the bracket: reported only.
  const std::vector<std::pair<std::int64_t, std::int64_t>> changes{
      {4, 8}, {8, 9}, {16, 24}, {32, 64}};
  const auto step =
      refinement_step(job, t, Component::gate_routing, 1, grid, {}, {}, 10, {}, changes);
  EXPECT_EQ(step.grid, (std::vector<GridPoint>{{6, 0, 0}, {20, 0, 0}}));
  // The next stage bisects what is left: the step lies between 6 and 8.
  std::set<GridPoint> next(grid);
  next.insert(step.grid.begin(), step.grid.end());
  EXPECT_EQ(
      refinement_step(job, t, Component::gate_routing, 2, next, {}, {}, 10, {}, {{6, 8}}).grid,
      (std::vector<GridPoint>{{7, 0, 0}}));
  // Misses first (48 bisects 32-64 at its geometric midpoint, 45), then the brackets, within
  // the budget.
  const std::vector<HeldOutMiss> misses{{{48, 0, 0}, 0.1}};
  EXPECT_EQ(
      refinement_step(job, t, Component::gate_routing, 1, grid, {}, misses, 2, {}, changes).grid,
      (std::vector<GridPoint>{{6, 0, 0}, {45, 0, 0}}));
  // Only components tabled over N alone.
  std::set<GridPoint> rows;
  for (const auto n : {4, 8})
    for (const auto& p : expert_row(job, t, n)) rows.insert(p);
  EXPECT_TRUE(refinement_step(job, t, Component::experts, 1, rows, {}, {}, 1000, {}, {{4, 8}})
                  .grid.empty());
}

TEST(Refinement, AStageThatAddsRowsAlsoDrawsFreshRandomPointsOfItsOwn) {
  const auto job = tiny_job(1);  // fidelity.random_points 12
  const auto t = job.targets().front();
  const std::set<GridPoint> grid{{1, 0, 0}, {16, 0, 0}, {64, 0, 0}};
  const std::set<GridPoint> measured{{4, 0, 0}, {32, 0, 0}, {40, 0, 0}};
  const std::vector<HeldOutMiss> misses{{{32, 0, 0}, 0.1}};
  const auto step = refinement_step(job, t, Component::gate_routing, 1, grid, measured, misses, 10);
  ASSERT_EQ(step.grid, (std::vector<GridPoint>{{32, 0, 0}}));
  // The two bisection probes, and 12 random points off the new table and off everything
  // measured or probed already.
  EXPECT_EQ(step.held_out.size(), 2u + 12u);
  for (const auto& p : step.held_out) {
    EXPECT_FALSE(grid.contains(p) || measured.contains(p) || p == (GridPoint{32, 0, 0}))
        << p.tokens;
    EXPECT_TRUE(p.tokens > 1 && p.tokens < 64) << p.tokens;
  }
  // The same stage draws the same points; another stage draws others.
  EXPECT_EQ(
      refinement_step(job, t, Component::gate_routing, 1, grid, measured, misses, 10).held_out,
      step.held_out);
  EXPECT_NE(
      refinement_step(job, t, Component::gate_routing, 2, grid, measured, misses, 10).held_out,
      step.held_out);
  // A stage that adds nothing to the table draws nothing.
  EXPECT_TRUE(
      refinement_step(job, t, Component::gate_routing, 1, grid, measured, {}, 10).held_out.empty());
}

JobSpec qwen3_job() {
  auto job = parse_job(
      "model: {preset: qwen3-30b-a3b}\ndeployment: {tp: [1], dp: [1]}\n"
      "tokens: {max_num_batched_tokens: 1024}\ngraph: {mode: NONE}\n",
      "test");
  job.fidelity.random_points = 0;
  return job;
}

// One refinement stage of the job's expert rows 256 and 1024 (EP1: every route local) for a
// single miss.
RefinementStep refine_between_rows_256_and_1024(const GridPoint& miss) {
  const auto job = qwen3_job();
  const auto t = job.targets().front();
  std::set<GridPoint> grid;
  for (const auto n : {256, 1024})
    for (const auto& p : expert_row(job, t, n)) grid.insert(p);
  return refinement_step(job, t, Component::experts, 1, grid, {miss}, {{miss, 0.2}}, 1000);
}

TEST(Refinement, WhereEveryRouteIsLocalAMissBetweenRaysAddsTheRayBetweenThemToEveryRow) {
  // Rays M/A = 64 and 128 at both rows; the miss at N = 512 lies between them (M/A = 4096/43).
  const auto step = refine_between_rows_256_and_1024({512, 43, 4096});
  // The ray midway, 96 rows per expert, on both rows: A = 2048/96 and 8192/96.
  EXPECT_EQ(step.grid, (std::vector<GridPoint>{{256, 21, 2048}, {1024, 85, 8192}}));
  // Probes at the miss's N on either side of the new ray: 80 and 112 rows per expert.
  EXPECT_EQ(step.held_out, (std::vector<GridPoint>{{512, 37, 4096}, {512, 51, 4096}}));
}

TEST(Refinement, AMissWhoseRayLeavesThePolytopeBeforeTheNextRowGetsTheRowBetween) {
  const auto job = qwen3_job();
  const auto t = job.targets().front();
  std::set<GridPoint> row;
  for (const auto& p : expert_row(job, t, 512))
    if (p.activated > 0) row.insert(p);
  // Between the rays 32 and 64 the ray midway, 48 rows per expert, needs 8192/48 = 171 of the
  // 128 experts at N = 1024: it would add a point at N = 256 only, and the miss would still be
  // interpolated from the points it was. So the token interval is bisected: the row at
  // sqrt(256 * 1024) = 512, which the miss (on it) joins.
  const GridPoint miss{512, 90, 4096};
  auto with_miss = row;
  with_miss.insert(miss);
  EXPECT_EQ(refine_between_rows_256_and_1024(miss).grid,
            (std::vector<GridPoint>{with_miss.begin(), with_miss.end()}));
  // A balanced point with every expert active (A = E) is the same case: no ray through it
  // reaches the row above, whose balanced point has more rows per expert: the row at 512.
  const auto balanced = *balanced_point(job, t, 640);
  ASSERT_EQ(balanced.activated, 128);
  EXPECT_EQ(refine_between_rows_256_and_1024(balanced).grid,
            (std::vector<GridPoint>{row.begin(), row.end()}));
}

// Declared waves with one step, between A = 22 and 23 (as the native W13 launch's 6 blocks per
// tile cross 132 SMs there at one tile per expert).
std::array<std::int64_t, 2> one_step_at_23(std::int64_t activated, std::int64_t /*assignments*/) {
  return {activated >= 23 ? 2 : 1, 0};
}

TEST(Refinement, AMissAcrossADeclaredWaveStepGetsColumnsOnBothSidesOfTheStep) {
  const auto job = qwen3_job();
  const auto t = job.targets().front();
  std::set<GridPoint> grid;
  for (const auto n : {64, 80, 128})
    for (const auto& p : expert_row(job, t, n)) grid.insert(p);
  const GridPoint miss{80, 24, 640};
  ASSERT_FALSE(grid.contains(miss));
  ASSERT_FALSE(grid.contains(GridPoint{80, 22, 640}) && grid.contains(GridPoint{80, 23, 640}));
  const auto refine = [&](const std::set<GridPoint>& g, const ExpertWaves& waves) {
    return refinement_step(job, t, Component::experts, 1, g, {miss}, {{miss, 0.1}}, 1000, {}, {},
                           waves);
  };
  const auto step = refine(grid, one_step_at_23);
  EXPECT_EQ(step.wave_brackets, 1);
  ASSERT_FALSE(step.grid.empty());
  std::set<GridPoint> table(grid);
  for (const auto& p : step.grid) {
    // Only the two sides of the step, on the miss's row and the rows either side of it.
    EXPECT_TRUE(p.activated == 22 || p.activated == 23) << p.tokens << " " << p.activated;
    EXPECT_TRUE(p.tokens == 64 || p.tokens == 80 || p.tokens == 128) << p.tokens;
    EXPECT_EQ(p.assignments, p.tokens * job.geometry.top_k);
    table.insert(p);
  }
  // The step on the miss's row is now an edge of the table.
  EXPECT_TRUE(table.contains(GridPoint{80, 22, 640}) && table.contains(GridPoint{80, 23, 640}));
  // Without declared waves, or with waves that never step, the interval is bisected as before.
  const auto bisected = refine(grid, {});
  EXPECT_EQ(bisected.wave_brackets, 0);
  EXPECT_NE(bisected.grid, step.grid);
  const auto flat = refine(grid, [](std::int64_t, std::int64_t) {
    return std::array<std::int64_t, 2>{1, 1};
  });
  EXPECT_EQ(flat.grid, bisected.grid);
  EXPECT_EQ(flat.wave_brackets, 0);
  // Once the step is bracketed, a miss still left is bisected.
  const auto next = refine(table, one_step_at_23);
  EXPECT_EQ(next.wave_brackets, 0);
  EXPECT_FALSE(next.grid.empty());
}

// Between two rows that bracket the step already, a miss is still predicted across it where the
// mesh's simplices cross it between the rows: the step's sides join the grid on the miss's own N
// (a partial row of two points), and only then is its interval bisected.
TEST(Refinement, AMissBetweenRowsThatBracketTheStepGetsTheStepOnItsOwnTokens) {
  const auto job = qwen3_job();
  const auto t = job.targets().front();
  std::set<GridPoint> grid;
  for (const auto n : {64, 128}) {
    for (const auto& p : expert_row(job, t, n)) grid.insert(p);
    for (const std::int64_t a : {22, 23}) grid.insert(GridPoint{n, a, n * job.geometry.top_k});
  }
  const GridPoint miss{80, 24, 640};
  const auto refine = [&](const std::set<GridPoint>& g) {
    return refinement_step(job, t, Component::experts, 1, g, {miss}, {{miss, 0.1}}, 1000, {}, {},
                           one_step_at_23);
  };
  const auto step = refine(grid);
  EXPECT_EQ(step.wave_brackets, 1);
  EXPECT_EQ(step.grid, (std::vector<GridPoint>{{80, 22, 640}, {80, 23, 640}}));
  // Once the step is an edge on the miss's tokens too, a miss still left is bisected.
  auto table = grid;
  table.insert(step.grid.begin(), step.grid.end());
  const auto next = refine(table);
  EXPECT_EQ(next.wave_brackets, 0);
  EXPECT_FALSE(next.grid.empty());
}

}  // namespace
}  // namespace moe
