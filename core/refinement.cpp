#include "core/refinement.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include "core/planner.h"
#include "core/seed.h"

namespace moe {

namespace {

// An integer strictly inside (lo, hi) near the geometric mean, else near the arithmetic mean;
// nullopt when hi - lo < 2.
std::optional<std::int64_t> midpoint(std::int64_t lo, std::int64_t hi, bool geometric) {
  if (hi - lo < 2) return std::nullopt;
  auto m = geometric ? std::llround(std::sqrt(static_cast<double>(lo) * static_cast<double>(hi)))
                     : (lo + hi) / 2;
  if (m <= lo || m >= hi) m = (lo + hi) / 2;
  return m;
}

// The held-out token counts inside the row interval (lo, hi): its geometric midpoint, and the
// midpoints of both halves, recursively, while a half spans more than kProbeRatio. A ratio-2
// interval (the geometric rows above the capture sizes) gets its quartiles, not just its middle:
// a table between sparse rows misses where the probes are not (docs/measurement.md#fidelity).
// They are the points refinement's bisection of the interval probes next, so none is measured
// twice.
constexpr double kProbeRatio = 1.25;
void add_interval_probes(std::int64_t lo, std::int64_t hi, std::vector<std::int64_t>& out) {
  const auto m = midpoint(lo, hi, true);
  if (!m) return;
  out.push_back(*m);
  for (const auto& [a, b] : {std::pair{lo, *m}, std::pair{*m, hi}})
    if (static_cast<double>(b) > kProbeRatio * static_cast<double>(a))
      add_interval_probes(a, b, out);
}
std::vector<std::int64_t> interval_probes(std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> out;
  add_interval_probes(lo, hi, out);
  std::sort(out.begin(), out.end());
  return out;
}

// The token rows of the grid in the class of `p`: positive-work expert rows, all-remote rows
// (A = 0) or local rows.
std::vector<std::int64_t> rows_of(const std::set<GridPoint>& grid, const GridPoint& p) {
  std::set<std::int64_t> rows;
  for (const auto& g : grid)
    if ((g.activated == 0) == (p.activated == 0)) rows.insert(g.tokens);
  return {rows.begin(), rows.end()};
}

// The A columns (A > 0) of the grid's experts row at N, ascending.
std::vector<std::int64_t> row_columns(const std::set<GridPoint>& grid, std::int64_t n) {
  std::vector<std::int64_t> columns;
  for (auto g = grid.lower_bound({n, 1, 0}); g != grid.end() && g->tokens == n; ++g)
    if (columns.empty() || columns.back() != g->activated) columns.push_back(g->activated);
  return columns;
}

// Bracketing values of `v` in sorted `axis`, both strictly around it.
std::optional<std::pair<std::int64_t, std::int64_t>> bracket(const std::vector<std::int64_t>& axis,
                                                             std::int64_t v) {
  auto hi = std::upper_bound(axis.begin(), axis.end(), v);
  if (hi == axis.begin() || hi == axis.end()) return std::nullopt;
  auto lo = std::prev(hi);
  if (*lo == v) return std::nullopt;
  return std::make_pair(*lo, *hi);
}

// The probe of a token interval's midpoint for points of p's class.
std::optional<GridPoint> row_probe(const JobSpec& job, const Target& t, Component c,
                                   const GridPoint& p, std::int64_t n) {
  if (c != Component::experts || p.activated == 0) return GridPoint{n, 0, 0};
  return balanced_point(job, t, n);
}

// What refining one miss adds: grid points, and held-out probes in the intervals it splits.
struct Split {
  std::set<GridPoint> take;
  std::vector<std::optional<GridPoint>> probes;
};

// The ray refinement of an experts miss where every route is local: the rays (rows per expert) of
// the grid at the rows around the miss that bracket it, and the points of the ray between them on
// every row (a column of the rows-per-expert mesh, docs/measurement.md#fidelity), with probes
// midway on either side at the miss's N. Empty when the bracket cannot be split, or when the
// miss lies between rows and the new ray is infeasible on one of them.
Split split_ray(const JobSpec& job, const Target& t, const std::set<GridPoint>& grid,
                const std::vector<std::int64_t>& rows, const GridPoint& p) {
  const auto at = [&](std::int64_t n, double r) -> std::optional<GridPoint> {
    const auto a = std::llround(static_cast<double>(n) * job.geometry.top_k / r);
    return balanced_column_point(job, t, n, a);  // M = N·k; nullopt off the feasible A range
  };
  const auto nb = bracket(rows, p.tokens);
  std::set<double> rays;
  for (const auto& g : grid)
    if (g.activated > 0 &&
        (g.tokens == p.tokens || (nb && (g.tokens == nb->first || g.tokens == nb->second))))
      rays.insert(rows_per_active_expert(g));
  const double r = rows_per_active_expert(p);
  const auto hi = rays.upper_bound(r);
  if (hi == rays.begin() || hi == rays.end() || *std::prev(hi) == r) return {};
  const double r1 = *std::prev(hi), r2 = *hi, mid = (r1 + r2) / 2;
  // The new ray reaches a miss between rows only where it is feasible on both rows around it.
  // Where it leaves the polytope between them (toward A = E above all, where every balanced point
  // from a few dozen tokens up lies) the miss is still interpolated from the far row's old points,
  // so the ray would add points and never change its prediction: the N interval is bisected.
  if (nb && (!at(nb->first, mid) || !at(nb->second, mid))) return {};
  Split split;
  for (const auto n : rows)
    if (const auto q = at(n, mid); q && !grid.contains(*q)) split.take.insert(*q);
  if (split.take.empty()) return {};
  split.probes = {at(p.tokens, (r1 + mid) / 2), at(p.tokens, (mid + r2) / 2)};
  return split;
}

// The grid columns of row `n` around a miss's A and around the A of its rows per expert (where
// the rows-per-expert mesh takes its vertices): {first, last}, nullopt for a row of fewer than two.
std::optional<std::pair<std::int64_t, std::int64_t>> columns_around(const JobSpec& job,
                                                                    const std::set<GridPoint>& grid,
                                                                    std::int64_t n,
                                                                    const GridPoint& p) {
  const auto columns = row_columns(grid, n);
  if (columns.size() < 2) return std::nullopt;
  const double same_rows = static_cast<double>(n) * job.geometry.top_k / rows_per_active_expert(p);
  const auto a_lo =
      static_cast<std::int64_t>(std::floor(std::min(static_cast<double>(p.activated), same_rows)));
  const auto a_hi =
      static_cast<std::int64_t>(std::ceil(std::max(static_cast<double>(p.activated), same_rows)));
  auto first = std::upper_bound(columns.begin(), columns.end(), a_lo);
  if (first != columns.begin()) --first;
  auto last = std::lower_bound(columns.begin(), columns.end(), a_hi);
  if (last == columns.end()) --last;
  return std::pair{*first, *last};
}

// Both sides of every declared wave step between columns `first` and `last` on row `n` that the
// grid lacks.
void step_sides(const JobSpec& job, const Target& t, const std::set<GridPoint>& grid,
                std::int64_t n, std::int64_t first, std::int64_t last, const ExpertWaves& waves,
                std::set<GridPoint>& take) {
  for (std::int64_t a = first; a < last; ++a) {
    const auto below = balanced_column_point(job, t, n, a),
               next = balanced_column_point(job, t, n, a + 1);
    if (!below || !next ||
        waves(below->activated, below->assignments) == waves(next->activated, next->assignments))
      continue;
    for (const auto& q : {*below, *next})
      if (!grid.contains(q)) take.insert(q);
  }
}

// The launch-wave refinement of an experts miss where every route is local (M = N·k in every
// column): on the miss's row, if it is one, and the nearest rows below and above it, the grid
// columns around the miss (columns_around) are searched for neighbouring A whose declared waves
// differ; both sides of each such step join the grid. Where the rows either side bracket every
// such step already and the miss lies between them, the mesh's simplices still cross the step
// between the rows (the H100 campaign's (1071, 56, 8568): rows 1040 and 1096 both step at
// A = 55 | 56, its prediction weighed 1040's A = 54 and 55 and 1096's A = 57), so the sides of
// the steps join the grid on the miss's own N instead, two points a step: the step becomes an
// edge there. Empty when every such step is bracketed on every one of those rows.
std::set<GridPoint> wave_brackets(const JobSpec& job, const Target& t,
                                  const std::set<GridPoint>& grid,
                                  const std::vector<std::int64_t>& rows, const GridPoint& p,
                                  const ExpertWaves& waves) {
  std::set<std::int64_t> near;
  const auto at_or_above = std::lower_bound(rows.begin(), rows.end(), p.tokens);
  if (at_or_above != rows.begin()) near.insert(*std::prev(at_or_above));
  const auto above = std::upper_bound(rows.begin(), rows.end(), p.tokens);
  if (above != rows.end()) near.insert(*above);
  const bool on_row = at_or_above != rows.end() && *at_or_above == p.tokens;
  if (on_row) near.insert(p.tokens);
  std::set<GridPoint> take;
  std::optional<std::pair<std::int64_t, std::int64_t>> span;  // the columns around, over the rows
  for (const auto n : near)
    if (const auto around = columns_around(job, grid, n, p)) {
      step_sides(job, t, grid, n, around->first, around->second, waves, take);
      span = span ? std::pair{std::min(span->first, around->first),
                              std::max(span->second, around->second)}
                  : *around;
    }
  if (take.empty() && !on_row && near.size() == 2 && span)
    step_sides(job, t, grid, p.tokens, span->first, span->second, waves, take);
  return take;
}

// The bisection of a miss's interval when no declared wave step is left to bracket: for an
// `experts` miss where every route is local, a new rows-per-expert ray (split_ray); else the N
// interval's midpoint row, or on an existing row the A interval's midpoint column; the miss
// itself where neither interval can be split.
Split bisect_around(const JobSpec& job, const Target& t, Component c,
                    const std::set<GridPoint>& grid, const std::vector<std::int64_t>& rows,
                    const GridPoint& p, const std::vector<std::int64_t>& time_steps) {
  const bool experts = c == Component::experts;
  if (experts && p.activated > 0 && all_routes_local(job, t))
    if (auto ray = split_ray(job, t, grid, rows, p); !ray.take.empty()) return ray;
  Split out;
  auto& take = out.take;
  auto& new_probes = out.probes;
  if (const auto nb = bracket(rows, p.tokens)) {
    // Bisect the N interval: a whole row at its midpoint.
    const auto mid = midpoint(nb->first, nb->second, true);
    if (mid) {
      if (!experts || p.activated == 0) {
        take.insert({*mid, 0, 0});
      } else {
        for (const auto& q : expert_row(job, t, *mid, time_steps))
          if (q.activated > 0) take.insert(q);
      }
      if (p.tokens == *mid) take.insert(p);
      for (const auto& [lo, hi] : {std::pair{nb->first, *mid}, std::pair{*mid, nb->second}})
        if (const auto m = midpoint(lo, hi, true))
          new_probes.push_back(row_probe(job, t, c, p, *m));
    } else {
      take.insert(p);
    }
  } else if (experts && p.activated > 0) {
    // On an existing N row: bisect its A interval with a column at the midpoint.
    const auto ab = bracket(row_columns(grid, p.tokens), p.activated);
    const auto mid = ab ? midpoint(ab->first, ab->second, false) : std::nullopt;
    if (mid) {
      for (const auto& q : expert_column(job, t, p.tokens, *mid)) take.insert(q);
      if (p.activated == *mid) take.insert(p);
      for (const auto& [lo, hi] : {std::pair{ab->first, *mid}, std::pair{*mid, ab->second}})
        if (const auto m = midpoint(lo, hi, false))
          new_probes.push_back(balanced_column_point(job, t, p.tokens, *m));
    } else {
      take.insert(p);
    }
  } else {
    take.insert(p);
  }
  return out;
}

// Deterministic draws (splitmix64), identical on every platform.
class Draws {
 public:
  explicit Draws(std::uint64_t seed) : state_(seed) {}
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  std::int64_t between(std::int64_t lo, std::int64_t hi) {  // inclusive
    return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  // Log-uniform in the slice [lo_fraction, hi_fraction] of the log range from lo to hi.
  std::int64_t log_between(std::int64_t lo, std::int64_t hi, double lo_fraction,
                           double hi_fraction) {
    const double fraction = lo_fraction + unit() * (hi_fraction - lo_fraction);
    const double v =
        std::exp(std::log(static_cast<double>(lo)) +
                 fraction * std::log(static_cast<double>(hi) / static_cast<double>(lo)));
    return std::clamp<std::int64_t>(std::llround(v), lo, hi);
  }

 private:
  std::uint64_t next() { return splitmix64(state_ += kGoldenGamma); }
  std::uint64_t state_;
};

// The random draws, also avoiding `taken` (points already chosen). Stratified in log N: the r-th
// of `count` points is drawn in the r-th of `count` equal slices of the log token range, so no
// stretch of the range (the sparse rows at large N above all) goes unsampled by chance. The draws
// of slices with no free feasible point are made up from the token counts of the whole range in a
// seeded order, at most one per token count, so free points are found however few they are.
std::vector<GridPoint> random_feasible_points(const ModelGeometry& g, const Target& t, Component c,
                                              const std::set<GridPoint>& grid, int count,
                                              std::uint64_t seed, const std::set<GridPoint>& taken,
                                              Routing routing = Routing::random) {
  const bool experts = c == Component::experts;
  const auto rows = rows_of(grid, GridPoint{1, experts ? 1 : 0, 0});
  std::set<GridPoint> out;
  if (rows.size() < 2 || count < 1) return {};
  const int l = ExpertOwnership::of(g, t).local_experts;
  Draws draw(seed);
  // A free point at N (for `experts`, (A, M) by `routing`), or nullopt.
  const auto draw_at = [&](std::int64_t n) -> std::optional<GridPoint> {
    std::optional<GridPoint> p = GridPoint{n, 0, 0};
    if (experts && routing == Routing::balanced) {
      p = balanced_point(g, t, n);
    } else if (experts) {
      const auto a_range = feasible_activated(n, l, g.experts, g.top_k);
      if (!a_range) return std::nullopt;
      const auto a = draw.between(a_range->lo, a_range->hi);
      const auto range = feasible_assignments(n, a, l, g.experts, g.top_k);
      if (!range) return std::nullopt;
      p = GridPoint{n, a, draw.between(range->lo, range->hi)};
    }
    if (!p || grid.contains(*p) || taken.contains(*p) || out.contains(*p)) return std::nullopt;
    return p;
  };
  constexpr int kAttempts = 64, kAttemptsPerToken = 8;
  int missing = 0;
  for (int r = 0; r < count; ++r) {
    std::optional<GridPoint> p;
    for (int attempt = 0; attempt < kAttempts && !p; ++attempt)
      p = draw_at(draw.log_between(rows.front(), rows.back(), static_cast<double>(r) / count,
                                   static_cast<double>(r + 1) / count));
    if (p)
      out.insert(*p);
    else
      ++missing;
  }
  if (missing > 0) {
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(rows.back() - rows.front() + 1));
    std::iota(tokens.begin(), tokens.end(), rows.front());
    for (std::size_t i = tokens.size(); i > 1; --i)  // Fisher-Yates with the seeded draws
      std::swap(
          tokens[i - 1],
          tokens[static_cast<std::size_t>(draw.between(0, static_cast<std::int64_t>(i) - 1))]);
    for (std::size_t i = 0; i < tokens.size() && missing > 0; ++i)
      for (int attempt = 0; attempt < kAttemptsPerToken; ++attempt)
        if (const auto p = draw_at(tokens[i])) {
          out.insert(*p);
          --missing;
          break;
        }
  }
  return {out.begin(), out.end()};
}

// The seed of a cell's random held-out draw: the planned set (stage 0) and each refinement stage.
std::uint64_t held_out_seed(const JobSpec& job, const Target& t, Component c, int stage) {
  return mix_seed({job.seed, static_cast<std::uint64_t>(t.tp), static_cast<std::uint64_t>(t.dp),
                   static_cast<std::uint64_t>(t.rank), t.sp ? 1ULL : 0ULL,
                   static_cast<std::uint64_t>(c), 0x4e1d0077ULL,
                   static_cast<std::uint64_t>(stage)});
}

}  // namespace

std::vector<GridPoint> random_feasible_points(const ModelGeometry& g, const Target& t, Component c,
                                              const std::set<GridPoint>& grid, int count,
                                              std::uint64_t seed, Routing routing) {
  return random_feasible_points(g, t, c, grid, count, seed, {}, routing);
}

std::vector<GridPoint> held_out_points(const JobSpec& job, const Target& t, Component c,
                                       const std::vector<GridPoint>& grid_points) {
  const std::set<GridPoint> grid(grid_points.begin(), grid_points.end());
  std::set<GridPoint> out;
  const auto add = [&](std::optional<GridPoint> p) {
    if (p && !grid.contains(*p)) out.insert(*p);
  };
  const bool experts = c == Component::experts;
  // Token-interval midpoints, per class of rows.
  for (const bool remote : {false, true}) {
    if (remote && !experts) continue;
    const GridPoint cls{1, remote || !experts ? 0 : 1, 0};
    const auto rows = rows_of(grid, cls);
    for (std::size_t i = 0; i + 1 < rows.size(); ++i)
      for (const auto n : interval_probes(rows[i], rows[i + 1])) add(row_probe(job, t, c, cls, n));
  }
  if (experts) {
    // One A-interval midpoint per N row, rotating over the row's intervals.
    std::map<std::int64_t, std::vector<std::int64_t>> a_by_row;
    for (const auto& g : grid)
      if (g.activated > 0) a_by_row[g.tokens].push_back(g.activated);
    std::size_t i = 0;
    for (auto& [n, a] : a_by_row) {
      a.erase(std::unique(a.begin(), a.end()), a.end());
      if (a.size() >= 2) {
        const auto j = i % (a.size() - 1);
        if (const auto am = midpoint(a[j], a[j + 1], false))
          add(balanced_column_point(job, t, n, *am));
      }
      ++i;
    }
  }
  // Random feasible points inside the measured token range.
  const auto random = random_feasible_points(job.geometry, t, c, grid, job.fidelity.random_points,
                                             held_out_seed(job, t, c, 0), out);
  out.insert(random.begin(), random.end());
  return {out.begin(), out.end()};
}

RefinementStep refinement_step(
    const JobSpec& job, const Target& t, Component c, int stage, const std::set<GridPoint>& grid,
    const std::set<GridPoint>& measured_held_out, std::vector<HeldOutMiss> misses,
    std::int64_t point_budget, const std::vector<std::int64_t>& time_steps,
    const std::vector<std::pair<std::int64_t, std::int64_t>>& kernel_changes,
    const ExpertWaves& waves) {
  std::sort(misses.begin(), misses.end(), [](const HeldOutMiss& a, const HeldOutMiss& b) {
    return a.relative_error != b.relative_error ? a.relative_error > b.relative_error
                                                : a.point < b.point;
  });
  std::set<GridPoint> added, probes;
  const auto known = [&](const GridPoint& p) { return grid.contains(p) || added.contains(p); };
  const bool experts = c == Component::experts;
  int wave_bracketed = 0;
  for (const auto& miss : misses) {
    const auto& p = miss.point;
    const auto rows = rows_of(grid, p);
    Split split;
    if (experts && p.activated > 0 && waves && all_routes_local(job, t))
      split.take = wave_brackets(job, t, grid, rows, p, waves);
    const bool at_waves = !split.take.empty();
    if (!at_waves) split = bisect_around(job, t, c, grid, rows, p, time_steps);
    auto& take = split.take;
    std::erase_if(take, known);
    if (take.empty() || static_cast<std::int64_t>(added.size() + take.size()) > point_budget)
      continue;
    added.insert(take.begin(), take.end());
    if (at_waves) ++wave_bracketed;
    for (const auto& q : split.probes)
      if (q) probes.insert(*q);
  }
  if (!experts)
    for (const auto& [lo, hi] : kernel_changes) {
      const GridPoint mid{lo + (hi - lo) / 2, 0, 0};
      if (hi - lo < 2 || hi - lo > kKernelStepBracketTokens || known(mid) ||
          static_cast<std::int64_t>(added.size()) >= point_budget)
        continue;
      added.insert(mid);
    }
  std::erase_if(probes,
                [&](const GridPoint& q) { return known(q) || measured_held_out.contains(q); });
  // A stage that changed the table is also checked where no miss pointed: fresh random points,
  // drawn for this stage, so the final statistics include points refinement never steered by.
  if (!added.empty()) {
    std::set<GridPoint> table(grid);
    table.insert(added.begin(), added.end());
    std::set<GridPoint> taken(measured_held_out);
    taken.insert(probes.begin(), probes.end());
    for (const auto& q :
         random_feasible_points(job.geometry, t, c, table, job.fidelity.random_points,
                                held_out_seed(job, t, c, stage), taken))
      probes.insert(q);
  }
  return {{added.begin(), added.end()}, {probes.begin(), probes.end()}, wave_bracketed};
}

}  // namespace moe
