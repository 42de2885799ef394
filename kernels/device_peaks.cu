#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "core/statistics.h"
#include "core/unique_handle.h"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_memory.h"
#include "kernels/device_peaks.h"

namespace moe {

namespace {

using namespace cuda;

using Event = UniqueHandle<cudaEvent_t, cudaEventDestroy>;

// Median seconds of `reps` runs of `body` on stream `s`, after one untimed run.
template <class Body>
double median_seconds(cudaStream_t s, int reps, Body&& body) {
  body();
  std::vector<double> seconds;
  Event start, stop;
  HARNESS_CHECK(cudaEventCreate(start.replace()));
  HARNESS_CHECK(cudaEventCreate(stop.replace()));
  for (int r = 0; r < reps; ++r) {
    HARNESS_CHECK(cudaEventRecord(start.get(), s));
    body();
    HARNESS_CHECK(cudaEventRecord(stop.get(), s));
    HARNESS_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0;
    HARNESS_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    seconds.push_back(ms * 1e-3);
  }
  return median(seconds);
}

}  // namespace

DevicePeaks measure_device_peaks(int device, int repetitions) {
  HARNESS_CHECK(cudaSetDevice(device));
  cudaDeviceProp props{};
  HARNESS_CHECK(cudaGetDeviceProperties(&props, device));
  require_device_code(device, props);
  Stream stream;
  DevicePeaks p;
  // 1 GiB each way: far beyond any L2, long enough that launch costs vanish.
  p.copy_bytes = std::int64_t{1} << 30;
  {
    DeviceBuffer<unsigned char> src(static_cast<std::size_t>(p.copy_bytes)),
        dst(static_cast<std::size_t>(p.copy_bytes));
    HARNESS_CHECK(cudaMemsetAsync(src.get(), 0x5a, src.size(), stream.get()));
    const double s = median_seconds(stream.get(), repetitions, [&] {
      HARNESS_CHECK(cudaMemcpyAsync(dst.get(), src.get(), src.size(), cudaMemcpyDeviceToDevice,
                                    stream.get()));
    });
    p.copy_bytes_per_s = 2.0 * static_cast<double>(p.copy_bytes) / s;
  }
  p.gemm_size = 8192;
  {
    const auto n = static_cast<std::size_t>(p.gemm_size);
    DeviceBuffer<bf16> a(n * n), b(n * n), c(n * n);
    // Non-zero operands: a GEMM of zeros can run faster than one of real data.
    HARNESS_CHECK(cudaMemsetAsync(a.get(), 0x3c, a.size() * 2, stream.get()));
    HARNESS_CHECK(cudaMemsetAsync(b.get(), 0x3b, b.size() * 2, stream.get()));
    Cublas blas(stream.get());
    const float one = 1.0f, zero = 0.0f;
    const int m = p.gemm_size;
    int sms = 0;
    HARNESS_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    Sm0ClockStamper stamper(sms);
    const auto from = stamper.stamp(stream.get());
    const double s = median_seconds(stream.get(), repetitions, [&] {
      HARNESS_CHECK(cublasGemmEx(blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, m, m, m, &one, a.get(),
                                 CUDA_R_16BF, m, b.get(), CUDA_R_16BF, m, &zero, c.get(),
                                 CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
    const auto to = stamper.stamp(stream.get());
    p.bf16_flops_per_s = 2.0 * static_cast<double>(m) * m * m / s;
    if (const auto mhz = mean_sm_clock_mhz(from, to)) p.gemm_sm_clock_mhz = *mhz;
  }
  return p;
}

}  // namespace moe
