// Device building blocks shared by the CUDA kernels: PTX wrappers for the mma.sync tensor-core
// path, the cp.async stage pipeline, the gated activation, swizzled tile fragments, the
// route-validity rule and the per-row softmax/top-k. Internal to kernels/: include only from .cu
// files.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

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
// The same copy under an L2 cache policy (l2_evict_first).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool pred,
                                           std::uint64_t policy) {
  asm volatile(
      "cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(smem_addr(dst)),
      "l"(src), "r"(pred ? 16 : 0), "l"(policy));
}
// An L2 cache policy for cp.async under which the lines loaded are the first to be evicted.
__device__ __forceinline__ std::uint64_t l2_evict_first() {
  std::uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// Orders this thread's generic-proxy shared-memory writes (st.shared, cp.async) before later
// async-proxy reads of them (wgmma operands, bulk copies out).
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// A load that later loads of this thread (and, after a barrier, of its block) cannot pass: the
// consumer side of a flag another block released with a fence and an atomic.
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
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

// ---------------------------------------------------------------- the gated activation

// An fp32 value rounded to bf16, kept in fp32.
__device__ __forceinline__ float round_bf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}
// SiLU(gate) * up of one feature, with the fast exponential: every CUDA path computes the
// activation through this (the GPU reference computes it on its own, with expf).
__device__ __forceinline__ float silu_mul(float gate, float up) {
  return gate / (1.0f + __expf(-gate)) * up;
}
// The same from a GEMM's fp32 sums, each rounded to bf16 first: the fused epilogues see gate and
// up as the unfused path does, which stores the W13 output in bf16 before the activation.
__device__ __forceinline__ float silu_mul_of_sums(float gate_sum, float up_sum) {
  return silu_mul(round_bf16(gate_sum), round_bf16(up_sum));
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
    if constexpr (kAsyncProxy) fence_async_shared();
    __syncthreads();  // stage `step` visible to all; the stage refilled below is free
    const int next = step + kAhead;
    if (next < steps) load(next % kStages, next);
    cp_async_commit();
    compute(step % kStages);
  }
}

// ---------------------------------------------------------------- routes

// docs/measurement.md: a lane is padding (-1) or names an expert, with a finite non-negative
// weight.
__device__ __forceinline__ bool lane_is_valid(int id, float w, int experts) {
  return (id == -1 || (id >= 0 && id < experts)) && isfinite(w) && w >= 0.0f;
}

// Order-preserving 32-bit key of a float (larger float, larger key); NaN maps to 0, below every
// number, so that it is never chosen (as a comparison with NaN never chooses it).
__device__ __forceinline__ unsigned float_key(float v) {
  if (isnan(v)) return 0u;
  const unsigned b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_float(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// One warp routes one token: logits[q] holds the logit of expert lane + 32 q (experts >=
// `experts` are ignored), and the routes go to row `row` of ids/weights [rows][k]. Softmax over
// the experts, top-k by probability (ties to the lower id), optional renormalization over the
// chosen k, then route validation: an invalid lane (e.g. from NaN inputs, which make every
// probability NaN) becomes padding and sets *flag. The arg-max of each of the k rounds is two
// warp reductions (redux.sync) on exact keys instead of a shuffle tree. Needs k <= 32.
template <int kPerLane>
__device__ __forceinline__ void route_token(const float (&logits)[kPerLane], int row, int experts,
                                            int k, bool renormalize, int lane, int* ids,
                                            float* weights, int* flag) {
  constexpr unsigned kAll = 0xffffffffu;
  unsigned mk = 0;
#pragma unroll
  for (int q = 0; q < kPerLane; ++q)
    if (lane + 32 * q < experts) mk = max(mk, float_key(logits[q]));
  const unsigned m = __reduce_max_sync(kAll, mk);
  const float mx = m == 0 ? -INFINITY : key_float(m);
  // Probability keys: bits(p) + 1 for an expert's probability (p >= 0, so bits are ordered),
  // 0 for NaN, experts that do not exist, and experts already taken.
  unsigned key[kPerLane];
  float sum = 0.0f;
#pragma unroll
  for (int q = 0; q < kPerLane; ++q) {
    const bool exists = lane + 32 * q < experts;
    const float p = exists ? __expf(logits[q] - mx) : 0.0f;
    if (exists) sum += p;
    key[q] = exists && !isnan(p) ? __float_as_uint(p) + 1u : 0u;
  }
  for (int o = 16; o; o /= 2) sum += __shfl_xor_sync(kAll, sum, o);
  const float inv_sum = 1.0f / sum;
  int my_id = -1;
  float my_p = 0.0f, top_sum = 0.0f;
  for (int t = 0; t < k; ++t) {
    unsigned best = 0;
    int best_q = 0;
#pragma unroll
    for (int q = 0; q < kPerLane; ++q)
      if (key[q] > best) best = key[q], best_q = q;  // ties: the lower q, the lower id
    const unsigned top = __reduce_max_sync(kAll, best);
    const unsigned mine = top != 0 && best == top ? static_cast<unsigned>(lane + 32 * best_q) : ~0u;
    const unsigned id = __reduce_min_sync(kAll, mine);
#pragma unroll
    for (int q = 0; q < kPerLane; ++q)
      if (mine == id && q == best_q) key[q] = 0;  // taken
    // Nothing left to choose (every probability NaN): an out-of-range id, caught below.
    const float p = top == 0 ? -1.0f : __uint_as_float(top - 1u) * inv_sum;
    if (lane == t) my_id = top == 0 ? experts : static_cast<int>(id), my_p = p;
    top_sum += p;
  }
  if (lane >= k) return;
  float w = renormalize ? my_p / top_sum : my_p;
  if (!lane_is_valid(my_id, w, experts)) {
    my_id = -1, w = 0.0f;
    atomicOr(flag, 1);
  }
  const std::int64_t at = static_cast<std::int64_t>(row) * k + lane;
  ids[at] = my_id;
  weights[at] = w;
}

}  // namespace moe::cuda
