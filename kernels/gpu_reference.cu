#include <cmath>
#include <cstring>

#include "kernels/cuda_common.cuh"
#include "kernels/gpu_reference.cuh"

namespace moe::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
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
// Global warp index and lane of this thread.
__device__ long long global_warp() {
  return (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
}
unsigned blocks_for_warps(long long warps) {
  return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

// act[lane][i] = bf16(silu(bf16(G_e[i] . x)) * bf16(U_e[i] . x)): one warp per (lane, i).
__global__ void ref_gate_up(const bf16* x, const int* expert, int lanes, int per_row,
                            const bf16* w13, int h, int inter, float* act) {
  const long long warp = global_warp();
  const int t = static_cast<int>(threadIdx.x % 32);
  if (warp >= static_cast<long long>(lanes) * inter) return;
  const int lane = static_cast<int>(warp / inter), i = static_cast<int>(warp % inter);
  const int e = expert[lane];
  if (e < 0) return;
  const bf16* xr = x + static_cast<std::size_t>(lane / per_row) * h;
  const bf16* gate = w13 + (static_cast<std::size_t>(e) * 2 * inter + i) * h;
  const bf16* up = gate + static_cast<std::size_t>(inter) * h;
  float g = 0.0f, u = 0.0f;
  for (int c = t; c < h; c += 32) {
    const float xv = to_float(xr[c]);
    g += to_float(gate[c]) * xv;
    u += to_float(up[c]) * xv;
  }
  g = round_bf16(warp_sum(g));
  u = round_bf16(warp_sum(u));
  if (t == 0)
    act[static_cast<std::size_t>(lane) * inter + i] = round_bf16(g / (1.0f + expf(-g)) * u);
}

// out[row][c] += sum over the row's lanes of weight * W2_e[c] . act[lane]: one warp per (row, c).
__global__ void ref_down(const int* expert, const float* weight, int rows, int per_row,
                         const float* act, const bf16* w2, int h, int inter, bool round_output,
                         float* out) {
  const long long warp = global_warp();
  const int t = static_cast<int>(threadIdx.x % 32);
  if (warp >= static_cast<long long>(rows) * h) return;
  const int row = static_cast<int>(warp / h), c = static_cast<int>(warp % h);
  float acc = 0.0f;
  for (int j = 0; j < per_row; ++j) {
    const int lane = row * per_row + j;
    const int e = expert[lane];
    if (e < 0) continue;
    const bf16* wr = w2 + (static_cast<std::size_t>(e) * h + c) * inter;
    const float* a = act + static_cast<std::size_t>(lane) * inter;
    float y = 0.0f;
    for (int q = t; q < inter; q += 32) y += to_float(wr[q]) * a[q];
    y = warp_sum(y);
    acc += weight[lane] * (round_output ? round_bf16(y) : y);
  }
  if (t == 0) out[static_cast<std::size_t>(row) * h + c] += acc;
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

template <class T>
ReferenceLanes upload_lanes(int rows, int per_row, const std::vector<int>& expert,
                            const std::vector<T>& weight) {
  ReferenceLanes l{rows, per_row, DeviceBuffer<int>(expert.size()),
                   DeviceBuffer<float>(weight.size())};
  if (!expert.empty()) {
    HARNESS_CHECK(cudaMemcpy(l.expert.get(), expert.data(), expert.size() * sizeof(int),
                             cudaMemcpyHostToDevice));
    HARNESS_CHECK(cudaMemcpy(l.weight.get(), weight.data(), weight.size() * sizeof(float),
                             cudaMemcpyHostToDevice));
  }
  return l;
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
  const int n = lanes.rows * lanes.per_row;
  if (n == 0) return;
  DeviceBuffer<float> act(static_cast<std::size_t>(n) * inter);
  ref_gate_up<<<blocks_for_warps(static_cast<long long>(n) * inter), kThreads, 0, s>>>(
      x, lanes.expert.get(), n, lanes.per_row, w13, hidden, inter, act.get());
  HARNESS_CHECK(cudaGetLastError());
  ref_down<<<blocks_for_warps(static_cast<long long>(lanes.rows) * hidden), kThreads, 0, s>>>(
      lanes.expert.get(), lanes.weight.get(), lanes.rows, lanes.per_row, act.get(), w2, hidden,
      inter, round_output, out);
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
