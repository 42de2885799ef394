#include "core/planner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

namespace moe {
namespace {

JobSpec job_for(const std::string& preset, int tp, int dp, std::int64_t budget,
                const std::string& graph = "NONE") {
  return parse_job(
      "model:\n  preset: " + preset + "\ndeployment:\n  tp: " + std::to_string(tp) +
          "\n  dp: " + std::to_string(dp) + "\n  ranks: [0]\ntokens:\n  max_num_batched_tokens: " +
          std::to_string(budget) + "\n  max_num_seqs: 64\ngraph:\n  mode: " + graph + "\n",
      "test");
}

TEST(Grid, GeometricAxisIncludesBothEndpoints) {
  EXPECT_EQ(geometric_axis(1, 10, 2.0), (std::vector<std::int64_t>{1, 2, 4, 8, 10}));
  EXPECT_EQ(geometric_axis(3, 3, 2.0), (std::vector<std::int64_t>{3}));
  EXPECT_EQ(geometric_axis(1, 5, 1.5), (std::vector<std::int64_t>{1, 2, 3, 5}));
}

TEST(Grid, FeasibleAssignmentsFollowThePolytope) {
  // E=128, L=64, k=8: no forced local routes.
  auto r = feasible_assignments(4, 3, 64, 128, 8);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->lo, 3);
  EXPECT_EQ(r->hi, 12);
  // E=8, L=4, k=6: at least k-(E-L)=2 routes per row are local.
  r = feasible_assignments(3, 4, 4, 8, 6);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->lo, 6);
  EXPECT_EQ(r->hi, 12);
  EXPECT_FALSE(
      feasible_assignments(3, 1, 4, 8, 6));  // 1 active cannot host 2 routes/row... M<=3 < 6
  EXPECT_FALSE(feasible_assignments(1, 9, 64, 128, 8));  // A > N*k
}

void check_expert_grid(const JobSpec& job) {
  const auto t = job.targets().front();
  const auto& g = job.geometry;
  const int l = ExpertOwnership::of(g, t).local_experts, e = g.experts, k = g.top_k;
  const auto pts = expert_grid(job, t);
  ASSERT_FALSE(pts.empty());
  std::set<GridPoint> seen;
  std::map<std::int64_t, std::set<std::pair<std::int64_t, std::int64_t>>> by_n;
  for (const auto& p : pts) {
    EXPECT_TRUE(seen.insert(p).second) << "duplicate point";
    by_n[p.tokens].insert({p.activated, p.assignments});
    if (p.activated == 0) {
      EXPECT_EQ(p.assignments, 0);
      EXPECT_GE(e - l, k) << "all-remote point without enough remote experts";
      continue;
    }
    const std::int64_t lo =
        std::max<std::int64_t>(p.activated, p.tokens * std::max(0, k - (e - l)));
    const std::int64_t hi = p.tokens * std::min<std::int64_t>(k, p.activated);
    EXPECT_LE(lo, p.assignments);
    EXPECT_LE(p.assignments, hi);
    EXPECT_GE(p.activated, 1);
    EXPECT_LE(p.activated, l);
  }
  const std::int64_t r = std::max(0, k - (e - l));
  for (const auto& [n, am] : by_n) {
    if (e - l >= k) {
      EXPECT_TRUE(am.count({0, 0})) << "all-remote missing at N=" << n;
    }
    const std::int64_t a_lo = std::max<std::int64_t>(1, r), a_hi = std::min<std::int64_t>(l, n * k);
    std::set<std::int64_t> a_axis;
    for (const auto& [a, m] : am)
      if (a > 0) a_axis.insert(a);
    // Polygon corners: A endpoints and slope changes, each with both M bounds.
    for (auto a : {a_lo, a_hi, std::int64_t{k}, n * r})
      if (a >= a_lo && a <= a_hi) {
        EXPECT_TRUE(a_axis.count(a)) << "corner A=" << a << " N=" << n;
      }
    const std::int64_t bal = std::llround(static_cast<double>(n) * k * l / e);
    for (auto a : a_axis) {
      const auto range = feasible_assignments(n, a, l, e, k);
      ASSERT_TRUE(range);
      EXPECT_TRUE(am.count({a, range->lo})) << "N=" << n << " A=" << a;
      EXPECT_TRUE(am.count({a, range->hi})) << "N=" << n << " A=" << a;
      if (bal >= range->lo && bal <= range->hi) {
        EXPECT_TRUE(am.count({a, bal})) << "balanced missing N=" << n << " A=" << a;
      }
    }
  }
}

