#include "bundle/fidelity.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(SameDevice, OnlyWhereThePointAndEveryRowItWeighsShareOneDevice) {
  const std::vector<int> a{0}, b{1}, both{0, 1}, unknown{};
  EXPECT_EQ(same_device(a, {&a, &a}), std::optional<bool>(true));
  EXPECT_EQ(same_device(a, {&a, &b}), std::optional<bool>(false));  // a row of another device
  EXPECT_EQ(same_device(a, {&a, &both}), std::optional<bool>(false));
  EXPECT_EQ(same_device(both, {&both}), std::optional<bool>(false));  // the point's rounds mix
  EXPECT_EQ(same_device(b, {&b}), std::optional<bool>(true));
  // Unrecorded on either side, or nothing weighed: cannot be told.
  EXPECT_EQ(same_device(unknown, {&a}), std::nullopt);
  EXPECT_EQ(same_device(a, {&a, &unknown}), std::nullopt);
  EXPECT_EQ(same_device(a, {}), std::nullopt);
}

// A point measured twice (held out, then a grid row) on one device or on two: the pairs' signed
// median is the second device's offset; points whose devices are unknown are left out of the split.
TEST(Repeatability, SplitsByDeviceAndGivesEachPairItsOffset) {
  ComponentFidelity f;
  const auto remeasured = [&](std::int64_t n, double held_out_us, double grid_us, int held_device,
                              int grid_device) {
    f.remeasured.push_back({{n, 128, 8 * n}, held_out_us, grid_us, held_device, grid_device});
  };
  remeasured(100, 100.0, 100.5, 0, 0);   // +0.5 %, same device
  remeasured(200, 200.0, 199.0, 1, 1);   // -0.5 %, same device
  remeasured(300, 100.0, 97.0, 0, 1);    // -3 %, grid on #1, held out on #0
  remeasured(400, 100.0, 98.0, 0, 1);    // -2 %
  remeasured(500, 100.0, 96.0, 0, 1);    // -4 %
  remeasured(600, 100.0, 101.0, 1, 0);   // +1 %, the other direction
  remeasured(700, 100.0, 150.0, -1, 0);  // a run whose device is not recorded: left out
  const auto by_device = f.to_json(0.02)["repeatability"]["by_device"];
  EXPECT_EQ(by_device["same_device"]["count"], 2);
  EXPECT_NEAR(by_device["same_device"]["median_abs_relative_difference"].get<double>(), 0.005,
              1e-12);
  EXPECT_NEAR(by_device["same_device"]["max_abs_relative_difference"].get<double>(), 0.005, 1e-12);
  EXPECT_EQ(by_device["across_devices"]["count"], 4);
  EXPECT_NEAR(by_device["across_devices"]["max_abs_relative_difference"].get<double>(), 0.04,
              1e-12);
  const auto& pairs = by_device["device_pairs"];
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0]["grid_device"], 0);
  EXPECT_EQ(pairs[0]["held_out_device"], 1);
  EXPECT_EQ(pairs[0]["count"], 1);
  EXPECT_NEAR(pairs[0]["median_signed_relative_difference"].get<double>(), 0.01, 1e-12);
  EXPECT_EQ(pairs[1]["grid_device"], 1);
  EXPECT_EQ(pairs[1]["held_out_device"], 0);
  EXPECT_EQ(pairs[1]["count"], 3);
  EXPECT_NEAR(pairs[1]["median_signed_relative_difference"].get<double>(), -0.03, 1e-12);

  // No device known for any point (an older file): no split at all.
  ComponentFidelity unknown;
  unknown.remeasured.push_back({{100, 128, 800}, 100.0, 101.0, -1, -1});
  EXPECT_FALSE(unknown.to_json(0.02)["repeatability"].contains("by_device"));
}

// Anchor rows spread from the first row to the last; a table of at most kAnchorRows keeps all.
TEST(AnchorRows, SpreadOverTheTableFromFirstToLast) {
  std::vector<GridPoint> rows;
  for (std::int64_t n = 1; n <= 100; ++n) rows.push_back({n, 0, 0});
  const auto anchors = anchor_rows(rows);
  ASSERT_EQ(anchors.size(), kAnchorRows);
  EXPECT_EQ(anchors.front(), rows.front());
  EXPECT_EQ(anchors.back(), rows.back());
  for (std::size_t i = 1; i < anchors.size(); ++i) {
    EXPECT_LT(anchors[i - 1].tokens, anchors[i].tokens);
    EXPECT_LE(anchors[i].tokens - anchors[i - 1].tokens, 7);  // 99 / 15 apart, rounded down
  }
  const std::vector<GridPoint> few(rows.begin(), rows.begin() + 5);
  EXPECT_EQ(anchor_rows(few), few);
}

// An anchor cell names its set and reads back as neither grid nor held-out.
TEST(AnchorCells, IdAndRoleRoundTrip) {
  Target t;
  const CellRole role{0, false, 1, 2};
  const auto id = fidelity_cell_id(t, Component::experts, role);
  EXPECT_NE(id.find(".experts.anchors2.part1"), std::string::npos) << id;
  const auto j = fidelity_cell_json(t, Component::experts, role, 1, 4);
  EXPECT_EQ(j.at("role"), "anchors");
  const auto back = cell_role(j);
  EXPECT_EQ(back.anchors, 2);
  EXPECT_EQ(back.part, 1);
  EXPECT_FALSE(back.held_out);
  EXPECT_EQ(cell_role(fidelity_cell_json(t, Component::experts, {}, 1, 4)).anchors, 0);
}

