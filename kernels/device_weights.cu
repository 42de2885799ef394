#include <cmath>

#include "kernels/cuda_common.cuh"
#include "kernels/device_weights.cuh"

namespace moe::cuda {

DeviceMlp::DeviceMlp(int e, int h, int i, std::uint64_t seed, cudaStream_t s)
    : experts(e),
      hidden(h),
      inter(i),
      w13(static_cast<std::size_t>(e) * 2 * i * h),
      w2(static_cast<std::size_t>(e) * h * i) {
  fill(w13, seed, 1.0f / std::sqrt(static_cast<float>(h)), s);
  fill(w2, seed ^ 0x5bd1e995ULL, 1.0f / std::sqrt(static_cast<float>(i)), s);
}

}  // namespace moe::cuda
