// Expert MLP weights on the device, one bank per DeviceMlp.
// Internal to kernels/: include only from .cu files.
#pragma once

#include <memory>
#include <vector>

#include "kernels/cuda_memory.h"
#include "kernels/workload.h"

namespace moe::cuda {

// Expert MLP weights on the device (one bank): w13 [L][2I][H], w2 [L][H][I].
struct DeviceMlp {
  int experts, hidden, inter;
  DeviceBuffer<bf16> w13, w2;
  DeviceMlp(int e, int h, int i, std::uint64_t seed, cudaStream_t s);
};

struct CudaWeights final : WeightSet {
  std::vector<std::unique_ptr<DeviceMlp>> banks;
};

}  // namespace moe::cuda
