#include "bundle/summary.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

// One experts cell with one point and `rounds` rounds whose B and 2B arms time differently.
StoredAcquisition experts_cell(const std::vector<std::pair<double, double>>& b_and_2b) {
  StoredCell cell;
  cell.info = {"tp1.experts",
               R"({"component":"experts"})",
               {{64, 4, 128}},
               static_cast<int>(b_and_2b.size())};
  std::int32_t round = 0;
  for (const auto& [b, b2] : b_and_2b) {
    CellRound r;
    r.round = round;
    for (int f = 0; f < 4; ++f) {
      r.samples.push_back({0, round, static_cast<std::int8_t>(Arm::banks), f % 2, f, b, 3, 7});
      r.samples.push_back(
          {0, round, static_cast<std::int8_t>(Arm::double_banks), f % 4, f, b2, 3, 7});
    }
    r.medians.push_back({0, round, (b + b2) / 2, b, b2});
    cell.rounds.push_back(r);
    cell.rounds_done.push_back(1);
    ++round;
  }
  StoredAcquisition acq;
  acq.cells.push_back(cell);
  return acq;
}

TEST(Summary, ExpertsPublishTheDoubleBankArmNotThePool) {
  const auto s = summarize(experts_cell({{100, 102}, {101, 103}, {99, 104}}));
  ASSERT_EQ(s.size(), 1u);
  ASSERT_TRUE(s[0].points[0].time_us);
  EXPECT_DOUBLE_EQ(*s[0].points[0].time_us, 103.0);  // median of the 2B round medians
  EXPECT_TRUE(s[0].points[0].bank_check_passed);
}

TEST(Summary, BankControlFailsBeyondThreePercent) {
  const auto s = summarize(experts_cell({{100, 110}, {100, 111}}));
  EXPECT_FALSE(s[0].points[0].bank_check_passed);
  EXPECT_EQ(s[0].failed_points, 1);
  EXPECT_NEAR(s[0].max_relative_change, 0.105, 1e-9);
}

// The control compares the arms chunk by chunk in the order they ran (the samples' `forward`
// index, chunks of one cycle of the 2B arm's banks), whatever order the samples are stored in: a
// clock step mid-run passes; a 2B arm slower in every chunk fails.
TEST(Summary, BankControlComparesTheArmsChunkByChunk) {
  auto acq = experts_cell({{100, 100}});
  const auto run = [&](const std::vector<double>& b, const std::vector<double>& b2) {
    auto& samples = acq.cells[0].rounds[0].samples;
    samples.clear();
    for (int f = 11; f >= 0; --f) {  // stored last forward first
      samples.push_back({0, 0, static_cast<std::int8_t>(Arm::double_banks), f % 4, f,
                         b2[static_cast<std::size_t>(f / 4)], 3, 7});
      samples.push_back({0, 0, static_cast<std::int8_t>(Arm::banks), f % 2, f,
                         b[static_cast<std::size_t>(f / 4)], 3, 7});
    }
    return summarize(acq)[0];
  };
  const auto step = run({100, 100, 110}, {100, 110, 110});  // pooled medians 100 and 110
  EXPECT_TRUE(step.points[0].bank_check_passed);
  EXPECT_EQ(step.failed_points, 0);
  EXPECT_LT(step.max_relative_change, 1e-12);
  EXPECT_EQ(step.unsteady_points, 1) << "the run moved by 10 %";
  EXPECT_NEAR(step.max_run_spread, 0.10, 1e-12);
  EXPECT_EQ(unsteady_runs(step.unsteady_points, step.max_run_spread),
            ", unsteady runs 1 (moved more than 3 %, at most 10.0 %)");
  const auto slower = run({100, 104, 108}, {106.08, 110.24, 112.32});  // 4 % in every chunk
  EXPECT_FALSE(slower.points[0].bank_check_passed);
  EXPECT_NEAR(slower.max_relative_change, 0.04, 1e-12);
  const auto steady = run({100, 100, 100}, {101, 101, 101});
  EXPECT_EQ(steady.unsteady_points, 0);
  EXPECT_EQ(unsteady_runs(steady.unsteady_points, steady.max_run_spread), "");
}

TEST(Summary, PointsCarryTheKernelsOfTheirLatestRound) {
  auto acq = experts_cell({{100, 100}, {100, 100}});
  EXPECT_EQ(summarize(acq)[0].points[0].activities, std::optional<std::uint64_t>(7));
  for (auto& smp : acq.cells[0].rounds[1].samples) smp.name_hash = 9;
  EXPECT_EQ(summarize(acq)[0].points[0].activities, std::optional<std::uint64_t>(9));
  acq.cells[0].rounds.clear();  // no complete round: nothing known
  EXPECT_FALSE(summarize(acq)[0].points[0].activities);
}

// A point's clock is the median of its rounds' recorded clocks; a round without one (NaN) does not
// count, and a point with none has none.
TEST(Summary, PointsCarryTheMedianOfTheirRoundsRecordedClocks) {
  auto acq = experts_cell({{100, 100}, {100, 100}, {100, 100}});
  EXPECT_FALSE(summarize(acq)[0].points[0].sm_clock_mean_mhz);  // the host backends record none
  acq.cells[0].rounds[0].medians[0].sm_clock_mean_mhz = 1800;
  acq.cells[0].rounds[2].medians[0].sm_clock_mean_mhz = 1700;
  EXPECT_EQ(summarize(acq)[0].points[0].sm_clock_mean_mhz, std::optional<double>(1750));
}

// A point's devices are those of the runs and ranks that committed its rounds, as the hardware
// identity numbers them; none where no round recorded its run.
TEST(Summary, PointsCarryTheDevicesOfTheirRounds) {
  auto acq = experts_cell({{100, 100}, {100, 104}, {100, 110}});
  EXPECT_TRUE(summarize(acq)[0].points[0].devices.empty());  // a file from before: unrecorded
  const auto gpu = [](const char* uuid) {
    return nlohmann::json::array({{{"rank", 0},
                                   {"host", "node0"},
                                   {"device", {{"device", "NVIDIA H200"}, {"uuid", uuid}}}}});
  };
  acq.runs = {{gpu("GPU-a").dump(), ""}, {gpu("GPU-b").dump(), ""}};
  for (int r = 0; r < 3; ++r) {
    acq.cells[0].rounds[r].run = 1;
    acq.cells[0].rounds[r].rank = 0;
  }
  EXPECT_EQ(summarize(acq)[0].points[0].devices, std::vector<int>{1});
  acq.cells[0].rounds[0].run = 0;  // a resume on another GPU measured the later rounds
  EXPECT_EQ(summarize(acq)[0].points[0].devices, (std::vector<int>{0, 1}));
  // Each device's own median of its 2B round medians: 100 on the first, 104 and 110 on the second.
  EXPECT_EQ(summarize(acq)[0].points[0].time_us_by_device,
            (std::map<int, double>{{0, 100.0}, {1, 107.0}}));
}

}  // namespace
}  // namespace moe
