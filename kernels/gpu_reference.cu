#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cuda_common.cuh"
#include "kernels/gpu_reference.cuh"

namespace moe::cuda {

namespace {

constexpr int kThreads = 256;
// Probabilities of the k-th and (k+1)-th expert closer than this (relative) do not decide the
// top-k set: fp32 logits from different summation orders differ by ~1e-7 relative.
constexpr float kTieMargin = 1e-5f;

__device__ float to_float(bf16 v) {
  return __bfloat162float(v);
}
__device__ float to_float(float v) {
  return v;
}
__device__ float round_bf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}
__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The MLP reference multiplies, per local expert, a tile of its lanes by a tile of its weight
// rows: kLaneTile lanes x kFeatureTile weight rows, over K in chunks of kKChunk staged in shared
// memory as fp32 (padded a column against bank conflicts). Each of the kThreads threads owns one
// weight row (feature) and kLanesPerThread lanes. Plain fp32 FMAs on CUDA cores, no tensor cores
// and nothing shared with the kernels under test; the tiles only stop every lane from streaming
// its expert's whole weight block on its own.
constexpr int kLaneTile = 32, kFeatureTile = 64, kKChunk = 32;
constexpr int kLanesPerThread = kLaneTile / (kThreads / kFeatureTile);
static_assert(kThreads % kFeatureTile == 0 && kLaneTile % (kThreads / kFeatureTile) == 0);

// One expert's lane tile of a block: lanes order[first .. first + count) all apply `expert`.
struct LaneTile {
  int expert, first, count;
};

// This thread's weight row within the block's tile, and the first of its lane slots.
__device__ int thread_feature() {
  return static_cast<int>(threadIdx.x) % kFeatureTile;
}
__device__ int thread_first_slot() {
  return static_cast<int>(threadIdx.x) / kFeatureTile * kLanesPerThread;
}

// acc[m][j] = sum over k < k_len of weight_value(m, feature, k) * lane_value(lane slot, k) for
// this thread's feature (threadIdx.x % kFeatureTile) and its kLanesPerThread lane slots; values
// outside the tile (lane slot >= lanes, feature >= features) read as 0.
template <int kMatrices, class LaneValue, class WeightValue>
__device__ void tile_products(int lanes, int features, int k_len, LaneValue lane_value,
                              WeightValue weight_value, float (&acc)[kMatrices][kLanesPerThread]) {
  __shared__ float lane_tile[kLaneTile][kKChunk + 1];
  __shared__ float weight_tile[kMatrices][kFeatureTile][kKChunk + 1];
  const int t = static_cast<int>(threadIdx.x);
  const int feature = thread_feature(), first_slot = thread_first_slot();
  for (int m = 0; m < kMatrices; ++m)
    for (int j = 0; j < kLanesPerThread; ++j) acc[m][j] = 0.0f;
  for (int k0 = 0; k0 < k_len; k0 += kKChunk) {
    for (int i = t; i < kLaneTile * kKChunk; i += kThreads) {
      const int slot = i / kKChunk, k = k0 + i % kKChunk;
      lane_tile[slot][i % kKChunk] = slot < lanes && k < k_len ? lane_value(slot, k) : 0.0f;
    }
    for (int m = 0; m < kMatrices; ++m)
      for (int i = t; i < kFeatureTile * kKChunk; i += kThreads) {
        const int f = i / kKChunk, k = k0 + i % kKChunk;
        weight_tile[m][f][i % kKChunk] = f < features && k < k_len ? weight_value(m, f, k) : 0.0f;
      }
    __syncthreads();
    for (int k = 0; k < kKChunk; ++k)
      for (int m = 0; m < kMatrices; ++m) {
        const float w = weight_tile[m][feature][k];
        for (int j = 0; j < kLanesPerThread; ++j) acc[m][j] += w * lane_tile[first_slot + j][k];
      }
    __syncthreads();
  }
}

// act[lane][i] = bf16(silu(bf16(G_e[i] . x)) * bf16(U_e[i] . x)). Block (lane tile, feature tile).
__global__ void ref_gate_up(const bf16* x, const LaneTile* tiles, const int* order, int per_row,
                            const bf16* w13, int h, int inter, float* act) {
  const LaneTile tile = tiles[blockIdx.x];
  const int f0 = static_cast<int>(blockIdx.y) * kFeatureTile;
  const bf16* gate = w13 + (static_cast<std::size_t>(tile.expert) * 2 * inter + f0) * h;
  const bf16* up = gate + static_cast<std::size_t>(inter) * h;
  float acc[2][kLanesPerThread];
  tile_products<2>(
      tile.count, min(kFeatureTile, inter - f0), h,
      [&](int slot, int k) {
        return to_float(x[static_cast<std::size_t>(order[tile.first + slot] / per_row) * h + k]);
      },
      [&](int m, int f, int k) {
        return to_float((m == 0 ? gate : up)[static_cast<std::size_t>(f) * h + k]);
      },
      acc);
  const int i = f0 + thread_feature(), first_slot = thread_first_slot();
  for (int j = 0; j < kLanesPerThread; ++j) {
    if (i >= inter || first_slot + j >= tile.count) continue;
    const float g = round_bf16(acc[0][j]), u = round_bf16(acc[1][j]);
    act[static_cast<std::size_t>(order[tile.first + first_slot + j]) * inter + i] =
        round_bf16(g / (1.0f + expf(-g)) * u);
  }
}

// out[row][c] += weight * W2_e[c] . act[lane] for every lane of the row (its expert output
// rounded to bf16 when `round_output`). Block (lane tile, output-feature tile); the lanes of a row
// belong to different experts, so they add atomically.
__global__ void ref_down(const LaneTile* tiles, const int* order, const float* weight, int per_row,
                         const float* act, const bf16* w2, int h, int inter, bool round_output,
                         float* out) {
  const LaneTile tile = tiles[blockIdx.x];
  const int c0 = static_cast<int>(blockIdx.y) * kFeatureTile;
  const bf16* w = w2 + (static_cast<std::size_t>(tile.expert) * h + c0) * inter;
  float acc[1][kLanesPerThread];
  tile_products<1>(
      tile.count, min(kFeatureTile, h - c0), inter,
      [&](int slot, int k) {
        return act[static_cast<std::size_t>(order[tile.first + slot]) * inter + k];
      },
      [&](int, int f, int k) { return to_float(w[static_cast<std::size_t>(f) * inter + k]); }, acc);
  const int c = c0 + thread_feature(), first_slot = thread_first_slot();
  for (int j = 0; j < kLanesPerThread; ++j) {
    if (c >= h || first_slot + j >= tile.count) continue;
    const int lane = order[tile.first + first_slot + j];
    const float y = round_output ? round_bf16(acc[0][j]) : acc[0][j];
    atomicAdd(out + static_cast<std::size_t>(lane / per_row) * h + c, weight[lane] * y);
  }
}

// One block per row: fp32 logits (one warp per expert), then softmax and top-k on one thread.
template <class RouterT>
__global__ void ref_gate(const bf16* x, int rows, const RouterT* router, int h, int experts, int k,
                         bool renormalize, float* dense, int* ambiguous) {
  extern __shared__ float p[];  // [experts]
  const int row = static_cast<int>(blockIdx.x);
  const int warp = static_cast<int>(threadIdx.x / 32), t = static_cast<int>(threadIdx.x % 32);
  const bf16* xr = x + static_cast<std::size_t>(row) * h;
  for (int e = warp; e < experts; e += static_cast<int>(blockDim.x / 32)) {
    const RouterT* we = router + static_cast<std::size_t>(e) * h;
    float s = 0.0f;
    for (int c = t; c < h; c += 32) s += to_float(xr[c]) * to_float(we[c]);
    s = warp_sum(s);
    if (t == 0) p[e] = s;
  }
  float* out = dense + static_cast<std::size_t>(row) * experts;
  for (int e = static_cast<int>(threadIdx.x); e < experts; e += static_cast<int>(blockDim.x))
    out[e] = 0.0f;
  __syncthreads();
  if (threadIdx.x != 0) return;
  float mx = -INFINITY, sum = 0.0f;
  for (int e = 0; e < experts; ++e) mx = fmaxf(mx, p[e]);
  for (int e = 0; e < experts; ++e) sum += (p[e] = expf(p[e] - mx));
  for (int e = 0; e < experts; ++e) p[e] /= sum;
  // k passes of arg-max (ties to the lower id); chosen entries are negated out of the way.
  float top = 0.0f, kth = 0.0f;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < experts; ++e)
      if (p[e] >= 0.0f && (best < 0 || p[e] > p[best])) best = e;
    kth = p[best];
    top += kth;
    out[best] = kth;
    p[best] = -1.0f - p[best];
  }
  float next = 0.0f;
  for (int e = 0; e < experts; ++e)
    if (p[e] >= 0.0f) next = fmaxf(next, p[e]);
  ambiguous[row] = k < experts && kth - next <= kTieMargin * kth ? 1 : 0;
  if (renormalize)
    for (int e = 0; e < experts; ++e) out[e] /= top;
}

