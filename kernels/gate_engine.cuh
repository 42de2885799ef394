// The gate_routing component's launch sequence, shared by both CUDA backends. Internal to
// kernels/: include only from .cu files.
#pragma once

#include <cublas_v2.h>

#include "core/geometry.h"
#include "kernels/cuda_memory.h"

namespace moe::cuda {

// Largest E of the gate's softmax/top-k kernel (32 logits per lane).
inline constexpr int kMaxRouterExperts = 1024;

// The gate_routing launch sequence (both backends): one cuBLAS bf16 GEMM of the router planes
// and x into fp32 logits, then softmax_topk. A bf16 router is one plane. An fp32 router is split
// once, at construction, into three bf16 planes whose sum is the fp32 weight exactly, stacked
// along the GEMM's M: every product is exact and accumulates in fp32, so the logits keep fp32
// semantics (softmax_topk adds the three plane logits) at the bf16 tensor-core rate, instead of
// an SGEMM on CUDA cores over an fp32 copy of x.
//
// The GEMM runs on more rows than it routes (kernels/gate_rows.h): up to 2048 rows the rows
// rounded up to a multiple of 8, above that the rows padded to the end of their band of SMs x 4
// rows. cuBLAS's heuristics pick a slower kernel for most row counts that are not a multiple of
// 8, and between multiples of 8 its kernels' time is a sawtooth in the rows (tile and cluster
// counts), up to 20 % of the gate between neighbouring row counts on the H200: a time no table
// can interpolate. Padded to a band the GEMM's time is the same for every row count of the band,
// and the bands end where softmax_topk's time steps (one more block on every SM), so above 2048
// rows the gate's time steps only at the rows gate_time_steps declares
// (docs/native-backend.md#the-router-gemm-on-rows-padded-to-bands). Below, the multiples of 8
// remove cuBLAS's comb, not its kernel changes (small for Qwen3-30B-A3B's router, up to 40 % for
// DeepSeek-V3's); fewer than 8 rows are not rounded (8 rows measured 3-5 % slower than 1-5).
class GateEngine {
 public:
  // Rows of x a forward over `rows` routed rows reads on the current device: the rows past
  // `rows` are the GEMM's padding, any values, and their logits are never used.
  [[nodiscard]] static int input_rows(int rows);

  // `router` is the device [E][H] router of g.router_dtype; a bf16 one must outlive the engine.
  GateEngine(const ModelGeometry& g, int rows, const void* router, cudaStream_t s,
             cublasHandle_t blas);
  // Routes of every row of x [input_rows(rows)][H] into ids/weights [rows][k]; raises *flag on
  // invalid lanes.
  void forward(const bf16* x, int* ids, float* weights, int* flag);
  // The GEMM's rows: input_rows(rows).
  [[nodiscard]] int gemm_rows() const { return gemm_rows_; }

 private:
  ModelGeometry g_;
  int rows_;
  int gemm_rows_;
  cudaStream_t s_;
  cublasHandle_t blas_;
  int planes_ = 1;
  const bf16* planes_ptr_ = nullptr;  // [planes][E][H]
  DeviceBuffer<bf16> plane_buffer_;   // fp32 routers only
  DeviceBuffer<float> logits_;        // [gemm rows][planes][E]
};

}  // namespace moe::cuda
