#include "lookup/tables.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>

#include "core/files.h"
#include "core/job_spec.h"
#include "core/planner.h"
#include "lookup/tests/lookup_error_of.h"

namespace moe {
namespace {

// tiny at EP2: E = 8, k = 2, L = 4.
constexpr ExpertPolytope kTiny{8, 2, 4};

TEST(ComponentTables, ExactRowsInterpolationAndRefusals) {
  const ComponentTables t({{Component::gate_routing, {{{1, 0, 0}, 10.0}, {{9, 0, 0}, 30.0}}},
                           {Component::experts,
                            {{{4, 0, 0}, 5.0},
                             {{8, 0, 0}, 7.0},
                             {{4, 1, 4}, 20.0},
                             {{4, 4, 8}, 40.0},
                             {{8, 1, 8}, 30.0},
                             {{8, 4, 16}, 60.0},
                             {{4, 2, 8}, 32.0},
                             {{8, 2, 16}, 50.0}}}},
                          kTiny);
  const auto gate = t.query(Component::gate_routing, 3);
  EXPECT_DOUBLE_EQ(gate.time_us, 15.0);
  EXPECT_FALSE(gate.exact);
  const auto exact = t.query(Component::experts, 4, 4, 8);
  EXPECT_TRUE(exact.exact);
  EXPECT_DOUBLE_EQ(exact.time_us, 40.0);
  EXPECT_DOUBLE_EQ(t.query(Component::experts, 6, 0, 0).time_us, 6.0);  // all-remote over N
  // On an edge of the triangulation: only vertices with weight, which sum to 1.
  const auto edge = t.query(Component::experts, 6, 1, 6);
  double sum = 0;
  for (const auto& v : edge.vertices) {
    EXPECT_GT(v.weight, 1e-12);
    sum += v.weight;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_NEAR(edge.time_us, 25.0, 1e-9);
  EXPECT_NE(lookup_error_of([&] {
              (void)t.query(Component::experts, 4, 2, 9);
            }).find("impossible for this deployment: it violates M <= N*min(k, A) = 8"),
            std::string::npos);
  EXPECT_NE(lookup_error_of([&] { (void)t.query(Component::experts, 4, 5, 8); }).find("A <= L"),
            std::string::npos);
  EXPECT_NE(lookup_error_of([&] {
              (void)t.query(Component::experts, 16, 1, 16);
            }).find("outside the measured support"),
            std::string::npos);
  EXPECT_NE(lookup_error_of([&] {
              (void)t.query(Component::wrapper, 4);
            }).find("wrapper: no measured rows"),
            std::string::npos);
}

TEST(ComponentTables, DuplicateRowsAreRefused) {
  EXPECT_NE(
      lookup_error_of([] {
        ComponentTables({{Component::gate_routing, {{{2, 0, 0}, 1.0}, {{2, 0, 0}, 2.0}}}}, kTiny);
      }).find("gate_routing: two rows at tokens=2"),
      std::string::npos);
  EXPECT_NE(lookup_error_of([] {
              ComponentTables({{Component::experts, {{{4, 1, 4}, 1.0}, {{4, 1, 4}, 2.0}}}}, kTiny);
            }).find("experts: two rows at (N=4, A=1, M=4)"),
            std::string::npos);
}

// A Qwen3-30B-A3B EP1 table (E = 128, k = 8, M = N·k) of a kernel that pads each expert's rows to
// 64-row tiles: time 20 + 0.3·(tiles over all experts) + 0.001·N, a staircase in rows per expert
// whose steps M/A = 64j run diagonally across the N rows. The planner's grid for those declared
// steps, measured exactly, interpolated by the mesh the publisher stores.
double padded_tiles_time(const GridPoint& p) {
  const std::int64_t per = p.assignments / p.activated, extra = p.assignments % p.activated;
  const auto tiles = [](std::int64_t rows) { return (rows + 63) / 64; };
  return 20 +
         0.3 * static_cast<double>((p.activated - extra) * tiles(per) + extra * tiles(per + 1)) +
         0.001 * static_cast<double>(p.tokens);
}

TEST(ComponentTables, ImpossibleRowsAreRefused) {
  EXPECT_EQ(
      lookup_error_of([] {
        (void)ComponentTables({{Component::experts, {{{4, 1, 4}, 1.0}, {{4, 2, 9}, 2.0}}}}, kTiny);
      }),
      "experts: the row at (N=4, A=2, M=9) is impossible for this deployment: it violates "
      "M <= N*min(k, A) = 8");
  EXPECT_EQ(lookup_error_of([] {
              (void)ComponentTables(
                  {{Component::finalize_copy, {{{4, 0, 0}, 1.0}, {{8, 1, 0}, 2.0}}}}, kTiny);
            }),
            "finalize_copy: the row at (N=8, A=1, M=0) is impossible: a local component's rows "
            "have N >= 1 and A = M = 0");
  EXPECT_EQ(impossible_row(Component::experts, {4, 0, 0}, kTiny), std::nullopt);  // E - L >= k
  EXPECT_NE(impossible_row(Component::experts, {4, 0, 0}, {8, 2, 8}), std::nullopt);
}

// What a publisher stores of the experts mesh: its text reads back as the tables' own mesh, and
// the coverage entry signs it; tables without experts rows at A > 0 store none.
TEST(ComponentTables, TheStoredTriangulationIsTheMeshItsCoverageSigns) {
  const ComponentTables t({{Component::gate_routing, {{{1, 0, 0}, 10.0}, {{9, 0, 0}, 30.0}}},
                           {Component::experts,
                            {{{4, 1, 4}, 20.0},
                             {{4, 4, 8}, 40.0},
                             {{8, 1, 8}, 30.0},
                             {{8, 4, 16}, 60.0},
                             {{4, 2, 8}, 32.0}}}},
                          kTiny);
  const auto stored = stored_triangulation(t);
  ASSERT_TRUE(stored.has_value());
  const auto mesh = t.experts_mesh().value();
  EXPECT_EQ(stored->text, triangulation_json(mesh));
  EXPECT_EQ(triangulation_from_json(stored->text).simplices, mesh.simplices);
  EXPECT_EQ(stored->coverage, (nlohmann::json{{"file", "triangulation.json"},
                                              {"sha256", sha256_hex(stored->text)},
                                              {"dimension", mesh.dimension},
                                              {"simplices", mesh.simplices.size()},
                                              {"built_in", to_string(t.experts_mesh_source())}}));
  EXPECT_EQ(stored_triangulation(ComponentTables({{Component::gate_routing, {{{1, 0, 0}, 10.0}}},
                                                  {Component::experts, {{{4, 0, 0}, 5.0}}}},
                                                 kTiny)),
            std::nullopt);
}

TEST(ComponentTables, TheRowsPerExpertMeshKeepsStepsOnItsEdges) {
  const auto job = parse_job(
      "model:\n  preset: qwen3-30b-a3b\ndeployment:\n  tp: 1\n  dp: 1\ntokens:\n"
      "  max_num_batched_tokens: 4096\ngraph:\n  mode: NONE\n",
      "test");
  const auto target = job.targets().front();
  std::vector<std::int64_t> steps;
  for (std::int64_t b = 64; b < 4096; b += 64) steps.push_back(b);
  std::vector<TableRow> rows;
  for (const auto& p : expert_grid(job, target, steps)) rows.push_back({p, padded_tiles_time(p)});
  constexpr ExpertPolytope kEp1{128, 8, 128};
  const ComponentTables mesh({{Component::experts, rows}}, kEp1);
  ASSERT_EQ(mesh.experts_mesh_source(), MeshSource::rows_per_expert);
  std::vector<SimplexInterpolator::Point> pts;
  for (const auto& r : rows)
    pts.push_back({double(r.point.tokens), double(r.point.activated), double(r.point.assignments)});
  const ComponentTables linear({{Component::experts, rows}}, kEp1,
                               SimplexInterpolator(pts).triangulation());
  ASSERT_EQ(linear.experts_mesh_source(), MeshSource::stored);
  // Random feasible (N, A): N log-uniform in [1, 4096], A uniform in its feasible range.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> log_n(0, std::log(4096.0));
  std::vector<double> on_mesh, on_linear;
  for (int i = 0; i < 3000; ++i) {
    const std::int64_t n = std::llround(std::exp(log_n(rng)));
    const std::int64_t a =
        std::uniform_int_distribution<std::int64_t>(8, std::min<std::int64_t>(128, n * 8))(rng);
    const GridPoint q{n, a, n * 8};
    const double want = padded_tiles_time(q);
    on_mesh.push_back(std::fabs(mesh.query(Component::experts, n, a, n * 8).time_us - want) / want);
    on_linear.push_back(std::fabs(linear.query(Component::experts, n, a, n * 8).time_us - want) /
                        want);
  }
  const auto quantile = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
  };
  // Inside a band between two steps the time is affine in (N, A): the mesh answers exactly
  // wherever its cell lies in one band, which is all but the thin cells across each step.
  EXPECT_LT(quantile(on_mesh, 0.9), 1e-9);
  EXPECT_LT(quantile(on_mesh, 0.95), 0.01);
  // The Delaunay triangulation of the same points in (N, A, M) crosses the steps.
  EXPECT_GT(quantile(on_linear, 0.9), 0.02);
}

}  // namespace
}  // namespace moe
