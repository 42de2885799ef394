#include "core/sweep.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moe {
namespace {

TEST(Sweep, SixtyFourDistinctTokenCountsFromOneTo8192) {
  const auto n = sweep_tokens(1, 8192, 64);
  ASSERT_EQ(n.size(), 64u);
  EXPECT_EQ(n.front(), 1);
  EXPECT_EQ(n.back(), 8192);
  for (std::size_t i = 1; i < n.size(); ++i) EXPECT_GT(n[i], n[i - 1]);
  // Geometric at the top end: neighbouring ratios there are about the same.
  const double r1 = static_cast<double>(n[63]) / n[62], r2 = static_cast<double>(n[53]) / n[52];
  EXPECT_NEAR(r1, r2, 0.02);
  EXPECT_EQ(sweep_tokens(3, 6, 4), (std::vector<std::int64_t>{3, 4, 5, 6}));
  EXPECT_THROW((void)sweep_tokens(1, 10, 11), std::invalid_argument);
  EXPECT_THROW((void)sweep_tokens(0, 10, 3), std::invalid_argument);
}

TEST(Sweep, AFloorShapedCurvePasses) {
  std::vector<SweepPoint> p;
  for (const auto n : sweep_tokens(1, 8192, 64)) {
    const double floor = 20 + 0.1 * static_cast<double>(n);
    p.push_back({n, 1.3 * floor, floor});
  }
  EXPECT_TRUE(check_sweep(p).passed());
}

TEST(Sweep, FindsTheDropsAndTheCliffOfATileThreshold) {
  // The measured shape of issue 20: 7% more tokens than 1024 cost 36% more, and more tokens
  // later take less time.
  const std::vector<SweepPoint> p = {{1024, 376, 300}, {1100, 511, 320}, {1500, 528, 400},
                                     {1800, 476, 470}, {3000, 745, 700}, {4096, 793, 950}};
  const auto c = check_sweep(p);
  EXPECT_FALSE(c.passed());
  ASSERT_EQ(c.cliffs.size(), 1u);
  EXPECT_EQ(c.cliffs[0].n1, 1024);
  EXPECT_EQ(c.cliffs[0].n2, 1100);
  EXPECT_NEAR(c.cliffs[0].excess(), (511.0 / 376) / (320.0 / 300) - 1, 1e-12);
  ASSERT_EQ(c.drops.size(), 2u);  // 1800 < 0.97 x 1500 and 1800 < 0.97 x 1100 (476 < 495.7)
  EXPECT_EQ(c.drops[0].n1, 1500);
  EXPECT_EQ(c.drops[0].n2, 1800) << "worst first";
  // 3% is tolerated.
  EXPECT_TRUE(check_sweep({{10, 100, 50}, {11, 97.5, 51}}).passed());
  EXPECT_THROW((void)check_sweep({{11, 1, 1}, {10, 1, 1}}), std::invalid_argument);
  EXPECT_THROW((void)check_sweep({{10, 0, 1}}), std::invalid_argument);
}

}  // namespace
}  // namespace moe