__global__ void scatter_dense(const int* ids, const float* weights, int lanes, int k, int experts,
                              float* dense, int* invalid) {
  for (int l = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); l < lanes;
       l += static_cast<int>(gridDim.x * blockDim.x)) {
    const int id = ids[l], row = l / k;
    if (id < 0 || id >= experts)
      invalid[row] = 1;
    else
      atomicAdd(dense + static_cast<std::size_t>(row) * experts + id, weights[l]);
  }
}

// acc = {max |got - want| bits, max |want| bits, failure}; non-negative floats order like their
// bit patterns, so atomicMax on the bits is a float maximum.
template <class GotT, class WantT>
__global__ void compare_arrays(const GotT* got, const WantT* want, std::size_t n, int row_width,
                               const int* skip_rows, unsigned* acc) {
  float diff = 0.0f, scale = 0.0f;
  bool bad = false;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    if (skip_rows && skip_rows[i / static_cast<std::size_t>(row_width)]) continue;
    const float g = to_float(got[i]), w = to_float(want[i]);
    const float d = fabsf(g - w);
    if (isnan(d) || isnan(w)) bad = true;
    diff = fmaxf(diff, d);
    scale = fmaxf(scale, fabsf(w));
  }
  atomicMax(acc + 0, __float_as_uint(diff));
  atomicMax(acc + 1, __float_as_uint(scale));
  if (bad) atomicOr(acc + 2, 1u);
}