TEST(Grid, ExpertPointsSatisfyTheInequalityAndCoverCorners) {
  check_expert_grid(job_for("qwen3-30b-a3b", 1, 2, 512));
  check_expert_grid(job_for("qwen3-30b-a3b", 2, 4, 256));
  check_expert_grid(job_for("deepseek-v3", 1, 8, 128));
  check_expert_grid(job_for("tiny", 1, 2, 64, "FULL"));
  // Few remote experts force local routes (k - (E - L) > 0).
  check_expert_grid(parse_job(
      "model:\n  hidden_size: 16\n  moe_intermediate_size: 8\n  num_experts: 8\n  top_k: 6\n"
      "deployment:\n  tp: 1\n  dp: 2\n  ranks: [0]\ntokens:\n  max_num_batched_tokens: 16\n",
      "forced-local"));
}

TEST(Grid, Ep1CollapsesAssignmentsToNTimesK) {
  const auto job = job_for("qwen3-30b-a3b", 1, 1, 1024);
  const auto pts = expert_grid(job, job.targets().front());
  std::set<std::pair<std::int64_t, std::int64_t>> na;
  for (const auto& p : pts) {
    EXPECT_EQ(p.assignments, p.tokens * 8);
    EXPECT_GE(p.activated, 8);  // every route is local: A >= k
    EXPECT_TRUE(na.insert({p.tokens, p.activated}).second) << "redundant M point";
  }
}

TEST(Grid, CaptureSizesReplaceInteriorTokenPoints) {
  auto job = job_for("tiny", 1, 2, 64, "FULL_AND_PIECEWISE");
  job.capture_sizes = {1, 3, 6, 12};
  const auto t = job.targets().front();
  // Local: capture points cover [1,12]; geometric 2,4,8 removed; 16,32 and the budget kept.
  EXPECT_EQ(local_token_axis(job, t), (std::vector<std::int64_t>{1, 3, 6, 12, 16, 32, 64}));
  // Expert rows at DP2 are sums of unequal per-rank counts: the capture images G -> DP*G =
  // 2,6,12,24 are added, and the geometric rows between them stay.
  EXPECT_EQ(expert_token_axis(job, t),
            (std::vector<std::int64_t>{1, 2, 4, 6, 8, 12, 16, 24, 32, 64, 128}));
  // At DP1 the expert rows are the local rows: thinned like them.
  auto dp1 = job_for("tiny", 1, 1, 64, "FULL_AND_PIECEWISE");
  dp1.capture_sizes = {1, 3, 6, 12};
  EXPECT_EQ(expert_token_axis(dp1, dp1.targets().front()),
            (std::vector<std::int64_t>{1, 3, 6, 12, 16, 32, 64}));
  job.graph_mode = GraphMode::full_decode_only;
  EXPECT_EQ(local_token_axis(job, t), (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64}));
  job.graph_mode = GraphMode::none;
  EXPECT_EQ(local_token_axis(job, t), (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64}));
}

TEST(Grid, SequenceParallelTokenAxes) {
  auto job = parse_job(
      "model:\n  preset: tiny\ndeployment:\n  tp: 2\n  dp: 2\n  sp: true\n  ranks: [0]\n"
      "tokens:\n  max_num_batched_tokens: 9\n",
      "sp");
  const auto t = job.targets().front();
  ASSERT_TRUE(t.sp);
  EXPECT_EQ(local_token_axis(job, t), (std::vector<std::int64_t>{1, 2, 4, 5}));  // ceil(9/2)=5
  for (auto n : expert_token_axis(job, t)) EXPECT_EQ(n % 2, 0) << n;
  EXPECT_EQ(expert_token_axis(job, t).back(), 2 * 2 * 5);
}

// Mean rows per active expert of the balanced point at N.
double balanced_mean(const JobSpec& job, const Target& t, std::int64_t n) {
  const auto p = balanced_point(job, t, n);
  return static_cast<double>(p->assignments) / static_cast<double>(p->activated);
}

