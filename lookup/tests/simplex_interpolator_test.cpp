#include "lookup/simplex_interpolator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

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

}  // namespace
}  // namespace moe
