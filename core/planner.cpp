#include "core/planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <set>

#include "core/refinement.h"
#include "core/roofline.h"

namespace moe {

std::vector<std::int64_t> geometric_axis(std::int64_t lo, std::int64_t hi, double factor) {
  std::set<std::int64_t> pts;
  if (hi < lo) return {};
  pts.insert(lo);
  pts.insert(hi);
  for (double v = static_cast<double>(lo); v < static_cast<double>(hi); v *= factor) {
    const auto r = static_cast<std::int64_t>(std::llround(v));
    if (r >= lo && r <= hi) pts.insert(r);
  }
  return {pts.begin(), pts.end()};
}

std::optional<MRange> feasible_assignments(std::int64_t n, std::int64_t a, int l, int e, int k) {
  if (n < 1 || a < 1 || a > l) return std::nullopt;
  const std::int64_t must_be_local = std::max(0, k - (e - l));
  const std::int64_t lo = std::max(a, n * must_be_local);
  const std::int64_t hi = n * std::min<std::int64_t>(k, a);
  if (lo > hi) return std::nullopt;
  return MRange{lo, hi};
}

std::optional<MRange> feasible_activated(std::int64_t n, int l, int e, int k) {
  const std::int64_t lo = std::max(1, k - (e - l));
  const std::int64_t hi = std::min<std::int64_t>(l, n * k);
  if (lo > hi) return std::nullopt;
  return MRange{lo, hi};
}

std::int64_t balanced_assignments(std::int64_t n, int l, int e, int k) {
  return std::llround(static_cast<double>(n) * k * l / static_cast<double>(e));
}

std::optional<std::string> feasibility_violation(std::int64_t n, std::int64_t a, std::int64_t m,
                                                 int l, int e, int k) {
  const auto says = [](const std::string& rule, std::int64_t bound) {
    return std::optional<std::string>(rule + " = " + std::to_string(bound));
  };
  if (n < 1) return says("N >= 1, got N", n);
  if (a == 0 && m == 0)
    return e - l >= k ? std::nullopt
                      : says("all-remote (A = M = 0) needs E - L >= k; E - L", e - l);
  if (a < 1) return says("A >= 1 (or A = M = 0), got A", a);
  if (a > l) return says("A <= L (local experts)", l);
  if (m < a) return says("M >= A (every activated expert holds a row)", a);
  const std::int64_t forced = n * std::max(0, k - (e - l));
  if (m < forced) return says("M >= N*(k-(E-L)) (routes that must stay local)", forced);
  const std::int64_t most = n * std::min<std::int64_t>(k, a);
  if (m > most) return says("M <= N*min(k, A)", most);
  return std::nullopt;
}

namespace {

// Applies the capture-size rule to a geometric axis over [lo, hi]; `map` takes a per-DP-rank
// token count G to this axis' rows. Capture points are added; with `thin` they also replace the
// interior geometric points of the covered range (beyond the capture cap the geometric points
// and the transition endpoint stay).
template <class Map>
std::vector<std::int64_t> token_axis(const JobSpec& job, std::int64_t lo, std::int64_t hi,
                                     std::int64_t multiple, bool thin, Map map) {
  auto geo = geometric_axis(lo, hi, job.grid_factor);
  std::set<std::int64_t> pts;
  for (auto v : geo) pts.insert(std::min(hi, (v + multiple - 1) / multiple * multiple));
  if (capture_sizes_replace_tokens(job.graph_mode) && !job.capture_sizes.empty()) {
    const auto [gmin, gmax] =
        std::minmax_element(job.capture_sizes.begin(), job.capture_sizes.end());
    const auto cover_lo = map(*gmin), cover_hi = map(*gmax);
    if (thin) std::erase_if(pts, [&](std::int64_t v) { return v > cover_lo && v < cover_hi; });
    for (auto g : job.capture_sizes) pts.insert(map(g));
    pts.insert(lo);
    pts.insert(hi);
  }
  return {pts.begin(), pts.end()};
}

}  // namespace

std::vector<std::int64_t> local_token_axis(const JobSpec& job, const Target& t) {
  const TokenDomains dom(t.tp, t.dp, t.sp);
  return token_axis(job, 1, dom.local_rows(job.max_num_batched_tokens), 1, true,
                    [&](std::int64_t g) { return dom.local_rows(g); });
}

namespace {

// Under SP every gathered row count is a multiple of TP.
std::int64_t expert_rows_multiple(const Target& t) {
  return TokenDomains(t.tp, t.dp, t.sp).sequence_parallel() ? t.tp : 1;
}

// With m assignments spread evenly (counts differing by at most one), the A where every expert
// has at most b rows (the least such A), the next smaller A (some exceed b) and the largest A
// where every expert has more than b.
std::array<std::int64_t, 3> step_bracket(std::int64_t m, std::int64_t b) {
  const std::int64_t at_most = (m + b - 1) / b;
  return {at_most, at_most - 1, m / (b + 1)};
}

}  // namespace

std::vector<std::int64_t> expert_token_axis(const JobSpec& job, const Target& t) {
  const TokenDomains dom(t.tp, t.dp, t.sp);
  const std::int64_t multiple = expert_rows_multiple(t);
  const std::int64_t one = dom.expert_rows(std::vector<std::int64_t>{1});
  // At DP > 1 a step's gathered rows are a sum of unequal per-rank counts, not a capture size:
  // the geometric range stays (docs/measurement.md).
  return token_axis(job, one, dom.uniform_expert_rows(job.max_num_batched_tokens), multiple,
                    t.dp == 1, [&](std::int64_t g) { return dom.uniform_expert_rows(g); });
}

double rows_per_active_expert(const GridPoint& p) {
  return static_cast<double>(p.assignments) / static_cast<double>(p.activated);
}

bool all_routes_local(const JobSpec& job, const Target& t) {
  return ExpertOwnership::of(job.geometry, t).local_experts == job.geometry.experts;
}

std::vector<GridPoint> expert_row(const JobSpec& job, const Target& t, std::int64_t n,
                                  const std::vector<std::int64_t>& time_steps) {
  const auto& g = job.geometry;
  const auto own = ExpertOwnership::of(g, t);
  const int l = own.local_experts, e = g.experts, k = g.top_k;
  const std::int64_t must_be_local = std::max(0, k - (e - l));
  std::set<GridPoint> pts;
  if (e - l >= k) pts.insert({n, 0, 0});  // all-remote
  const auto range = feasible_activated(n, l, e, k);
  if (!range) return {pts.begin(), pts.end()};
  const auto in_range = [&](std::int64_t a) { return a >= range->lo && a <= range->hi; };
  std::set<std::int64_t> a_axis;
  if (all_routes_local(job, t)) {
    // M = N·k in every column, so the rows per active expert M/A vary with A alone: A sits on
    // rows-per-expert rays (geometric, the same values in every row) and brackets each declared
    // time step, so that the step lines M/A = b, which the N rows cross diagonally, are edges of
    // the rows-per-expert mesh (docs/measurement.md#grid).
    const std::int64_t m = n * k;
    for (const auto r : geometric_axis(1, m, job.grid_factor))
      a_axis.insert(std::llround(static_cast<double>(m) / static_cast<double>(r)));
    for (const auto b : time_steps)
      for (const auto a : step_bracket(m, b)) a_axis.insert(a);
  } else {
    for (auto a : geometric_axis(1, l, job.grid_factor)) a_axis.insert(a);
  }
  // Endpoints, the slope changes of M's bounds (A = k on the upper, A = N*r on the lower) and the
  // balanced routing's A (where a serving step's routing sits, like M's balanced total).
  const std::int64_t balanced_a = std::llround(expected_distinct_experts(g, l, n));
  for (auto a : {range->lo, range->hi, std::int64_t{k}, n * must_be_local, balanced_a})
    a_axis.insert(a);
  std::erase_if(a_axis, [&](std::int64_t a) { return !in_range(a); });
  for (auto a : a_axis)
    for (const auto& p : expert_column(job, t, n, a)) pts.insert(p);
  return {pts.begin(), pts.end()};
}

std::vector<GridPoint> expert_column(const JobSpec& job, const Target& t, std::int64_t n,
                                     std::int64_t a) {
  const auto& g = job.geometry;
  const int l = ExpertOwnership::of(g, t).local_experts, e = g.experts, k = g.top_k;
  const auto range = feasible_assignments(n, a, l, e, k);
  if (!range) return {};
  std::set<std::int64_t> m_axis{range->lo, range->hi};
  for (auto m : geometric_axis(1, range->hi, job.grid_factor))
    if (m > range->lo && m < range->hi) m_axis.insert(m);
  const std::int64_t balanced = balanced_assignments(n, l, e, k);
  if (balanced >= range->lo && balanced <= range->hi) m_axis.insert(balanced);
  std::vector<GridPoint> out;
  for (auto m : m_axis) out.push_back({n, a, m});
  return out;
}

std::vector<std::int64_t> step_token_rows(const JobSpec& job, const Target& t,
                                          const std::vector<std::int64_t>& time_steps) {
  const auto axis = expert_token_axis(job, t);
  if (axis.empty() || time_steps.empty()) return {};
  const std::int64_t multiple = expert_rows_multiple(t);
  // Rows per active expert along the balanced line; nullopt where no positive-work point exists.
  const auto mean_rows = [&](std::int64_t n) -> std::optional<double> {
    const auto p = balanced_point(job, t, n);
    if (!p || p->activated < 1) return std::nullopt;
    return rows_per_active_expert(*p);
  };
  // The first N of the axis' domain (multiples of `multiple`) whose mean exceeds (or reaches)
  // `bound`; the means grow with N, so a binary search finds it.
  const auto first_n = [&](double bound, bool inclusive) -> std::optional<std::int64_t> {
    std::int64_t lo = axis.front(), hi = axis.back();
    const auto past = [&](std::int64_t n) {
      const auto m = mean_rows(n);
      return m && (inclusive ? *m >= bound : *m > bound);
    };
    if (!past(hi)) return std::nullopt;
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (past(mid))
        hi = mid;
      else
        lo = mid + 1;
    }
    return (lo + multiple - 1) / multiple * multiple;
  };
  std::set<std::int64_t> rows;
  for (const auto b : time_steps) {
    const auto above = first_n(static_cast<double>(b), false);
    if (!above) break;
    if (*above - multiple >= axis.front()) rows.insert(*above - multiple);  // every expert <= b
    rows.insert(*above);                                                    // some exceed b
    if (const auto all = first_n(static_cast<double>(b + 1), true))
      rows.insert(*all);  // every expert > b
  }
  std::erase_if(rows, [&](std::int64_t n) { return n < axis.front() || n > axis.back(); });
  return {rows.begin(), rows.end()};
}

