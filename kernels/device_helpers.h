// Device building blocks shared by the CUDA kernels: PTX wrappers for the mma.sync tensor-core
// path, the cp.async stage pipeline, swizzled tile fragments, the route-validity rule and the
// per-row softmax/top-k. Internal to kernels/: include only from .cu files.
#pragma once

#include <cuda_bf16.h>

#include <cmath>

namespace moe::cuda {

// ---------------------------------------------------------------- PTX wrappers

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy; with `pred` false the destination is zero-filled and nothing is
// read (src-size 0), which pads partial tiles.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// D += A (16x16, row-major) * B (16x8, column-major), bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---------------------------------------------------------------- swizzled K-major tiles

// Element offset of 16-byte chunk `chunk` of row `row` in a stage whose rows are kBK bf16 wide,
// with the chunks XOR-swizzled by row so that ldmatrix reads of 8 rows hit 8 distinct bank
// groups (for kBK = 64 this is the 128-byte swizzle that wgmma descriptors expect).
template <int kBK>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * kBK + ((chunk ^ (row & 7)) * 8);
}

// mma.sync A fragment: rows [row0, row0 + 16) x K chunks chunk0, chunk0 + 1 of a stage.
template <int kBK>
__device__ __forceinline__ void load_a_fragment(unsigned (&a)[4], const __nv_bfloat16* stage,
                                                int row0, int chunk0, int lane) {
  const int row = row0 + (lane & 15);
  ldmatrix_x4(a, stage + swizzled<kBK>(row, chunk0 + (lane >> 4)));
}

// mma.sync B fragments of two n8 tiles: rows [row0, row0 + 8) into b0, [row0 + 8, row0 + 16)
// into b1, K chunks chunk0, chunk0 + 1.
template <int kBK>
__device__ __forceinline__ void load_b_fragments(unsigned (&b0)[2], unsigned (&b1)[2],
                                                 const __nv_bfloat16* stage, int row0, int chunk0,
                                                 int lane) {
  const int row = row0 + (lane & 7) + ((lane >> 4) << 3);
  unsigned r[4];
  ldmatrix_x4(r, stage + swizzled<kBK>(row, chunk0 + ((lane >> 3) & 1)));
  b0[0] = r[0];
  b0[1] = r[1];
  b1[0] = r[2];
  b1[1] = r[3];
}

// The multi-stage cp.async main loop of the tensor-core kernels: kStages shared-memory stages,
// kAhead K steps loaded ahead. load(stage, i) queues the copies of step i into `stage`;
// compute(stage) consumes a landed stage. mma.sync kernels load kStages - 1 ahead. The wgmma
// kernel loads kStages - 2 ahead because one step's wgmma is still reading its stage while the
// next is issued, and its reads go through the async proxy (kAsyncProxy: fence the cp.async
// writes for it). Every thread of the block must call it.
template <int kStages, int kAhead = kStages - 1, bool kAsyncProxy = false, class Load,
          class Compute>
__device__ __forceinline__ void cp_async_pipeline(int steps, const Load& load,
                                                  const Compute& compute) {
  static_assert(kAhead >= 1 && kAhead < kStages, "a stage is refilled after it was consumed");
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < steps) load(s, s);
    cp_async_commit();
  }
  for (int step = 0; step < steps; ++step) {
    cp_async_wait<kAhead - 1>();
    if constexpr (kAsyncProxy) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();  // stage `step` visible to all; the stage refilled below is free
    const int next = step + kAhead;
    if (next < steps) load(next % kStages, next);
    cp_async_commit();
    compute(step % kStages);
  }
}

// ---------------------------------------------------------------- routes

// SPEC §6: a lane is padding (-1) or names an expert, with a finite non-negative weight.
__device__ __forceinline__ bool lane_is_valid(int id, float w, int experts) {
  return (id == -1 || (id >= 0 && id < experts)) && isfinite(w) && w >= 0.0f;
}

// One warp routes one token: `logits` holds the warp's logits spread over lanes (expert
// lane + 32 q in logits[q]; experts >= `experts` are ignored). Softmax over the experts, top-k
// by probability (ties to the lower id), optional renormalization over the chosen k, then route
// validation: an invalid lane (e.g. from NaN inputs) becomes padding and sets *flag. Lane j < k
// writes choice j to ids/weights. Needs k <= 32 and k <= experts.
template <int kPerLane>
__device__ __forceinline__ void route_token(float (&logits)[kPerLane], int experts, int k,
                                            bool renormalize, int lane, int* ids, float* weights,
                                            int* flag) {
  float mx = -INFINITY;
#pragma unroll
  for (int q = 0; q < kPerLane; ++q)
    if (lane + 32 * q < experts) mx = fmaxf(mx, logits[q]);
  for (int o = 16; o; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.0f;
#pragma unroll
  for (int q = 0; q < kPerLane; ++q) {
    // Probabilities are >= 0 (or NaN); -3 marks an expert that does not exist, -2 a taken one.
    logits[q] = lane + 32 * q < experts ? __expf(logits[q] - mx) : -3.0f;
    if (lane + 32 * q < experts) sum += logits[q];
  }
  for (int o = 16; o; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  int my_id = -1;
  float my_p = 0.0f, top_sum = 0.0f;
  for (int t = 0; t < k; ++t) {
    float best = -1.0f;
    int best_id = experts;  // out of range: stays so only if every probability is NaN
#pragma unroll
    for (int q = 0; q < kPerLane; ++q)
      if (logits[q] > best) best = logits[q], best_id = lane + 32 * q;
    for (int o = 16; o; o /= 2) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, best_id, o);
      if (ob > best || (ob == best && oi < best_id)) best = ob, best_id = oi;
    }
#pragma unroll
    for (int q = 0; q < kPerLane; ++q)
      if (lane + 32 * q == best_id) logits[q] = -2.0f;
    if (lane == t) my_id = best_id, my_p = best / sum;
    top_sum += best / sum;
  }
  if (lane < k) {
    float w = renormalize ? my_p / top_sum : my_p;
    if (!lane_is_valid(my_id, w, experts)) {
      my_id = -1, w = 0.0f;
      atomicOr(flag, 1);
    }
    ids[lane] = my_id;
    weights[lane] = w;
  }
}

}  // namespace moe::cuda
