#include "store/campaign.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace moe {
namespace {

namespace fs = std::filesystem;

class Campaign : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("campaign_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  CampaignState state() const { return CampaignState(dir_, "harness acquire", "job", "f", 3600); }
  nlohmann::json records() const {
    std::ifstream f(dir_ / kCampaignFile);
    return nlohmann::json::parse(f)["records"];
  }
  fs::path dir_;
};

// A kill after a wave was encoded and before any flag was set: the next run finds only the
// earlier rounds, records the wave as lost in flight and goes on (it used to throw on the
// missing lost_in_flight counter, and every rerun refused the campaign).
TEST_F(Campaign, AWaveKilledBeforeItsFlagsIsLostInFlightAndResumes) {
  {
    auto s = state();
    s.encoded({100, 10, 20});
    s.written({100, 10, 20});
    s.encoded({50, 5, 10});  // the wave in flight when the kill came
  }
  auto s = state();
  s.reconcile({100, 10, 20});
  EXPECT_EQ(records()["lost_in_flight"],
            (nlohmann::json{{"samples", 50}, {"medians", 5}, {"checks", 10}}));
  EXPECT_EQ(records()["written"]["samples"], 100);
  EXPECT_EQ(records()["encoded"]["samples"], 100);
  // A second resume of the same state changes nothing.
  auto again = state();
  again.reconcile({100, 10, 20});
  EXPECT_EQ(records()["lost_in_flight"]["samples"], 50);
}

// A kill between two ranks' flag writes: part of the wave is complete in the file.
TEST_F(Campaign, AWavePartlyFlaggedCountsWhatTheFileHolds) {
  {
    auto s = state();
    s.encoded({100, 10, 20});
  }
  auto s = state();
  s.reconcile({60, 6, 12});
  EXPECT_EQ(records()["written"],
            (nlohmann::json{{"samples", 60}, {"medians", 6}, {"checks", 12}}));
  EXPECT_EQ(records()["lost_in_flight"]["samples"], 40);
}

TEST_F(Campaign, RowsTheCountersCannotExplainAreRefused) {
  {
    auto s = state();
    s.encoded({100, 10, 20});
    s.written({100, 10, 20});
  }
  auto s = state();
  EXPECT_THROW(s.reconcile({120, 12, 24}), std::runtime_error);
  EXPECT_THROW(s.reconcile({90, 9, 18}), std::runtime_error);
}

}  // namespace
}  // namespace moe