__global__ void widen(const bf16* in, float* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    out[i] = to_float(in[i]);
}

__global__ void any_flag(const int* flags, int n, unsigned* acc) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<int>(gridDim.x * blockDim.x))
    if (flags[i]) atomicOr(acc + 2, 1u);
}

// The lanes on the device (`expert[lane]`: local expert index, -1: skip), as their expert-sorted
// order and its lane tiles (host-side counting sort: lanes of one expert keep their order).
ReferenceLanes upload_lanes(int rows, int per_row, const std::vector<int>& expert,
                            const std::vector<float>& weight) {
  int experts = 0;
  for (const int e : expert) experts = std::max(experts, e + 1);
  std::vector<int> first(static_cast<std::size_t>(experts) + 1, 0);
  for (const int e : expert)
    if (e >= 0) ++first[static_cast<std::size_t>(e) + 1];
  for (int e = 0; e < experts; ++e) first[e + 1] += first[e];
  std::vector<int> order(static_cast<std::size_t>(first[experts]));
  auto next = first;
  for (std::size_t lane = 0; lane < expert.size(); ++lane)
    if (expert[lane] >= 0) order[next[expert[lane]]++] = static_cast<int>(lane);
  std::vector<int> tiles;  // LaneTile triples
  for (int e = 0; e < experts; ++e)
    for (int i = first[e]; i < first[e + 1]; i += kLaneTile)
      tiles.insert(tiles.end(), {e, i, std::min(kLaneTile, first[e + 1] - i)});
  return {rows,          per_row,       upload(weight),
          upload(order), upload(tiles), static_cast<int>(tiles.size() / 3)};
}

}  // namespace

ReferenceLanes routed_lanes(const Routes& routes, const ExpertOwnership& own) {
  std::vector<int> expert(routes.ids.size(), -1);
  std::vector<float> weight(routes.ids.size(), 0.0f);
  for (std::size_t i = 0; i < routes.ids.size(); ++i) {
    const float w = routes.weights[i];
    if (own.owns(routes.ids[i]) && std::isfinite(w) && w >= 0.0f) {
      expert[i] = routes.ids[i] - own.first_expert;
      weight[i] = w;
    }
  }
  return upload_lanes(routes.rows, routes.k, expert, weight);
}

ReferenceLanes shared_lanes(int rows, int count) {
  std::vector<int> expert(static_cast<std::size_t>(rows) * count);
  for (std::size_t i = 0; i < expert.size(); ++i) expert[i] = static_cast<int>(i % count);
  return upload_lanes(rows, count, expert, std::vector<float>(expert.size(), 1.0f));
}

void reference_mlp(const bf16* x, const ReferenceLanes& lanes, const bf16* w13, const bf16* w2,
                   int hidden, int inter, bool round_output, float* out, cudaStream_t s) {
  if (lanes.tile_count == 0) return;
  const auto* tiles = reinterpret_cast<const LaneTile*>(lanes.tiles.get());
  DeviceBuffer<float> act(static_cast<std::size_t>(lanes.rows) * lanes.per_row * inter);
  const auto feature_tiles = [](int n) {
    return static_cast<unsigned>((n + kFeatureTile - 1) / kFeatureTile);
  };
  ref_gate_up<<<dim3(static_cast<unsigned>(lanes.tile_count), feature_tiles(inter)), kThreads, 0,
                s>>>(x, tiles, lanes.order.get(), lanes.per_row, w13, hidden, inter, act.get());
  HARNESS_CHECK(cudaGetLastError());
  ref_down<<<dim3(static_cast<unsigned>(lanes.tile_count), feature_tiles(hidden)), kThreads, 0,
             s>>>(tiles, lanes.order.get(), lanes.weight.get(), lanes.per_row, act.get(), w2,
                  hidden, inter, round_output, out);
  HARNESS_CHECK(cudaGetLastError());
  HARNESS_CHECK(cudaStreamSynchronize(s));  // `act` is freed on return
}