// Anchors against the rows' devices: per pair the signed median of (anchor - row) / row, and the
// line acquire, inspect and report print for a pair; no anchor gives no block.
TEST(DeviceAnchors, PerPairOfRowAndAnchorDevice) {
  const std::vector<AnchorPoint> anchors = {{{1, 0, 0}, 100.0, 97.0, 0, 2},
                                            {{2, 0, 0}, 100.0, 98.0, 0, 2},
                                            {{3, 0, 0}, 100.0, 99.0, 0, 2},
                                            {{1, 0, 0}, 100.0, 100.5, 2, 2}};
  const auto j = device_anchors_json(anchors, 0.02);
  EXPECT_EQ(j.at("count"), 4);
  EXPECT_FALSE(j.contains("clock_off"));
  ASSERT_EQ(j.at("device_pairs").size(), 2u);
  EXPECT_EQ(j["device_pairs"][0]["row_device"], 0);
  EXPECT_EQ(j["device_pairs"][0]["anchor_device"], 2);
  EXPECT_EQ(j["device_pairs"][0]["count"], 3);
  EXPECT_NEAR(j["device_pairs"][0]["median_signed_relative_difference"].get<double>(), -0.02,
              1e-12);
  EXPECT_NEAR(j["device_pairs"][1]["median_signed_relative_difference"].get<double>(), 0.005,
              1e-12);
  EXPECT_EQ(anchor_pair_summary(j["device_pairs"][0]),
            "rows of #0 measured again on #2: 3 rows, anchor - row median -2.00%");
  EXPECT_TRUE(device_anchors_json({}, 0.02).is_null());
  EXPECT_EQ(anchor_clock_off_summary(j), "");
}

// An anchor measured further than the threshold off its row's clock (a power-capped row) is left
// out of the pairs and counted; one within it, or without a clock, counts.
TEST(DeviceAnchors, AnAnchorOffItsRowsClockIsLeftOut) {
  std::vector<AnchorPoint> anchors = {{{1, 0, 0}, 100.0, 98.0, 0, 2, 1800.0, 1810.0},
                                      {{2, 0, 0}, 100.0, 99.0, 0, 2, std::nullopt, 1700.0},
                                      {{3, 0, 0}, 100.0, 104.0, 0, 2, 1750.0, 1680.0}};
  EXPECT_NEAR(*anchors[2].clock_offset(), -0.04, 1e-12);
  EXPECT_FALSE(anchors[1].clock_offset());
  const auto j = device_anchors_json(anchors, 0.02);
  EXPECT_EQ(j.at("count"), 2);
  ASSERT_EQ(j.at("device_pairs").size(), 1u);
  EXPECT_NEAR(j["device_pairs"][0]["median_signed_relative_difference"].get<double>(), -0.015,
              1e-12);
  EXPECT_EQ(j.at("clock_off").at("count"), 1);
  EXPECT_EQ(anchor_clock_off_summary(j),
            "1 anchors measured more than 2.00% off their rows' clock left out");
  // All off: the block says so, with no pair.
  anchors.erase(anchors.begin(), anchors.begin() + 2);
  const auto off = device_anchors_json(anchors, 0.02);
  EXPECT_EQ(off.at("count"), 0);
  EXPECT_TRUE(off.at("device_pairs").empty());
  EXPECT_EQ(off.at("clock_off").at("count"), 1);
}

// The report's line on devices: points measured on two devices, then each pair of the anchors'
// devices (a device against itself left out); nothing where neither is recorded.
TEST(DeviceSpreadSummary, TwoDevicesThenAnchors) {
  nlohmann::json c = {{"repeatability", {{"count", 3}}}};
  EXPECT_EQ(device_spread_summary(c), "");
  c["repeatability"]["by_device"] = {{"across_devices",
                                      {{"count", 120},
                                       {"median_abs_relative_difference", 0.0206},
                                       {"max_abs_relative_difference", 0.041}}}};
  EXPECT_EQ(device_spread_summary(c),
            "120 points measured on two devices, |difference| median 2.06%, max 4.10%");
  c["device_anchors"] = device_anchors_json({{{1, 0, 0}, 100.0, 97.5, 0, 4},
                                             {{2, 0, 0}, 100.0, 100.5, 4, 4},
                                             {{3, 0, 0}, 100.0, 101.0, 1, 4}},
                                            0.02);
  EXPECT_EQ(device_spread_summary(c),
            "120 points measured on two devices, |difference| median 2.06%, max 4.10%; anchors: "
            "rows of #0 measured again on #4: 1 rows, anchor - row median -2.50%, rows of #1 "
            "measured again on #4: 1 rows, anchor - row median +1.00%");
  c.erase("repeatability");
  EXPECT_EQ(device_spread_summary(c).rfind("anchors: rows of #0 measured again on #4", 0), 0u);
  // Anchors left out for their clock are said too, also where no pair is left.
  c["device_anchors"] =
      device_anchors_json({{{1, 0, 0}, 100.0, 104.0, 0, 4, 1750.0, 1680.0}}, 0.02);
  EXPECT_EQ(device_spread_summary(c),
            "anchors: 1 anchors measured more than 2.00% off their rows' clock left out");
}

}  // namespace
}  // namespace moe
