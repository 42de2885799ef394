#include "kernels/bf16.h"
#include "kernels/cuda_common.cuh"
#include "kernels/device_helpers.h"

namespace moe::cuda {

__global__ void silu_and_mul(const bf16* y1, std::size_t rows, int inter, bf16* act) {
  const std::size_t n = rows * inter;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t r = i / inter, c = i % inter;
    const float g = __bfloat162float(y1[r * 2 * inter + c]);
    const float u = __bfloat162float(y1[r * 2 * inter + inter + c]);
    act[i] = __float2bfloat16_rn(g / (1.0f + __expf(-g)) * u);
  }
}

std::vector<float> download_bf16(const bf16* p, std::size_t n) {
  std::vector<std::uint16_t> raw(n);
  if (n) HARNESS_CHECK(cudaMemcpy(raw.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(raw[i]);
  return out;
}

std::vector<float> download_f32(const float* p, std::size_t n) {
  std::vector<float> out(n);
  if (n) HARNESS_CHECK(cudaMemcpy(out.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return out;
}

DeviceBuffer<bf16> upload_bf16(const std::vector<float>& v) {
  DeviceBuffer<bf16> d(v.size());
  std::vector<std::uint16_t> raw(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) raw[i] = float_to_bf16_bits(v[i]);
  if (!v.empty())
    HARNESS_CHECK(cudaMemcpy(d.get(), raw.data(), raw.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

}  // namespace moe::cuda