TEST(Grid, EveryRowHoldsItsBalancedRoutingPoint) {
  // Where a serving step's routing sits is measured on every row, not interpolated across A.
  for (const auto& job : {job_for("qwen3-30b-a3b", 1, 1, 1024), job_for("qwen3-30b-a3b", 2, 4, 256),
                          job_for("deepseek-v3", 1, 8, 128)}) {
    const auto t = job.targets().front();
    const auto grid = expert_grid(job, t);
    const std::set<GridPoint> points(grid.begin(), grid.end());
    for (const auto n : expert_token_axis(job, t)) {
      const auto p = balanced_point(job, t, n);
      ASSERT_TRUE(p) << n;
      EXPECT_TRUE(points.contains(*p)) << job.geometry.name << " N=" << n << " A=" << p->activated;
    }
  }
}

TEST(Grid, RowsBracketEachDeclaredTimeStep) {
  const auto job = job_for("qwen3-30b-a3b", 1, 1, 8192);
  const auto t = job.targets().front();
  const std::vector<std::int64_t> steps{16, 128, 384, 100000};
  const auto rows = step_token_rows(job, t, steps);
  const std::set<std::int64_t> row_set(rows.begin(), rows.end());
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  for (const std::int64_t b : {16, 128, 384}) {
    // The last N with every expert at <= b rows, the next (some above b) and the first N where
    // the mean reaches b + 1, each checked against the balanced point itself.
    std::int64_t lo = 1;
    while (balanced_mean(job, t, lo + 1) <= static_cast<double>(b)) ++lo;
    std::int64_t all = lo + 1;
    while (balanced_mean(job, t, all) < static_cast<double>(b + 1)) ++all;
    EXPECT_TRUE(row_set.contains(lo)) << b;
    EXPECT_TRUE(row_set.contains(lo + 1)) << b;
    EXPECT_TRUE(row_set.contains(all)) << b;
  }
  // E = 128, k = 8: every expert is active from N of about 100, so these are 16 b (+1, +16).
  EXPECT_EQ(rows, (std::vector<std::int64_t>{256, 257, 272, 2048, 2049, 2064, 6144, 6145, 6160}));
  // The grid has whole rows there; without declared steps it does not.
  std::set<std::int64_t> with, without;
  for (const auto& p : expert_grid(job, t, steps)) with.insert(p.tokens);
  for (const auto& p : expert_grid(job, t)) without.insert(p.tokens);
  for (const auto n : rows) EXPECT_TRUE(with.contains(n)) << n;
  EXPECT_FALSE(without.contains(2049));
  const auto grid_with = expert_grid(job, t, steps);
  const std::set<GridPoint> grid_set(grid_with.begin(), grid_with.end());
  for (const auto& p : expert_row(job, t, 2049)) EXPECT_TRUE(grid_set.contains(p));
  // make_plan keeps the steps and plans the same grid.
  const auto plan = make_plan(job, std::nullopt, steps);
  EXPECT_EQ(plan.expert_time_steps, steps);
  for (const auto& grid : plan.targets.front().components) {
    if (grid.component == Component::experts) {
      EXPECT_EQ(grid.points, grid_with);
    }
  }
}

