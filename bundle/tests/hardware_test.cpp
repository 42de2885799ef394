#include "bundle/hardware.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

using nlohmann::json;

json rank(int r, const std::string& device, const std::string& uuid, int sm_mhz) {
  return {{"rank", r},
          {"host", "node0"},
          {"nccl", "2.27.3"},
          {"device", {{"device", device}, {"uuid", uuid}, {"sm_count", "132"}}},
          {"device_state_before", {{"sm_clock_mhz", std::to_string(sm_mhz)}}}};
}

json end_of(int r, int sm_mhz) {
  return {{"rank", r}, {"device_state_after", {{"sm_clock_mhz", std::to_string(sm_mhz)}}}};
}

TEST(HardwareIdentity, OneObjectPerDeviceWithStateBeforeTheFirstRunAndAfterTheLastEnded) {
  StoredAcquisition acq;
  // Run 0 (two ranks, two GPUs) ended; run 1 (resume, ranks swapped onto the GPUs) was killed.
  acq.runs.push_back(
      {json::array({rank(0, "NVIDIA H200", "GPU-a", 1980), rank(1, "NVIDIA H200", "GPU-b", 1970)})
           .dump(),
       json::array({end_of(0, 1755), end_of(1, 1740)}).dump()});
  acq.runs.push_back(
      {json::array({rank(0, "NVIDIA H200", "GPU-b", 1900), rank(1, "NVIDIA H200", "GPU-a", 1900)})
           .dump(),
       ""});
  const auto hw = hardware_identity(acq);
  EXPECT_EQ(hw.at("runs"), 2);
  ASSERT_EQ(hw.at("devices").size(), 2u);
  const auto& a = hw.at("devices").at(0);
  EXPECT_EQ(a.at("uuid"), "GPU-a");
  EXPECT_EQ(a.at("host"), "node0");
  EXPECT_EQ(a.at("nccl"), "2.27.3");
  EXPECT_EQ(a.at("sm_count"), "132");
  EXPECT_EQ(a.at("state_before").at("sm_clock_mhz"), "1980");
  EXPECT_EQ(a.at("state_after").at("sm_clock_mhz"), "1755");
  EXPECT_EQ(hw.at("devices").at(1).at("state_after").at("sm_clock_mhz"), "1740");
}

TEST(HardwareIdentity, ARunThatNeverEndedHasNoStateAfter) {
  StoredAcquisition acq;
  acq.runs.push_back({json::array({rank(0, "NVIDIA H200", "GPU-a", 1980)}).dump(), ""});
  const auto d = hardware_identity(acq).at("devices").at(0);
  EXPECT_FALSE(d.contains("state_after"));
}

TEST(HardwareIdentity, RefusesSeveralDeviceKinds) {
  StoredAcquisition acq;
  acq.runs.push_back({json::array({rank(0, "NVIDIA H200", "GPU-a", 1980)}).dump(), ""});
  acq.runs.push_back({json::array({rank(0, "NVIDIA H100", "GPU-c", 1980)}).dump(), ""});
  try {
    (void)hardware_identity(acq);
    FAIL() << "mixed device kinds accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("NVIDIA H100, NVIDIA H200"), std::string::npos)
        << e.what();
  }
}

TEST(RoundDevices, EachRunsRanksMapToTheHardwareIdentitysDevices) {
  StoredAcquisition acq;
  // The first test's runs: the resume swapped the ranks onto the GPUs.
  acq.runs.push_back(
      {json::array({rank(0, "NVIDIA H200", "GPU-a", 1980), rank(1, "NVIDIA H200", "GPU-b", 1970)})
           .dump(),
       ""});
  acq.runs.push_back(
      {json::array({rank(0, "NVIDIA H200", "GPU-b", 1900), rank(1, "NVIDIA H200", "GPU-a", 1900)})
           .dump(),
       ""});
  // A third run with a rank whose provenance names no device: it is left out.
  acq.runs.push_back({json::array({json{{"rank", 0}, {"host", "node0"}}}).dump(), ""});
  const auto devices = hardware_identity(acq).at("devices");
  const auto of = round_devices(acq);
  const std::map<std::pair<int, int>, int> expected{
      {{0, 0}, 0}, {{0, 1}, 1}, {{1, 0}, 1}, {{1, 1}, 0}};
  EXPECT_EQ(of, expected);
  EXPECT_EQ(devices.at(of.at({1, 0})).at("uuid"), "GPU-b");
}

std::string starts_of(std::initializer_list<json> ranks) {
  return json(ranks).dump();
}

TEST(DeviceChange, AFirstRunOrAResumeOnTheSameDevicesChangesNothing) {
  const auto a = starts_of({rank(0, "NVIDIA H200", "GPU-a", 1980)});
  EXPECT_TRUE(device_change({a}).added.empty());
  // Resumed with the ranks swapped onto the same two GPUs.
  const auto ab =
      starts_of({rank(0, "NVIDIA H200", "GPU-a", 1), rank(1, "NVIDIA H200", "GPU-b", 1)});
  const auto ba =
      starts_of({rank(0, "NVIDIA H200", "GPU-b", 1), rank(1, "NVIDIA H200", "GPU-a", 1)});
  const auto change = device_change({ab, ba});
  EXPECT_TRUE(change.added.empty());
  EXPECT_TRUE(change.earlier.empty());
}

TEST(DeviceChange, NamesTheDevicesTheLatestRunAddsAndTheEarlierOnes) {
  const auto run0 = starts_of({rank(0, "NVIDIA H200", "GPU-a", 1980)});
  const auto run1 = starts_of({rank(0, "NVIDIA H200", "GPU-a", 1980)});
  // The third run keeps GPU-a on rank 1 and adds GPU-c on rank 0.
  const auto run2 =
      starts_of({rank(0, "NVIDIA H200", "GPU-c", 1980), rank(1, "NVIDIA H200", "GPU-a", 1980)});
  const auto change = device_change({run0, run1, run2});
  EXPECT_EQ(change.added, "GPU-c (host node0)");
  EXPECT_EQ(change.earlier, "GPU-a (host node0)");
}

TEST(DeviceChange, TheSameUuidOnAnotherHostIsAnotherDevice) {
  auto moved = rank(0, "NVIDIA H200", "GPU-a", 1980);
  moved["host"] = "node1";
  const auto change =
      device_change({starts_of({rank(0, "NVIDIA H200", "GPU-a", 1980)}), starts_of({moved})});
  EXPECT_EQ(change.added, "GPU-a (host node1)");
}

}  // namespace
}  // namespace moe