std::vector<GridPoint> expert_grid(const JobSpec& job, const Target& t,
                                   const std::vector<std::int64_t>& time_steps) {
  std::set<std::int64_t> token_rows;
  for (const auto n : expert_token_axis(job, t)) token_rows.insert(n);
  for (const auto n : step_token_rows(job, t, time_steps)) token_rows.insert(n);
  std::set<GridPoint> pts;
  for (const auto n : token_rows)
    for (const auto& p : expert_row(job, t, n, time_steps)) pts.insert(p);
  return {pts.begin(), pts.end()};
}

namespace {

// (N, A) at the balanced total of assignments, clamped into the feasible M range.
std::optional<GridPoint> balanced_column(const ModelGeometry& g, const Target& t, std::int64_t n,
                                         std::int64_t a) {
  const int l = ExpertOwnership::of(g, t).local_experts;
  const auto range = feasible_assignments(n, a, l, g.experts, g.top_k);
  if (!range) return std::nullopt;
  return GridPoint{
      n, a, std::clamp(balanced_assignments(n, l, g.experts, g.top_k), range->lo, range->hi)};
}

}  // namespace

std::optional<GridPoint> balanced_column_point(const JobSpec& job, const Target& t, std::int64_t n,
                                               std::int64_t a) {
  return balanced_column(job.geometry, t, n, a);
}