TEST(Grid, WhereEveryRouteIsLocalRowsSitOnRowsPerExpertRaysAroundEachStep) {
  const auto job = parse_job(
      "model:\n  preset: qwen3-30b-a3b\ndeployment:\n  tp: 1\n  dp: 1\ntokens:\n"
      "  max_num_batched_tokens: 2048\ngraph:\n  mode: NONE\n",
      "ep1");
  const auto t = job.targets().front();
  const std::vector<std::int64_t> steps{16, 64, 96, 128, 192, 256, 384, 512, 1000};
  for (const std::int64_t n : {3, 40, 333, 2048}) {
    const std::int64_t m = n * 8, lo = 8, hi = std::min<std::int64_t>(128, m);
    std::set<std::int64_t> axis;
    for (const auto& p : expert_row(job, t, n, steps)) {
      EXPECT_EQ(p.assignments, m);
      axis.insert(p.activated);
    }
    // The same rows-per-expert rays in every row: M/A = 1, 2, 4, ... wherever A is feasible.
    for (std::int64_t r = 1; r <= m; r *= 2) {
      if (const auto a = std::llround(double(m) / double(r)); a >= lo && a <= hi) {
        EXPECT_TRUE(axis.contains(a)) << n << " ray " << r;
      }
    }
    // Around each step b, by the histogram the stimulus realises (counts differ by at most one):
    // the least A whose experts all have at most b rows, the A below it (some have more), and
    // the largest A whose experts all have more than b.
    for (const auto b : steps) {
      std::optional<std::int64_t> all_at_most, all_above;
      for (std::int64_t a = lo; a <= hi; ++a) {
        if (!all_at_most && (m + a - 1) / a <= b) all_at_most = a;
        if (m / a >= b + 1) all_above = a;
      }
      if (all_at_most) {
        EXPECT_TRUE(axis.contains(*all_at_most)) << n << " step " << b;
        if (*all_at_most > lo) {
          EXPECT_TRUE(axis.contains(*all_at_most - 1)) << n << " step " << b;
        }
      }
      if (all_above) {
        EXPECT_TRUE(axis.contains(*all_above)) << n << " step " << b;
      }
    }
  }
  // With routes to remote experts (EP2) M varies in each column, and the A axis stays geometric.
  const auto ep2 = parse_job(
      "model:\n  preset: qwen3-30b-a3b\ndeployment:\n  tp: 1\n  dp: 2\n  ep: 2\n  ranks: [0]\n"
      "tokens:\n  max_num_batched_tokens: 1024\n",
      "ep2");
  std::set<std::int64_t> a_ep2;
  for (const auto& p : expert_row(ep2, ep2.targets().front(), 512, steps))
    a_ep2.insert(p.activated);
  for (const std::int64_t a : {1, 2, 4, 8, 16, 32, 64}) EXPECT_TRUE(a_ep2.contains(a)) << a;
}

TEST(Grid, StepRowsStayInTheSequenceParallelDomain) {
  auto job = parse_job(
      "model:\n  preset: qwen3-30b-a3b\ndeployment:\n  tp: 2\n  dp: 2\n  sp: true\n"
      "  ranks: [0]\ntokens:\n  max_num_batched_tokens: 4096\n",
      "sp");
  const auto t = job.targets().front();
  const auto rows = step_token_rows(job, t, {16, 64});
  ASSERT_FALSE(rows.empty());
  const auto axis = expert_token_axis(job, t);
  for (const auto n : rows) {
    EXPECT_EQ(n % 2, 0) << n;
    EXPECT_GE(n, axis.front());
    EXPECT_LE(n, axis.back());
  }
}

// The gate's grid holds b and b + 1 of every declared gate step inside its token range, beside
// the local token axis; the other local components keep the axis, and the plan carries the steps.
TEST(Grid, GateRowsBracketEachDeclaredGateStep) {
  auto job = parse_job(
      "model:\n  preset: qwen3-30b-a3b\ndeployment:\n  tp: 1\n  dp: 2\n  ranks: [0]\n"
      "tokens:\n  max_num_batched_tokens: 4096\n",
      "gate");
  const auto t = job.targets().front();
  const auto axis = local_token_axis(job, t);
  const std::vector<std::int64_t> steps{100, 2048, 4096, 9000};
  const auto rows = local_grid_rows(axis, Component::gate_routing, steps);
  ASSERT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  std::set<std::int64_t> want(axis.begin(), axis.end());
  want.insert({100, 101, 2048, 2049, 4096});  // 4097 and 9000 lie beyond the range
  EXPECT_EQ(std::set<std::int64_t>(rows.begin(), rows.end()), want);
  EXPECT_EQ(local_grid_rows(axis, Component::finalize_copy, steps), axis);

  const auto plan = make_plan(job, std::nullopt, {}, steps);
  EXPECT_EQ(plan.gate_time_steps, steps);
  for (const auto& grid : plan.targets.front().components) {
    std::vector<std::int64_t> tokens;
    for (const auto& p : grid.points) tokens.push_back(p.tokens);
    if (grid.component == Component::gate_routing) {
      EXPECT_EQ(tokens, rows);
    } else if (grid.component == Component::finalize_copy) {
      EXPECT_EQ(tokens, axis);
    }
  }
}