void reference_gate(const bf16* x, int rows, const void* router, Dtype router_dtype,
                    const ModelGeometry& g, float* dense, int* ambiguous, cudaStream_t s) {
  if (rows == 0) return;
  const std::size_t shared = static_cast<std::size_t>(g.experts) * sizeof(float);
  if (router_dtype == Dtype::fp32)
    ref_gate<<<rows, kThreads, shared, s>>>(x, rows, static_cast<const float*>(router), g.hidden,
                                            g.experts, g.top_k, g.renormalize, dense, ambiguous);
  else
    ref_gate<<<rows, kThreads, shared, s>>>(x, rows, static_cast<const bf16*>(router), g.hidden,
                                            g.experts, g.top_k, g.renormalize, dense, ambiguous);
  HARNESS_CHECK(cudaGetLastError());
}

void widen_to_f32(const bf16* in, float* out, std::size_t n, cudaStream_t s) {
  if (n == 0) return;
  widen<<<blocks_for(n), kThreads, 0, s>>>(in, out, n);
  HARNESS_CHECK(cudaGetLastError());
}

void dense_routes(const int* ids, const float* weights, int rows, const ModelGeometry& g,
                  float* dense, int* invalid, cudaStream_t s) {
  const std::size_t n = static_cast<std::size_t>(rows) * g.experts;
  if (n == 0) return;
  HARNESS_CHECK(cudaMemsetAsync(dense, 0, n * sizeof(float), s));
  HARNESS_CHECK(cudaMemsetAsync(invalid, 0, static_cast<std::size_t>(rows) * sizeof(int), s));
  const int lanes = rows * g.top_k;
  scatter_dense<<<blocks_for(static_cast<std::size_t>(lanes)), kThreads, 0, s>>>(
      ids, weights, lanes, g.top_k, g.experts, dense, invalid);
  HARNESS_CHECK(cudaGetLastError());
}

DeviceComparison::DeviceComparison(cudaStream_t s) : s_(s), acc_(3) {
  HARNESS_CHECK(cudaMemsetAsync(acc_.get(), 0, 3 * sizeof(unsigned), s_));
}

void DeviceComparison::add(const bf16* got, const float* want, std::size_t n) {
  if (n == 0) return;
  compare_arrays<<<blocks_for(n), kThreads, 0, s_>>>(got, want, n, 1, nullptr, acc_.get());
  HARNESS_CHECK(cudaGetLastError());
}

void DeviceComparison::add(const bf16* got, const bf16* want, std::size_t n) {
  if (n == 0) return;
  compare_arrays<<<blocks_for(n), kThreads, 0, s_>>>(got, want, n, 1, nullptr, acc_.get());
  HARNESS_CHECK(cudaGetLastError());
}

void DeviceComparison::add(const float* got, const float* want, std::size_t n, int row_width,
                           const int* skip_rows) {
  if (n == 0) return;
  compare_arrays<<<blocks_for(n), kThreads, 0, s_>>>(got, want, n, row_width > 0 ? row_width : 1,
                                                     skip_rows, acc_.get());
  HARNESS_CHECK(cudaGetLastError());
}

void DeviceComparison::fail_if_any(const int* flags, int n) {
  if (n == 0) return;
  any_flag<<<blocks_for(static_cast<std::size_t>(n)), kThreads, 0, s_>>>(flags, n, acc_.get());
  HARNESS_CHECK(cudaGetLastError());
}

double DeviceComparison::relative_error() {
  unsigned host[3] = {0, 0, 0};
  HARNESS_CHECK(cudaMemcpyAsync(host, acc_.get(), sizeof(host), cudaMemcpyDeviceToHost, s_));
  HARNESS_CHECK(cudaStreamSynchronize(s_));
  if (host[2]) return INFINITY;
  float diff = 0.0f, scale = 0.0f;
  std::memcpy(&diff, &host[0], sizeof(float));
  std::memcpy(&scale, &host[1], sizeof(float));
  return static_cast<double>(diff) / std::max(static_cast<double>(scale), 1e-20);
}

}  // namespace moe::cuda