std::optional<GridPoint> balanced_point(const ModelGeometry& g, const Target& t, std::int64_t n) {
  const int l = ExpertOwnership::of(g, t).local_experts;
  const auto range = feasible_activated(n, l, g.experts, g.top_k);
  if (!range) return std::nullopt;
  return balanced_column(g, t, n,
                         std::clamp<std::int64_t>(std::llround(expected_distinct_experts(g, l, n)),
                                                  range->lo, range->hi));
}

std::optional<GridPoint> balanced_point(const JobSpec& job, const Target& t, std::int64_t n) {
  return balanced_point(job.geometry, t, n);
}

std::vector<Component> component_set(const ModelGeometry& g, const Target& t) {
  std::vector<Component> c{Component::gate_routing, Component::experts};
  if (t.dp > 1) c.push_back(Component::finalize_copy);
  if (g.has_shared_experts()) c.push_back(Component::wrapper);
  return c;
}

int weight_bank_count(std::int64_t local_expert_weight_bytes, std::int64_t l2_bytes) {
  if (local_expert_weight_bytes <= 0) return 2;
  const auto need = (2 * l2_bytes + local_expert_weight_bytes - 1) / local_expert_weight_bytes;
  return static_cast<int>(std::clamp<std::int64_t>(need, 2, kMaxWeightBanks));
}

