#include <stdexcept>
#include <string>

#include "kernels/cuda_common.cuh"
#include "kernels/device_helpers.h"
#include "kernels/gate_engine.cuh"
#include "kernels/gate_rows.h"

namespace moe::cuda {

namespace {

// One warp per row of fp32 logits [rows][kPlanes][E] (the planes of a row are added): softmax,
// top-k and route validation. Compile-time sizes let every load of the row issue at once.
template <int kPerLane, int kPlanes>
__global__ void softmax_topk(const float* logits, int rows, int experts, int k, bool renormalize,
                             int* ids, float* weights, int* flag) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row = static_cast<int>(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32);
  if (row >= rows) return;
  const float* l = logits + static_cast<std::size_t>(row) * kPlanes * experts;
  float v[kPerLane];
#pragma unroll
  for (int q = 0; q < kPerLane; ++q) {
    const int e = lane + 32 * q;
    v[q] = 0.0f;
#pragma unroll
    for (int p = 0; p < kPlanes; ++p)
      if (e < experts) v[q] += l[p * experts + e];
  }
  route_token(v, row, experts, k, renormalize, lane, ids, weights, flag);
}

// fp32 router [E][H] -> three bf16 planes [3][E][H] with hi + mid + lo == w exactly: each plane
// holds the next 8 significant bits of the remainder (24 in all, fp32's precision).
__global__ void split_router_planes(const float* w, std::size_t n, bf16* planes) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float v = w[i];
    const bf16 hi = __float2bfloat16_rn(v);
    const float r1 = v - __bfloat162float(hi);
    const bf16 mid = __float2bfloat16_rn(r1);
    planes[i] = hi;
    planes[n + i] = mid;
    planes[2 * n + i] = __float2bfloat16_rn(r1 - __bfloat162float(mid));
  }
}

}  // namespace

int GateEngine::input_rows(int rows) {
  int device = 0, sms = 0;
  HARNESS_CHECK(cudaGetDevice(&device));
  HARNESS_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return static_cast<int>(gate_gemm_rows(rows, sms));
}

GateEngine::GateEngine(const ModelGeometry& g, int rows, const void* router, cudaStream_t s,
                       cublasHandle_t blas)
    : g_(g), rows_(rows), gemm_rows_(input_rows(rows)), s_(s), blas_(blas) {
  if (g.experts > kMaxRouterExperts || g.top_k > 32 || g.top_k > g.experts)
    throw std::invalid_argument("the CUDA gate covers E <= " + std::to_string(kMaxRouterExperts) +
                                " and k <= min(32, E); " + g.name + " has E=" +
                                std::to_string(g.experts) + ", k=" + std::to_string(g.top_k));
  const std::size_t eh = static_cast<std::size_t>(g.experts) * g.hidden;
  if (g.router_dtype == Dtype::fp32) {
    planes_ = 3;
    plane_buffer_ = DeviceBuffer<bf16>(3 * eh);
    split_router_planes<<<blocks_for(eh), 256, 0, s_>>>(static_cast<const float*>(router), eh,
                                                        plane_buffer_.get());
    HARNESS_CHECK(cudaGetLastError());
    planes_ptr_ = plane_buffer_.get();
  } else {
    planes_ptr_ = static_cast<const bf16*>(router);
  }
  logits_ = DeviceBuffer<float>(static_cast<std::size_t>(gemm_rows_) * planes_ * g.experts);
}

void GateEngine::forward(const bf16* x, int* ids, float* weights, int* flag) {
  const float one = 1.0f, zero = 0.0f;
  const int m = planes_ * g_.experts;
  HARNESS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, gemm_rows_, g_.hidden, &one,
                             planes_ptr_, CUDA_R_16BF, g_.hidden, x, CUDA_R_16BF, g_.hidden, &zero,
                             logits_.get(), CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
  const int warps = kGateRowsPerBlock;  // one row per warp
  const unsigned blocks = static_cast<unsigned>((rows_ + warps - 1) / warps);
  const auto launch = [&](auto kernel) {
    kernel<<<blocks, warps * 32, 0, s_>>>(logits_.get(), rows_, g_.experts, g_.top_k,
                                          g_.renormalize, ids, weights, flag);
  };
  const bool split = planes_ == 3;
  if (g_.experts <= 128)
    split ? launch(softmax_topk<4, 3>) : launch(softmax_topk<4, 1>);
  else if (g_.experts <= 256)
    split ? launch(softmax_topk<8, 3>) : launch(softmax_topk<8, 1>);
  else  // up to kMaxRouterExperts
    split ? launch(softmax_topk<32, 3>) : launch(softmax_topk<32, 1>);
  HARNESS_CHECK(cudaGetLastError());
}

}  // namespace moe::cuda
