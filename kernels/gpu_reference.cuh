// The independent GPU reference that verifies every point of every round over all rows
// (docs/measurement.md). It is written from the math of kernels/reference.h, not from the
// kernels under test: fp32 CUDA-core products (the MLP in shared-memory tiles of one expert's
// lanes and weight rows, the gate one warp per logit), the same bf16 rounding of intermediates
// as the CPU reference, routes validated lane by lane. Simple enough to trust; the GPU tests
// check it against the CPU reference.
// Internal to kernels/: include only from .cu files.
#pragma once

#include <cstdint>
#include <vector>

#include "core/geometry.h"
#include "kernels/cuda_memory.h"
#include "kernels/reference.h"

namespace moe::cuda {

// Lanes of an MLP reference on the device: lane (row, j) = row * per_row + j applies one local
// expert with `weight`, or none (a skipped lane is in no tile).
struct ReferenceLanes {
  int rows = 0, per_row = 0;
  DeviceBuffer<float> weight;  // [rows][per_row]
  DeviceBuffer<int> order;     // the lanes that apply an expert, sorted by expert (stable)
  DeviceBuffer<int> tiles;     // [tile_count][3]: expert, first index into `order`, lanes
  int tile_count = 0;
};

// Routed-expert lanes from host routes: a lane counts when its id is owned locally and its
// weight is finite and non-negative (the route-validation rule); everything else is skipped.
[[nodiscard]] ReferenceLanes routed_lanes(const Routes& routes, const ExpertOwnership& own);
// Shared-expert lanes: every row applies experts 0..count-1 with weight 1.
[[nodiscard]] ReferenceLanes shared_lanes(int rows, int count);

// out [rows][H] (fp32, holding its initial value) += sum over lanes of
// weight * W2_e(bf16(bf16(silu(bf16(G_e x))) * bf16(U_e x))), the product rounded to bf16 when
// `round_output` (routed experts) and kept in fp32 otherwise (shared experts, GEMM beta = 1).
// w13 [L][2I][H], w2 [L][H][I] in bf16.
void reference_mlp(const bf16* x, const ReferenceLanes& lanes, const bf16* w13, const bf16* w2,
                   int hidden, int inter, bool round_output, float* out, cudaStream_t s);

// out[i] = in[i] as fp32 (the initial value of a reference accumulation).
void widen_to_f32(const bf16* in, float* out, std::size_t n, cudaStream_t s);

// Dense routes [rows][E] of the reference gate (softmax of fp32 logits, top-k with ties to the
// lower id, optional renormalization). `ambiguous[row]` is set when the k-th and (k+1)-th
// probabilities are closer than the logits' rounding could separate: such a row's top-k set is
// not determined by the math, and it is left out of the comparison.
void reference_gate(const bf16* x, int rows, const void* router, Dtype router_dtype,
                    const ModelGeometry& g, float* dense, int* ambiguous, cudaStream_t s);

// Dense routes [rows][E] from a backend's ids/weights [rows][k]; a lane with an id outside
// [0, E) makes the comparison fail (its row is marked in `invalid`).
void dense_routes(const int* ids, const float* weights, int rows, const ModelGeometry& g,
                  float* dense, int* invalid, cudaStream_t s);

// max |got - want| / max |want| over device arrays, accumulated on the device; NaN in `got`
// makes the error infinite. Rows flagged in `skip_rows` (if given) are left out.
class DeviceComparison {
 public:
  explicit DeviceComparison(cudaStream_t s);
  void add(const bf16* got, const float* want, std::size_t n);
  void add(const bf16* got, const bf16* want, std::size_t n);
  void add(const float* got, const float* want, std::size_t n, int row_width = 0,
           const int* skip_rows = nullptr);
  void fail_if_any(const int* flags, int n);  // any non-zero flag: infinite error
  // Synchronizes the stream and returns the relative error of everything added.
  [[nodiscard]] double relative_error();

 private:
  cudaStream_t s_;
  DeviceBuffer<unsigned> acc_;  // {max |diff| bits, max |want| bits, NaN or failure}
};

}  // namespace moe::cuda