int forwards_per_arm(int iterations, int banks) {
  const int cycle = 2 * banks;
  return (iterations + cycle - 1) / cycle * cycle;
}

DeviceModel nominal_device(std::string_view backend) {
  if (host_backend(backend))
    return {"nominal host CPU", 10e9, 2e9, 0.0, 0, 0, 2e-4, 2e-3};  // no cache conditioning
  // Host overheads per point-round measured on an H200 node: the Qwen3-30B-A3B TP1/DP1 native
  // acquisition spends about 36 s per round verifying 265 expert points (docs/measurement.md).
  return {"nominal H200", 4.3e12, 790e12, 4e-6, 60LL << 20, 132, 0.02, 0.15};
}

double estimate_forward_seconds(const ModelGeometry& g, Component c, const GridPoint& p,
                                const DeviceModel& d) {
  // The roofline floor of the bytes and flops the component must move, plus a launch overhead
  // per kernel of the usual launch sequence.
  int kernels = 1;
  switch (c) {
    case Component::gate_routing:
      kernels = 2;
      break;
    case Component::experts:
      kernels = p.assignments > 0 ? 6 : 1;
      break;
    case Component::finalize_copy:
      break;
    case Component::wrapper:
      kernels = 4;
      break;
  }
  return floor_of(g, c, p, {d.bytes_per_s, d.flops_per_s}).us * 1e-6 +
         kernels * d.launch_overhead_s;
}

MemoryEstimate estimate_memory(const JobSpec& job, const TargetPlan& t) {
  const auto& g = job.geometry;
  const std::int64_t w = bytes_of(g.weight_dtype);
  const bool experts =
      std::any_of(t.components.begin(), t.components.end(),
                  [](const ComponentGrid& c) { return c.component == Component::experts; });
  MemoryEstimate m;
  if (experts)  // the 2B arm's banks are allocated for the whole cell round
    m.weight_bytes += 2LL * t.weight_banks * t.ownership.local_experts * g.expert_weight_bytes();
  m.weight_bytes +=
      static_cast<std::int64_t>(g.shared.count) * 3 * g.hidden * g.shared.intermediate * w +
      static_cast<std::int64_t>(g.experts) * g.hidden * bytes_of(g.router_dtype);
  std::int64_t rows = 1;
  for (const auto& c : t.components)
    for (const auto& p : c.points) rows = std::max(rows, p.tokens);
  // Per row: input, output and the reference's fp32 copies of hidden states (6 x H x 4 bytes),
  // k expert activations of I values and their routes, and the intermediate of the shared experts.
  const std::int64_t per_row =
      6LL * g.hidden * 4 + static_cast<std::int64_t>(g.top_k) * (2LL * g.intermediate * 4 + 16) +
      2LL * g.shared.count * g.shared.intermediate * 4;
  m.buffer_bytes = rows * per_row;
  return m;
}

std::vector<std::int64_t> local_grid_rows(const std::vector<std::int64_t>& axis, Component c,
                                          const std::vector<std::int64_t>& gate_time_steps) {
  if (axis.empty() || c != Component::gate_routing) return axis;
  std::set<std::int64_t> rows(axis.begin(), axis.end());
  for (const auto b : gate_time_steps)
    for (const auto n : {b, b + 1})
      if (n >= axis.front() && n <= axis.back()) rows.insert(n);
  return {rows.begin(), rows.end()};
}

Plan make_plan(const JobSpec& job, std::optional<std::int64_t> l2_bytes,
               std::vector<std::int64_t> expert_time_steps,
               std::vector<std::int64_t> gate_time_steps) {
  Plan plan{job,
            nominal_device(job.backend),
            std::nullopt,
            std::move(expert_time_steps),
            std::move(gate_time_steps),
            {}};
  if (l2_bytes) plan.device.l2_bytes = *l2_bytes;
  for (const auto& t : job.targets()) {
    TargetPlan tp{t, ExpertOwnership::of(job.geometry, t), 2, local_token_axis(job, t), {}};
    tp.weight_banks = weight_bank_count(
        tp.ownership.local_experts * job.geometry.expert_weight_bytes(), plan.device.l2_bytes);
    for (auto c : component_set(job.geometry, t)) {
      if (!job.components.empty() &&
          std::find(job.components.begin(), job.components.end(), c) == job.components.end())
        continue;
      ComponentGrid grid{c, {}, {}};
      if (c == Component::experts) {
        grid.points = expert_grid(job, t, plan.expert_time_steps);
      } else {
        for (auto n : local_grid_rows(tp.local_tokens, c, plan.gate_time_steps))
          grid.points.push_back({n, 0, 0});
      }
      grid.held_out = held_out_points(job, t, c, grid.points);
      tp.components.push_back(std::move(grid));
    }
    plan.targets.push_back(std::move(tp));
  }
  if (std::all_of(plan.targets.begin(), plan.targets.end(),
                  [](const TargetPlan& t) { return t.components.empty(); }))
    throw JobError(
        "the components filter selects no component of any target (finalize_copy "
        "exists only for DP > 1, wrapper only with shared experts)");
  return plan;
}

