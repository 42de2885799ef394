// The `native` gate_routing component: router GEMM, softmax, top-k and route validation in one
// sm_90 kernel (thread-block clusters), no host synchronization. Internal to kernels/: include
// only from .cu files.
//
// A cluster of S CTAs owns a tile of token rows; each CTA multiplies the rows by the whole router
// over 1/S of K on bf16 mma.sync tensor cores (cp.async pipeline) and parks its partial logits in
// shared memory. After a cluster barrier each CTA sums the S partials of its share of the rows
// through distributed shared memory (fixed order: deterministic) and routes them one warp per
// row. S is picked so that the grid fills the GPU even for a handful of rows; the logits never
// touch global memory.
//
// fp32 routers keep fp32 semantics: the weights are split once into three bf16 planes whose sum
// is the fp32 value exactly, the planes are laid end to end along K, and the x row is reused for
// each plane, so every product is exact and sums in fp32 like an SGEMM.
#pragma once

#include <cstdint>

#include "kernels/cuda_memory.h"
#include "kernels/geometry.h"

namespace moe::cuda {

class NativeGate {
 public:
  // Whether this device and build run the fused kernel for `g` (sm_90, E <= 256, k <= 32,
  // H a multiple of 8, or of 64 for an fp32 router).
  [[nodiscard]] static bool covers(const ModelGeometry& g);

  // `router` is the [E][H] router of g.router_dtype (bf16 or fp32), read at construction for an
  // fp32 router (split into planes) and at every forward for a bf16 one.
  NativeGate(const ModelGeometry& g, int rows, const void* router, cudaStream_t s);
  NativeGate(const NativeGate&) = delete;
  NativeGate& operator=(const NativeGate&) = delete;

  // ids/weights [rows][k] from x [rows][H]; invalid routes become padding and set *flag.
  void forward(const bf16* x, int* ids, float* weights, int* flag);

  // Launch shape, for the tests and the bench's notes: rows per cluster and CTAs per cluster.
  [[nodiscard]] int tile_rows() const { return tile_rows_; }
  [[nodiscard]] int cluster_size() const { return splits_; }

 private:
  ModelGeometry g_;
  int rows_;
  cudaStream_t s_;
  const bf16* router_ = nullptr;  // [E][planes * H]
  int planes_ = 1;
  int tile_rows_ = 0, splits_ = 1;
  DeviceBuffer<bf16> planes_buffer_;  // fp32 routers only
};

}  // namespace moe::cuda
