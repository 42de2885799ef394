#include <gtest/gtest.h>

#include "ranks/rank_context.h"

namespace moe {
namespace {

// mpirun and srun --gpus-per-node: every rank sees all of the node's GPUs and takes its own.
TEST(DeviceSelection, AllGpusVisibleTakesTheNodeLocalRank) {
  EXPECT_EQ(select_device(0, 8, 8), 0);
  EXPECT_EQ(select_device(5, 8, 8), 5);
  EXPECT_EQ(select_device(1, 2, 4), 1);  // more GPUs than ranks
}

// srun --gpus-per-task=1: each task sees exactly its own GPU, as device 0.
TEST(DeviceSelection, OneVisibleGpuPerTaskIsDeviceZero) {
  EXPECT_EQ(select_device(0, 8, 1), 0);
  EXPECT_EQ(select_device(7, 8, 1), 0);
}

TEST(DeviceSelection, FewerGpusThanRanksIsRefusedNamingTheCounts) {
  try {
    (void)select_device(3, 4, 2);
    FAIL() << "4 ranks on 2 visible GPUs accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("runs 4 ranks and each sees 2 GPUs"), std::string::npos)
        << e.what();
  }
}

// One visible GPU per task is right only when the tasks' GPUs differ.
TEST(DeviceSelection, RanksThatWouldShareAGpuAreFound) {
  EXPECT_FALSE(shared_device({"GPU-a", "GPU-b", "GPU-c"}));
  const auto pair = shared_device({"GPU-a", "GPU-b", "GPU-a"});
  ASSERT_TRUE(pair);
  EXPECT_EQ(*pair, (std::pair<int, int>{0, 2}));
}

}  // namespace
}  // namespace moe