namespace {

// Timed forwards of one point in one round: both arms for `experts`.
std::int64_t forwards_per_point_round(const JobSpec& job, int weight_banks, Component c) {
  return c == Component::experts ? 2LL * forwards_per_arm(job.iterations, weight_banks)
                                 : job.iterations;
}

}  // namespace

double nominal_point_round_seconds(const JobSpec& job, std::string_view backend,
                                   const DeviceModel& d, int weight_banks, Component c,
                                   const GridPoint& p) {
  const double overhead =
      c == Component::experts ? d.expert_point_overhead_s : d.local_point_overhead_s;
  // The settle phase holds the device for its wall time per point-round.
  return static_cast<double>(forwards_per_point_round(job, weight_banks, c)) *
             estimate_forward_seconds(job.geometry, c, p, d) +
         overhead + settle_ms_for(job, backend) / 1000.0;
}

double nominal_round_seconds(const JobSpec& job, std::string_view backend, int weight_banks,
                             Component c, const std::vector<GridPoint>& points) {
  const auto device = nominal_device(backend);
  double seconds = 0;
  for (const auto& p : points)
    seconds += nominal_point_round_seconds(job, backend, device, weight_banks, c, p);
  return seconds;
}

PlanEstimate Plan::estimate(const TargetPlan& t, Component c) const {
  PlanEstimate e;
  for (const auto& grid : t.components) {
    if (grid.component != c) continue;
    const std::int64_t per_round = forwards_per_point_round(job, t.weight_banks, c);
    const double measured_point_round = !measured                 ? 0
                                        : c == Component::experts ? measured->expert_point_round_s
                                                                  : measured->local_point_round_s;
    const double capped_extra_s = std::max(
        0.0, (capped_settle_ms_for(job, job.backend) - settle_ms_for(job, job.backend)) / 1000.0);
    std::vector<GridPoint> measured_points = grid.points;  // the grid and its held-out set
    measured_points.insert(measured_points.end(), grid.held_out.begin(), grid.held_out.end());
    for (const auto& p : measured_points) {
      e.points += 1;
      e.forwards += per_round * job.rounds;
      e.device_seconds += static_cast<double>(per_round * job.rounds) *
                          estimate_forward_seconds(job.geometry, c, p, device);
      // A measured cost already contains the settle and its run on.
      e.held_seconds +=
          (measured ? measured_point_round
                    : nominal_point_round_seconds(job, job.backend, device, t.weight_banks, c, p)) *
          job.rounds;
      if (!measured) e.capped_settle_seconds += capped_extra_s * job.rounds;
    }
  }
  return e;
}

std::string cost_model_description(const Plan& plan) {
  if (plan.measured) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "measured: %.4f s per expert point-round, %.4f s per local",
                  plan.measured->expert_point_round_s, plan.measured->local_point_round_s);
    return std::string(buf) + " point-round (" + plan.measured->source + ")";
  }
  const int settle = settle_ms_for(plan.job, plan.job.backend);
  return "nominal: " + plan.device.name + " roofline plus fixed per-point overheads" +
         (settle > 0 ? " and a " + std::to_string(settle) + " ms settle per point-round" : "") +
         ", not measured on this machine (an acquire of this job records measured costs that "
         "later plans use)";
}

PlanEstimate Plan::estimate() const {
  PlanEstimate total;
  for (const auto& t : targets)
    for (const auto& grid : t.components) {
      const auto e = estimate(t, grid.component);
      total.points += e.points;
      total.forwards += e.forwards;
      total.device_seconds += e.device_seconds;
      total.held_seconds += e.held_seconds;
      total.capped_settle_seconds += e.capped_settle_seconds;
    }
  return total;
}

}  // namespace moe
