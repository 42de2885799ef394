// The experts component's launch sequence with the routes it runs on: `native` (NativeExperts)
// or `cublas_grouped` (align/permute, grouped GEMMs, SiLU-and-mul, combine). Internal to
// kernels/: include only from .cu files.
#pragma once

#include <cublas_v2.h>

#include <memory>
#include <string>

#include "core/geometry.h"
#include "kernels/cuda_memory.h"
#include "kernels/device_weights.cuh"
#include "kernels/native_experts.h"
#include "kernels/reference.h"

namespace moe::cuda {

// Scratch of the cublas_grouped sequence: permuted rows, intermediates, grouped-GEMM pointer
// arrays and the host copy of the group sizes.
struct CublasScratch {
  CublasScratch(const ModelGeometry& g, const ExpertOwnership& own, std::size_t lanes)
      : clean_weights(lanes),
        lane_expert(lanes),
        lane_slot(lanes),
        lane_pos(lanes),
        counts(static_cast<std::size_t>(own.local_experts)),
        offsets(static_cast<std::size_t>(own.local_experts)),
        xp(lanes * g.hidden),
        y1(lanes * 2 * g.intermediate),
        act(lanes * g.intermediate),
        y2(lanes * g.hidden),
        ptrs(6 * static_cast<std::size_t>(own.local_experts)),
        host_counts(static_cast<std::size_t>(own.local_experts)) {}
  DeviceBuffer<float> clean_weights;
  DeviceBuffer<int> lane_expert, lane_slot, lane_pos, counts, offsets;
  DeviceBuffer<bf16> xp, y1, act, y2;
  DeviceBuffer<void*> ptrs;
  PinnedBuffer<int> host_counts;
};

class ExpertsEngine {
 public:
  // `native` runs NativeExperts with the tile chosen for the routes' rows per active local expert;
  // otherwise the cuBLAS sequence. The routes are uploaded by upload_routes.
  ExpertsEngine(const ModelGeometry& g, const ExpertOwnership& own, const Routes& routes,
                cudaStream_t s, cublasHandle_t blas, bool native);
  void upload_routes(const Routes& r);
  // out [rows][H] = the routed experts' combined output for x [rows][H] with weights `w`.
  void forward(const bf16* x, const DeviceMlp& w, bf16* out);
  // Reads and clears the sticky route-error flag.
  [[nodiscard]] bool take_flag();
  // The kernel configuration (native: the tile and why), for benchmarks.
  [[nodiscard]] std::string configuration() const;

 private:
  ModelGeometry g_;
  ExpertOwnership own_;
  int rows_;
  cudaStream_t s_;
  cublasHandle_t blas_;
  std::size_t lanes_;
  DeviceBuffer<int> ids_;
  DeviceBuffer<float> weights_;
  DeviceBuffer<int> flag_;
  std::unique_ptr<NativeExperts> native_;
  std::unique_ptr<CublasScratch> scratch_;  // cublas_grouped only
};

}  // namespace moe::cuda
