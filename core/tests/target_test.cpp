#include "core/target.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace moe {
namespace {

TEST(Target, EveryNameFollowsTheBundleAndFileLayout) {
  const Target t{2, 4, 8, 5, true};
  EXPECT_EQ(t.dir_name(), "dp4_ep8_rank5_sp1");
  EXPECT_EQ(t.tp_dir(), "tp2");
  EXPECT_EQ(t.label(), "tp2/dp4_ep8_rank5_sp1");
  EXPECT_EQ(t.cell_id(), "tp2_dp4_ep8_rank5_sp1");
  EXPECT_EQ((Target{1, 2, 2, 0, false}).label(), "tp1/dp2_ep2_rank0_sp0");
}

TEST(Target, JsonRoundTripsAndNamesTheBadKey) {
  const Target t{2, 1, 2, 1, true};
  EXPECT_EQ(t.to_json().dump(), R"({"dp":1,"ep":2,"rank":1,"sp":true,"tp":2})");
  EXPECT_EQ(Target::from_json(t.to_json()), t);
  auto bad = t.to_json();
  bad["dp"] = "one";
  try {
    (void)Target::from_json(bad);
    FAIL() << "a string DP was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'dp'"), std::string::npos) << e.what();
  }
  bad = t.to_json();
  bad.erase("sp");
  EXPECT_THROW((void)Target::from_json(bad), std::invalid_argument);
  EXPECT_THROW((void)Target::from_json(nlohmann::json::array()), std::invalid_argument);
}

}  // namespace
}  // namespace moe
