#include "core/sweep.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

namespace moe {
namespace {

// A point with no rows per expert or configuration (the checks do not read them).
SweepPoint at(std::int64_t tokens, double time_us, double floor_us) {
  return {tokens, time_us, floor_us, 0, {}};
}

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
    p.push_back(at(n, 1.3 * floor, floor));
  }
  EXPECT_TRUE(check_sweep(p).passed());
}

TEST(Sweep, FindsTheDropsAndTheCliffOfATileThreshold) {
  // The measured shape of issue 20: 7% more tokens than 1024 cost 36% more, and more tokens
  // later take less time.
  const std::vector<SweepPoint> p = {at(1024, 376, 300), at(1100, 511, 320), at(1500, 528, 400),
                                     at(1800, 476, 470), at(3000, 745, 700), at(4096, 793, 950)};
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
  EXPECT_TRUE(check_sweep({at(10, 100, 50), at(11, 97.5, 51)}).passed());
  EXPECT_THROW((void)check_sweep({at(11, 1, 1), at(10, 1, 1)}), std::invalid_argument);
  EXPECT_THROW((void)check_sweep({at(10, 0, 1)}), std::invalid_argument);
}

// The printout names what stepped: each cliff with the rows per expert at both ends and, where
// it changed, the configuration; each drop with both times; every point in the table.
TEST(Sweep, PrintsWhatSteppedAtEachCliff) {
  const std::vector<SweepPoint> p = {{2039, 404.6, 290.8, 127.4, "wide tile (128 tokens)"},
                                     {2314, 533.7, 291.3, 144.6, "wide96 tile (96 tokens)"},
                                     {2626, 480.0, 291.9, 164.1, "wide96 tile (96 tokens)"},
                                     {2980, 560.0, 292.6, 186.2, "wide96 tile (96 tokens)"}};
  const auto c = check_sweep(p);
  std::ostringstream os;
  os << 1.23456789 << ";";  // the stream's own format comes back afterwards
  print_sweep(p, c, os);
  os << 1.23456789;
  const auto out = os.str();
  EXPECT_EQ(out.rfind("1.23457;", 0), 0u) << out;
  EXPECT_NE(out.find("    2314        144.6     533.7    291.3   1.83  wide96 tile (96 tokens)\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("monotone (every N2 > N1 at least 0.97 x time(N1)): NO, 1 pairs\n"
                     "    N=2626 takes 480.0 us, 10.1% less than N=2314 (533.7 us)\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("cliffs (a step more than 10% beyond its floor ratio): 2\n"
                     "    N=2039 -> 2314: time x1.32, floor x1.00 (+32%); rows/expert 127.4 -> "
                     "144.6; wide tile (128 tokens) -> wide96 tile (96 tokens)\n"
                     "    N=2626 -> 2980: time x1.17, floor x1.00 (+16%); rows/expert 164.1 -> "
                     "186.2\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.substr(out.size() - 7), "1.23457") << out;
}

}  // namespace
}  // namespace moe
