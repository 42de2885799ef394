#include "core/refinement.h"

#include <gtest/gtest.h>

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

TEST(Refinement, BisectsTheTokenIntervalOfAMissAndProbesBothHalves) {
  const auto job = tiny_job(1);
  const auto t = job.targets().front();
  const std::set<GridPoint> grid{{1, 0, 0}, {16, 0, 0}, {64, 0, 0}};
  const auto step =
      refinement_step(job, t, Component::gate_routing, grid, {{32, 0, 0}}, {{{32, 0, 0}, 0.1}}, 10);
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
  const auto step = refinement_step(job, t, Component::experts, grid, {miss}, {{miss, 0.2}}, 1000);
  const auto row = expert_row(job, t, 16);
  for (const auto& p : row)
    EXPECT_TRUE(std::count(step.grid.begin(), step.grid.end(), p)) << p.activated;
  EXPECT_TRUE(std::count(step.grid.begin(), step.grid.end(), miss));
  // A budget smaller than the row adds nothing (no partial rows).
  EXPECT_TRUE(
      refinement_step(job, t, Component::experts, grid, {miss}, {{miss, 0.2}}, 1).grid.empty());
  // A miss on an existing row between adjacent A values cannot be bracketed: it joins the grid.
  const std::set<GridPoint> columns{{16, 2, 32}, {16, 3, 32}, {32, 2, 64}};
  const GridPoint between{16, 3, 20};
  EXPECT_EQ(refinement_step(job, t, Component::experts, columns, {}, {{between, 0.3}}, 10).grid,
            (std::vector<GridPoint>{between}));
}

TEST(Refinement, WhereEveryRouteIsLocalAMissBetweenRaysAddsTheRayBetweenThemToEveryRow) {
  const auto job = parse_job(
      "model: {preset: qwen3-30b-a3b}\ndeployment: {tp: [1], dp: [1]}\n"
      "tokens: {max_num_batched_tokens: 1024}\ngraph: {mode: NONE}\n",
      "test");
  const auto t = job.targets().front();
  std::set<GridPoint> grid;
  for (const auto n : {256, 1024})
    for (const auto& p : expert_row(job, t, n)) grid.insert(p);
  // Rays M/A = 32 and 64 at both rows; the miss at N = 512 lies between them (M/A = 4096/90).
  const GridPoint miss{512, 90, 4096};
  const auto step = refinement_step(job, t, Component::experts, grid, {miss}, {{miss, 0.2}}, 1000);
  // The ray midway, 48 rows per expert, on every row where A = M/48 is feasible: 2048/48 at
  // N = 256 (8192/48 at N = 1024 exceeds the 128 experts).
  EXPECT_EQ(step.grid, (std::vector<GridPoint>{{256, 43, 2048}}));
  // Probes at the miss's N on either side of the new ray: 40 and 56 rows per expert.
  EXPECT_EQ(step.held_out, (std::vector<GridPoint>{{512, 73, 4096}, {512, 102, 4096}}));
}

}  // namespace
}  // namespace moe
