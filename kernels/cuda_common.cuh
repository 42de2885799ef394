// Device stimuli and host helpers shared by the CUDA backends' translation units: random fills
// from a counter-based hash (never all zeros), SiLU-and-mul, launch sizes, downloads, the rows
// verification samples, SM 0's clock stamps and the check that the build has code for the GPU.
// Internal to kernels/: include only from .cu files.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/seed.h"
#include "kernels/cuda_memory.h"
#include "kernels/workload.h"

namespace moe::cuda {

inline int blocks_for(std::size_t n, int threads = 256) {
  return static_cast<int>(std::min<std::size_t>((n + threads - 1) / threads, 65535));
}

// Uniform in [-scale, scale) from (seed, index); never all zeros.
template <class T>
__global__ void fill_random(T* out, std::size_t n, std::uint64_t seed, float scale) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float u = static_cast<float>(splitmix64(seed ^ (i * 0xd1b54a32d192ed03ULL)) >> 40) *
                    (1.0f / 16777216.0f);
    const float v = (2.0f * u - 1.0f) * scale;
    if constexpr (std::is_same_v<T, bf16>)
      out[i] = __float2bfloat16_rn(v);
    else
      out[i] = v;
  }
}

template <class T>
void fill(DeviceBuffer<T>& b, std::uint64_t seed, float scale, cudaStream_t s) {
  fill_random<<<blocks_for(b.size()), 256, 0, s>>>(b.get(), b.size(), seed, scale);
  HARNESS_CHECK(cudaGetLastError());
}

// act[r][j] = silu(y1[r][j]) * y1[r][inter + j]: the gated activation of an expert MLP.
__global__ void silu_and_mul(const bf16* y1, std::size_t rows, int inter, bf16* act);

[[nodiscard]] std::vector<float> download_bf16(const bf16* p, std::size_t n);
[[nodiscard]] std::vector<float> download_f32(const float* p, std::size_t n);
// bf16 copy of host values on the device (legacy stream: synchronize before other streams use it).
[[nodiscard]] DeviceBuffer<bf16> upload_bf16(const std::vector<float>& v);
// A copy of host values on the device, element for element (legacy stream, as upload_bf16).
template <class T>
[[nodiscard]] DeviceBuffer<T> upload(const std::vector<T>& v) {
  DeviceBuffer<T> d(v.size());
  if (!v.empty())
    HARNESS_CHECK(cudaMemcpy(d.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Throws the error naming the GPU and the configure option when this build has no code that
// `device` (the current device, with `props`) can run, before any kernel of ours is launched there.
void require_device_code(int device, const cudaDeviceProp& props);

// SM 0's cycle counter and the device's nanosecond timer, read together on a stream by a kernel of
// one block per SM (Backend::clock_stamp; the GEMM of measure_device_peaks). Owns its buffers.
class Sm0ClockStamper {
 public:
  explicit Sm0ClockStamper(int sms);
  Sm0ClockStamper(const Sm0ClockStamper&) = delete;
  Sm0ClockStamper& operator=(const Sm0ClockStamper&) = delete;
  // After the work queued on `s` so far; synchronizes `s`. None if no block ran on SM 0.
  [[nodiscard]] std::optional<ClockStamp> stamp(cudaStream_t s);

 private:
  int sms_;
  DeviceBuffer<unsigned long long> stamp_;  // cycles, ns, SM 0's ticket
  PinnedBuffer<unsigned long long> host_;
};

}  // namespace moe::cuda
