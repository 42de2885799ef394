// Held-out validation sets and adaptive refinement (docs/measurement.md#fidelity). Pure and
// deterministic: the same job, grid and errors give the same points on every rank and every run.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "core/component.h"
#include "core/job_spec.h"

namespace moe {

// The held-out set of one cell: geometric midpoints of consecutive token rows, and of their halves
// while a half spans more than a factor 1.25 (for `experts` at balanced routing, and all-remote
// where the grid has it), one A-interval midpoint per N row (rotating over the intervals), and
// `job.fidelity.random_points` random feasible points inside the measured range, drawn from the
// job's seed. Never a point of `grid`.
[[nodiscard]] std::vector<GridPoint> held_out_points(const JobSpec& job, const Target& t,
                                                     Component c,
                                                     const std::vector<GridPoint>& grid);

// How `experts` points choose (A, M) at their N: uniformly in the feasible ranges, or at balanced
// routing (balanced_point: the expected distinct local experts, the balanced total).
enum class Routing { random, balanced };

// `count` distinct random feasible points of `c` inside the token range of `grid` and not on it
// (log-uniform N, stratified: one draw in each of `count` equal slices of the log range; for
// `experts` (A, M) by `routing`), drawn with splitmix64 from `seed`: the random part of a held-out
// set, and the fresh set `harness validate` measures.
[[nodiscard]] std::vector<GridPoint> random_feasible_points(const ModelGeometry& g, const Target& t,
                                                            Component c,
                                                            const std::set<GridPoint>& grid,
                                                            int count, std::uint64_t seed,
                                                            Routing routing = Routing::random);

// A held-out point whose interpolated value missed its measurement by more than the tolerance.
struct HeldOutMiss {
  GridPoint point;
  double relative_error;  // |predicted - measured| / measured
};

struct RefinementStep {
  std::vector<GridPoint> grid;      // rows added to the table (sorted)
  std::vector<GridPoint> held_out;  // new held-out points in the refined intervals (sorted)
  int wave_brackets = 0;            // misses refined by bracketing launch-wave steps (below)
};

// The launch waves a backend declares for its `experts` forward of A active local experts sharing
// M rows the way the stimuli share them (kernels' expert_launch_waves): two forwards with equal
// values run the same waves. Where the waves of two neighbouring grid columns differ, the time
// jumps between them by a wave, somewhere a midpoint only halves (docs/measurement.md#fidelity,
// Refinement). Empty: the backend declares none.
using ExpertWaves =
    std::function<std::array<std::int64_t, 2>(std::int64_t activated, std::int64_t assignments)>;

// Refinement stage `stage` (1, 2, ...) of a cell: for each miss (worst first), where `waves` is
// declared and every route is local, the launch-wave steps between the grid columns around the
// miss on its row and the rows on either side (at its A and at its rows per expert) get columns
// on both sides (A and A + 1), so the step becomes an edge of the table in one stage; a miss
// with no such step left (or undeclared waves) has the grid rows that bracket it bisected: the N
// interval (a whole row at its midpoint; the miss itself joins the grid when it lies on that row)
// or, for a miss on an existing N row, the A interval (a column at its midpoint). When neither
// interval can be split the miss itself becomes a grid point. New held-out points are the midpoints
// of the refined intervals and, when the stage adds grid points, `job.fidelity.random_points` fresh
// random feasible points drawn for the stage, so the validation set stays disjoint from the grid
// and is never only where the misses were. Then, for a component tabled over N only, each
// `kernel_changes` pair of consecutive rows at most kKernelStepBracketTokens apart gets the row at
// its midpoint: over the stages that brackets the step between adjacent token counts, which
// interpolation across it cannot see (wider pairs stay reported only: bisecting them did not
// converge). Adds at most `point_budget` grid points (whole rows or columns only; a take that does
// not fit is skipped, a smaller later one may).
inline constexpr std::int64_t kKernelStepBracketTokens = 8;
[[nodiscard]] RefinementStep refinement_step(
    const JobSpec& job, const Target& t, Component c, int stage, const std::set<GridPoint>& grid,
    const std::set<GridPoint>& measured_held_out, std::vector<HeldOutMiss> misses,
    std::int64_t point_budget, const std::vector<std::int64_t>& time_steps = {},
    const std::vector<std::pair<std::int64_t, std::int64_t>>& kernel_changes = {},
    const ExpertWaves& waves = {});

}  // namespace moe