TEST(Plan, ComponentSetsFollowThePath) {
  const auto tiny = *find_preset("tiny");
  const auto qwen = *find_preset("qwen3-30b-a3b");
  EXPECT_EQ(component_set(qwen, {1, 1, 1, 0, false}),
            (std::vector<Component>{Component::gate_routing, Component::experts}));
  EXPECT_EQ(component_set(qwen, {1, 2, 2, 0, false}),
            (std::vector<Component>{Component::gate_routing, Component::experts,
                                    Component::finalize_copy}));
  EXPECT_EQ(component_set(tiny, {1, 2, 2, 0, false}).back(), Component::wrapper);
}

TEST(Plan, ComponentsFilterKeepsTargetsAndChangesTheGrids) {
  JobSpec job = parse_job(
      "model: {preset: tiny}\ndeployment: {tp: [1], dp: [1, 2]}\n"
      "tokens: {max_num_batched_tokens: 64, max_num_seqs: 8}\noutput: {variant: t}\n",
      "test");
  const auto all = make_plan(job);
  JobOverrides o;
  o.components = parse_component_list("finalize_copy", "--components");
  apply_overrides(job, o);
  const auto filtered = make_plan(job);
  ASSERT_EQ(filtered.targets.size(), all.targets.size());  // collectives still need every target
  for (const auto& t : filtered.targets)
    for (const auto& g : t.components) EXPECT_EQ(g.component, Component::finalize_copy);
  EXPECT_TRUE(filtered.targets.front().components.empty());  // TP1/DP1 has no finalize_copy
  EXPECT_EQ(filtered.targets.back().components.size(), 1u);
  job.dp = {1};
  EXPECT_THROW((void)make_plan(job), JobError);  // selects nothing anywhere
}

TEST(Plan, BankRuleAndCompleteCycles) {
  EXPECT_EQ(weight_bank_count(1LL << 30, 60LL << 20), 2);   // far larger than L2
  EXPECT_EQ(weight_bank_count(20LL << 20, 60LL << 20), 6);  // 2*60/20
  EXPECT_EQ(weight_bank_count(1024, 60LL << 20), kMaxWeightBanks);
  EXPECT_EQ(forwards_per_arm(10, 2), 12);
  EXPECT_EQ(forwards_per_arm(4, 2), 4);
  EXPECT_EQ(forwards_per_arm(1, 3), 6);
}

TEST(Plan, DeterministicAndCountsForwards) {
  const auto job = job_for("qwen3-30b-a3b", 1, 2, 512);
  const auto a = make_plan(job), b = make_plan(job);
  ASSERT_EQ(a.targets.size(), b.targets.size());
  for (std::size_t i = 0; i < a.targets.size(); ++i)
    for (std::size_t c = 0; c < a.targets[i].components.size(); ++c)
      EXPECT_EQ(a.targets[i].components[c].points, b.targets[i].components[c].points);
  const auto& t = a.targets.front();
  const auto gate = a.estimate(t, Component::gate_routing);
  EXPECT_EQ(gate.forwards, gate.points * job.rounds * job.iterations);
  const auto ex = a.estimate(t, Component::experts);
  EXPECT_EQ(ex.forwards,
            ex.points * job.rounds * 2 * forwards_per_arm(job.iterations, t.weight_banks));
  EXPECT_GT(a.estimate().device_seconds, 0);
}

TEST(Estimate, TheCappedSettleIsAnUpperBoundOnTopOfTheNominalModel) {
  auto plan = make_plan(job_for("qwen3-30b-a3b", 1, 1, 64));
  plan.job.backend = "native";
  const auto e = plan.estimate();
  EXPECT_NEAR(e.capped_settle_seconds,
              static_cast<double>(e.points * plan.job.rounds) *
                  (kGpuCappedSettleMs - kGpuSettleMs) / 1000.0,
              1e-9);
  plan.job.capped_settle_ms = 100;  // no longer than the settle: never extended
  EXPECT_EQ(plan.estimate().capped_settle_seconds, 0.0);
  plan.job.capped_settle_ms.reset();
  plan.measured = MeasuredCost{0.5, 0.01, "test"};  // measured costs contain it
  EXPECT_EQ(plan.estimate().capped_settle_seconds, 0.0);
}

