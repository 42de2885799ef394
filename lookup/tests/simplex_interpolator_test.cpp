#include "lookup/simplex_interpolator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "lookup/tables.h"

namespace moe {
namespace {

using P = SimplexInterpolator::Point;

TEST(SimplexInterpolator, ExactAtEveryVertexAndBarycentricInside) {
  // A 3-D grid with an irregular extra point.
  std::vector<P> pts;
  for (double n : {1.0, 4.0, 16.0})
    for (double a : {1.0, 2.0, 8.0})
      for (double m : {1.0, 10.0, 100.0}) pts.push_back({n, a, m});
  pts.push_back({7.0, 3.0, 33.0});
  const SimplexInterpolator s(pts);
  EXPECT_EQ(s.dimension(), 3);
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const auto w = s.locate(pts[i]);
    ASSERT_TRUE(w);
    double at_i = 0;
    for (const auto& x : *w) at_i += x.vertex == i ? x.weight : 0;
    EXPECT_NEAR(at_i, 1.0, 1e-9) << "vertex " << i;
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> un(1, 16), ua(1, 8), um(1, 100);
  for (int q = 0; q < 200; ++q) {
    const P x{un(rng), ua(rng), um(rng)};
    const auto w = s.locate(x);
    ASSERT_TRUE(w) << "inside the box must be supported";
    ASSERT_LE(w->size(), 4u);
    double sum = 0;
    P back{0, 0, 0};
    for (const auto& [v, weight] : *w) {
      EXPECT_GE(weight, 0.0);
      sum += weight;
      for (int a = 0; a < 3; ++a) back[a] += weight * pts[v][a];
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
    for (int a = 0; a < 3; ++a) EXPECT_NEAR(back[a], x[a], 1e-9 * std::max(1.0, x[a]));
  }
}

TEST(SimplexInterpolator, ReproducesAffineFunctionsAndRefusesOutside) {
  std::vector<P> pts = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  const SimplexInterpolator s(pts);
  const auto f = [](const P& p) { return 3 + 2 * p[0] - p[1] + 5 * p[2]; };
  const P q{0.2, 0.3, 0.1};
  const auto w = s.locate(q);
  ASSERT_TRUE(w);
  double v = 0;
  for (const auto& [i, weight] : *w) v += weight * f(pts[i]);
  EXPECT_NEAR(v, f(q), 1e-12);
  EXPECT_FALSE(s.locate({0.5, 0.5, 0.01}));  // just outside the face x+y+z=1
  EXPECT_FALSE(s.locate({-1e-6, 0.1, 0.1}));
}

TEST(SimplexInterpolator, DependentDimensionIsRemoved) {
  // EP1: M = N*k with k = 8 -> a 2-D set in 3-D.
  std::vector<P> pts;
  for (double n : {1.0, 2.0, 4.0, 8.0})
    for (double a : {8.0, 16.0})
      if (a <= n * 8) pts.push_back({n, a, n * 8});
  const SimplexInterpolator s(pts);
  EXPECT_EQ(s.dimension(), 2);
  EXPECT_TRUE(s.locate({3.0, 12.0, 24.0}));
  EXPECT_FALSE(s.locate({3.0, 12.0, 25.0})) << "off the dependent dimension M=N*k";
}

TEST(SimplexInterpolator, OneDimensionalSupport) {
  // All points on one line (A and M fixed by N): a 1-D support.
  std::vector<SimplexInterpolator::Point> pts;
  for (double n : {1.0, 2.0, 4.0, 8.0}) pts.push_back({n, 8.0, n * 8});
  const SimplexInterpolator s(pts);
  EXPECT_EQ(s.dimension(), 1);
  const auto w = s.locate({3.0, 8.0, 24.0});
  ASSERT_TRUE(w);
  ASSERT_EQ(w->size(), 2u);
  double n = 0;
  for (const auto& [v, weight] : *w) n += weight * pts[v][0];
  EXPECT_NEAR(n, 3.0, 1e-12);
  EXPECT_FALSE(s.locate({9.0, 8.0, 72.0}));
  EXPECT_TRUE(s.locate({8.0, 8.0, 64.0}));
}

// A bundle stores the triangulation; a reader that uses it answers exactly like the reader that
// triangulated, and a triangulation that does not fit the points is refused.
TEST(SimplexInterpolator, AStoredTriangulationAnswersBitForBitAndIsChecked) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> n(1, 400), a(1, 60);
  std::vector<SimplexInterpolator::Point> pts;
  for (int i = 0; i < 300; ++i) {
    const double tokens = n(rng), active = a(rng);
    pts.push_back({tokens, active, active + std::floor(tokens / 3)});  // a full 3-D cloud
  }
  const SimplexInterpolator fresh(pts);
  ASSERT_EQ(fresh.dimension(), 3);
  const auto mesh = triangulation_from_json(triangulation_json(fresh.triangulation()));
  const SimplexInterpolator stored(pts, mesh);
  EXPECT_EQ(stored.simplex_count(), fresh.simplex_count());
  std::uniform_real_distribution<double> u(0, 1);
  int inside = 0;
  for (int i = 0; i < 2000; ++i) {
    // Inside the hull (a random convex combination of four points), or anywhere in the box.
    SimplexInterpolator::Point q{1 + 399 * u(rng), 1 + 59 * u(rng), 1 + 190 * u(rng)};
    if (i % 2 == 0) {
      q = {0, 0, 0};
      double w[4], sum = 0;
      for (double& x : w) sum += (x = u(rng));
      for (int k = 0; k < 4; ++k) {
        const auto& p = pts[static_cast<std::size_t>(rng() % pts.size())];
        for (int c = 0; c < 3; ++c) q[c] += w[k] / sum * p[c];
      }
    }
    const auto w1 = fresh.locate(q), w2 = stored.locate(q);
    ASSERT_EQ(w1.has_value(), w2.has_value());
    if (!w1) continue;
    ++inside;
    ASSERT_EQ(w1->size(), w2->size());
    for (std::size_t k = 0; k < w1->size(); ++k) {
      EXPECT_EQ((*w1)[k].vertex, (*w2)[k].vertex);
      EXPECT_EQ((*w1)[k].weight, (*w2)[k].weight);  // the same arithmetic: bit for bit
    }
  }
  EXPECT_GT(inside, 500);
  auto bad = mesh;
  bad.simplices[0][1] = pts.size();
  EXPECT_THROW(SimplexInterpolator(pts, bad), std::invalid_argument);
  bad = mesh;
  bad.simplices[0][1] = bad.simplices[0][0];  // flat
  EXPECT_THROW(SimplexInterpolator(pts, bad), std::invalid_argument);
  bad = mesh;
  bad.basis.pop_back();
  EXPECT_THROW(SimplexInterpolator(pts, bad), std::invalid_argument);
  EXPECT_THROW((void)triangulation_from_json("{}"), LookupError);
  EXPECT_THROW((void)triangulation_from_json(R"({"schema":"triangulation/1","dimension":2,
      "scale":[1,1,1],"origin":[0,0,0],"basis":[],"simplices":[[0,1]]})"),
               LookupError);
}

TEST(SimplexInterpolator, MeshCoordinatesGiveTheSimplicesAndAreChecked) {
  // A 5 x 5 grid; mesh coordinates stretched monotonically along each axis (log-like) keep every
  // simplex's orientation, so they triangulate the grid; the interpolation stays affine in the
  // points (an affine function is reproduced exactly).
  std::vector<P> pts, stretched;
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) {
      pts.push_back({1.0 + i, 1.0 + j * j, 0});
      stretched.push_back({std::log(1.0 + i), std::sqrt(1.0 + j * j), 0});
    }
  const SimplexInterpolator mesh(pts, stretched);
  ASSERT_FALSE(mesh.mesh_refusal()) << *mesh.mesh_refusal();
  ASSERT_EQ(mesh.dimension(), 2);
  EXPECT_GT(mesh.simplex_count(), 0u);
  const auto f = [](const P& p) { return 3 + 2 * p[0] - 0.5 * p[1]; };
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> x(1, 5), y(1, 17);
  for (int i = 0; i < 200; ++i) {
    const P q{x(rng), y(rng), 0};
    const auto w = mesh.locate(q);
    ASSERT_TRUE(w) << q[0] << "," << q[1];
    double v = 0;
    for (const auto& [vertex, weight] : *w) v += weight * f(pts[vertex]);
    EXPECT_NEAR(v, f(q), 1e-9);
  }
  EXPECT_THROW(SimplexInterpolator(pts, std::vector<P>(3)), std::invalid_argument);  // one each
  // Refused mesh coordinates leave the points' own Delaunay triangulation, and say why.
  const auto own = SimplexInterpolator(pts).triangulation().simplices;
  auto folded = stretched;
  std::swap(folded[6], folded[18]);  // two interior points trade places: simplices fold over
  const SimplexInterpolator with_folded(pts, folded);
  ASSERT_TRUE(with_folded.mesh_refusal());
  EXPECT_EQ(*with_folded.mesh_refusal(), "a simplex is inverted");
  EXPECT_EQ(with_folded.triangulation().simplices, own);
  std::vector<P> line;
  for (const auto& p : pts) line.push_back({p[0], 2 * p[0], 0});  // one dimension, not two
  const SimplexInterpolator with_line(pts, line);
  ASSERT_TRUE(with_line.mesh_refusal());
  EXPECT_EQ(*with_line.mesh_refusal(), "their hull has dimension 1, the points' 2");
  EXPECT_EQ(with_line.triangulation().simplices, own);
}

}  // namespace
}  // namespace moe
