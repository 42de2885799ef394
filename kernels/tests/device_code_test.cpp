#include "kernels/device_code.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(DeviceCode, ArchitectureOfAComputeCapability) {
  EXPECT_EQ(cuda_architecture_for(9, 0), "90a");  // the wgmma kernels
  EXPECT_EQ(cuda_architecture_for(8, 0), "80");
  EXPECT_EQ(cuda_architecture_for(8, 6), "86");
  EXPECT_EQ(cuda_architecture_for(10, 0), "100");
}

// The message names the GPU, its compute capability, what the build has and the option to give.
TEST(DeviceCode, ErrorNamesTheGpuTheBuildAndTheFix) {
  EXPECT_EQ(no_device_code_message(1, "NVIDIA A100-SXM4-80GB", 8, 0, "90a"),
            "GPU 1 (NVIDIA A100-SXM4-80GB, compute capability 8.0) has no code in this build of "
            "the CUDA kernels (CMAKE_CUDA_ARCHITECTURES=90a): configure with "
            "-DCMAKE_CUDA_ARCHITECTURES=\"90a;80\" (or 80 alone) and rebuild");
  EXPECT_EQ(no_device_code_message(0, "NVIDIA H200", 9, 0, "80,86"),
            "GPU 0 (NVIDIA H200, compute capability 9.0) has no code in this build of the CUDA "
            "kernels (CMAKE_CUDA_ARCHITECTURES=80,86): configure with "
            "-DCMAKE_CUDA_ARCHITECTURES=\"80;86;90a\" (or 90a alone) and rebuild");
}

}  // namespace
}  // namespace moe