// The nominal cost of one point-round (what acquire scales by its measured ratios) is the timed
// forwards of both arms for experts (one set otherwise), the per-point overhead and the settle.
TEST(Estimate, NominalPointRoundIsForwardsOverheadAndSettle) {
  auto plan = make_plan(job_for("qwen3-30b-a3b", 1, 1, 64));
  plan.job.backend = "native";
  const auto& t = plan.targets.front();
  const auto d = nominal_device("native");
  const auto& g = plan.job.geometry;
  double held = 0;
  for (const auto& grid : t.components) {
    auto points = grid.points;
    points.insert(points.end(), grid.held_out.begin(), grid.held_out.end());
    for (const auto& p : points) {
      const bool experts = grid.component == Component::experts;
      const double forwards = experts ? 2.0 * forwards_per_arm(plan.job.iterations, t.weight_banks)
                                      : plan.job.iterations;
      const double want = forwards * estimate_forward_seconds(g, grid.component, p, d) +
                          (experts ? d.expert_point_overhead_s : d.local_point_overhead_s) +
                          kGpuSettleMs / 1000.0;
      const double got =
          nominal_point_round_seconds(plan.job, "native", d, t.weight_banks, grid.component, p);
      ASSERT_NEAR(got, want, 1e-12 * want);
      held += got * plan.job.rounds;
      // No settle on a host backend.
      EXPECT_NEAR(nominal_point_round_seconds(plan.job, "cpu_reference", d, t.weight_banks,
                                              grid.component, p),
                  want - kGpuSettleMs / 1000.0, 1e-12 * want);
    }
  }
  // The plan's nominal estimate is the same sum.
  double planned = 0;
  for (const auto& grid : t.components) planned += plan.estimate(t, grid.component).held_seconds;
  EXPECT_NEAR(planned, held, 1e-9 * held);
}

TEST(Estimate, MeasuredCostsReplaceTheNominalModelAndSaySo) {
  auto plan = make_plan(job_for("qwen3-30b-a3b", 1, 1, 64));
  EXPECT_NE(cost_model_description(plan).find("nominal"), std::string::npos);
  std::int64_t expert_points = 0, local_points = 0;
  for (const auto& t : plan.targets)
    for (const auto& g : t.components)
      (g.component == Component::experts ? expert_points : local_points) +=
          static_cast<std::int64_t>(g.points.size() + g.held_out.size());
  plan.measured = MeasuredCost{0.5, 0.01, "test"};
  const auto e = plan.estimate();
  EXPECT_NEAR(e.held_seconds, (0.5 * expert_points + 0.01 * local_points) * plan.job.rounds, 1e-9);
  EXPECT_GT(e.device_seconds, 0.0);  // the roofline of the timed forwards is still reported
  const auto text = cost_model_description(plan);
  EXPECT_NE(text.find("measured: 0.5000 s per expert point-round"), std::string::npos) << text;
  EXPECT_NE(text.find("(test)"), std::string::npos) << text;
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// The weights are exact: 2B banks of the local experts' gate/up/down matrices, the shared experts
// and the router; an EP2 rank holds half the experts.
TEST(Planner, MemoryEstimateCountsTheBanksOfTheLocalExperts) {
  auto job = load_job_file(std::string(HARNESS_SOURCE_DIR) + "/jobs/qwen3-30b-a3b.yaml");
  const auto plan = make_plan(job, std::int64_t{60} << 20);
  const auto& g = job.geometry;
  for (const auto& t : plan.targets) {
    const auto m = estimate_memory(job, t);
    const std::int64_t expert = 3LL * g.hidden * g.intermediate * 2;  // bf16
    EXPECT_EQ(m.weight_bytes,
              2LL * t.weight_banks * t.ownership.local_experts * expert +
                  static_cast<std::int64_t>(g.experts) * g.hidden * bytes_of(g.router_dtype))
        << t.target.label();
    EXPECT_GT(m.buffer_bytes, 0);
  }
}

}  // namespace
}  // namespace moe
