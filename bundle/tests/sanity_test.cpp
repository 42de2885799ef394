#include "bundle/sanity.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moe {
namespace {

TEST(Sanity, ComputesFamiliesAndFlagsProblems) {
  SanityBlock s;
  for (double v : {1.0, 2.0, 2.0, std::nan("")}) s.add("time_us", v);
  s.add("completion", 1.0, SanityBlock::Kind::ratio);
  s.add("share", 1.2, SanityBlock::Kind::ratio);
  s.add("activity_count", -1, SanityBlock::Kind::counter);
  s.add_table("a", {1, 2, 3, 5});
  s.add_table("b", {1, 2, 3, 5});
  s.add_table("c", {1, 2, 4, 5});
  s.add_table("d", {7, 8});  // too few values to call a copy: a one-row stage cell
  s.add_table("e", {7, 8});
  const auto j = s.to_json();
  EXPECT_EQ(j["families"]["time_us"]["finite"], 3);
  EXPECT_EQ(j["families"]["time_us"]["missing"], 1);
  EXPECT_EQ(j["families"]["time_us"]["min"], 1.0);
  EXPECT_EQ(j["families"]["time_us"]["max"], 2.0);
  EXPECT_EQ(j["families"]["time_us"]["distinct"], 2);
  const auto flags = s.red_flags();
  ASSERT_EQ(flags.size(), 4u);
  EXPECT_NE(flags[0].find("activity_count: 1 negative counters"), std::string::npos);
  EXPECT_NE(flags[1].find("share: 1 ratios outside [0,1]"), std::string::npos);
  EXPECT_NE(flags[2].find("time_us: 1 missing"), std::string::npos);
  EXPECT_NE(flags[3].find("identical results in different cells: a and b"), std::string::npos);
  SanityBlock flagged;
  flagged.flag("checksum mismatch: t.csv");
  ASSERT_EQ(flagged.red_flags().size(), 1u);
  EXPECT_EQ(flagged.red_flags()[0], "checksum mismatch: t.csv");
  SanityBlock clean;
  clean.add("completion", 0.5, SanityBlock::Kind::ratio);
  EXPECT_TRUE(clean.red_flags().empty());
  EXPECT_NE(clean.to_text().find("red flags: none"), std::string::npos);
}

}  // namespace
}  // namespace moe
