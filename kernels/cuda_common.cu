#include <stdexcept>

#include "kernels/bf16.h"
#include "kernels/cuda_common.cuh"
#include "kernels/device_code.h"
#include "kernels/device_helpers.h"

namespace moe::cuda {

__global__ void silu_and_mul(const bf16* y1, std::size_t rows, int inter, bf16* act) {
  const std::size_t n = rows * inter;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t r = i / inter, c = i % inter;
    const float g = __bfloat162float(y1[r * 2 * inter + c]);
    const float u = __bfloat162float(y1[r * 2 * inter + inter + c]);
    act[i] = __float2bfloat16_rn(silu_mul(g, u));
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

namespace {

// SM 0's cycle counter and %globaltimer into out[0..1], from the first block the scheduler puts
// on SM 0 (out[2] is its ticket; the grid has one block per SM, so one normally lands there).
__global__ void stamp_sm0_clock(unsigned long long* out) {
  unsigned sm = 0;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  if (sm != 0 || threadIdx.x != 0 || atomicCAS(&out[2], 0ull, 1ull) != 0) return;
  unsigned long long ns = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  out[0] = static_cast<unsigned long long>(clock64());
  out[1] = ns;
}

}  // namespace

void require_device_code(int device, const cudaDeviceProp& props) {
  cudaFuncAttributes attributes{};
  const cudaError_t e = cudaFuncGetAttributes(&attributes, stamp_sm0_clock);
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
    (void)cudaGetLastError();  // not sticky: clear it before saying what is wrong
    throw std::runtime_error(no_device_code_message(device, props.name, props.major, props.minor,
                                                    HARNESS_CUDA_ARCHITECTURES));
  }
  HARNESS_CHECK(e);
}

Sm0ClockStamper::Sm0ClockStamper(int sms) : sms_(sms), stamp_(3), host_(3) {}

std::optional<ClockStamp> Sm0ClockStamper::stamp(cudaStream_t s) {
  HARNESS_CHECK(cudaMemsetAsync(stamp_.get(), 0, stamp_.size() * sizeof(unsigned long long), s));
  stamp_sm0_clock<<<static_cast<unsigned>(sms_), 32, 0, s>>>(stamp_.get());
  HARNESS_CHECK(cudaGetLastError());
  HARNESS_CHECK(cudaMemcpyAsync(host_.get(), stamp_.get(),
                                stamp_.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                s));
  HARNESS_CHECK(cudaStreamSynchronize(s));
  const unsigned long long* h = host_.get();
  if (h[2] == 0) return std::nullopt;  // no block ran on SM 0
  return ClockStamp{h[0], h[1]};
}

}  // namespace moe::cuda
