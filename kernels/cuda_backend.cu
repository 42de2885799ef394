// CUDA backends. Shared by both: the gate (a cuBLAS router GEMM, fp32 routers as three exact
// bf16 planes, then a softmax/top-k/validation kernel), finalize_copy and wrapper. `experts`:
// `cublas_grouped` runs align/permute kernels, cublasGemmGroupedBatchedEx for both expert GEMMs,
// SiLU-and-mul and a weighted combine; `native` runs NativeExperts (native_experts.cu). Stimuli
// are generated on the device from a counter-based hash; verification downloads the inputs of a
// few sampled rows and compares them with the CPU reference.
#include <cuda_bf16.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <list>
#include <map>
#include <numeric>
#include <random>

#include "kernels/bf16.h"
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/checked_call.h"
#include "kernels/cuda_memory.h"
#include "kernels/cuda_testing.h"
#include "kernels/device_helpers.h"
#include "kernels/native_experts.h"
#include "kernels/reference.h"
#include "kernels/stimulus.h"
#include "kernels/workload.h"

namespace moe {

namespace {

using namespace cuda;

// Largest E of the cuBLAS gate's softmax/top-k kernel (32 logits per lane).
constexpr int kMaxRouterExperts = 1024;

// The experts implementations this file provides (the other components are shared).
bool known_cuda_backend(const std::string& name) {
  return name == "cublas_grouped" || name == "native";
}

// ---------------------------------------------------------------- NVML (loaded at run time)

// The driver's NVML library, opened with dlopen: the toolkit need not ship nvml.h, and every GPU
// node has libnvidia-ml.so.1 with its driver. Only the calls used for live state are resolved.
class Nvml {
 public:
  using Device = void*;
  struct ProcessInfo {  // nvmlProcessInfo_t (v2/v3 layout)
    unsigned pid;
    unsigned long long used_memory;
    unsigned gpu_instance, compute_instance;
  };
  static const Nvml* get() {
    static const Nvml nvml;
    return nvml.ok_ ? &nvml : nullptr;
  }
  int (*handle_by_bus)(const char*, Device*) = nullptr;
  int (*clock)(Device, int, unsigned*) = nullptr;  // type: 1 = SM, 2 = memory
  int (*temperature)(Device, int, unsigned*) = nullptr;
  int (*processes)(Device, unsigned*, ProcessInfo*) = nullptr;

 private:
  Nvml() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    handle_by_bus =
        reinterpret_cast<decltype(handle_by_bus)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock = reinterpret_cast<decltype(clock)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    temperature = reinterpret_cast<decltype(temperature)>(dlsym(lib, "nvmlDeviceGetTemperature"));
    processes = reinterpret_cast<decltype(processes)>(
        dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
    ok_ = init && handle_by_bus && clock && temperature && processes && init() == 0;
  }
  bool ok_ = false;
};

// ---------------------------------------------------------------- kernels

__device__ __forceinline__ std::uint64_t splitmix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [-scale, scale) from (seed, index); never all zeros.
template <class T>
__global__ void fill_random(T* out, std::size_t n, std::uint64_t seed, float scale) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float u = static_cast<float>(splitmix(seed ^ (i * 0xd1b54a32d192ed03ULL)) >> 40) *
                    (1.0f / 16777216.0f);
    const float v = (2.0f * u - 1.0f) * scale;
    if constexpr (std::is_same_v<T, bf16>)
      out[i] = __float2bfloat16_rn(v);
    else
      out[i] = v;
  }
}

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

// Validates every lane and counts local assignments per local expert. Invalid lanes become
// padding (sanitized id -1, weight 0) before anything indexes with them.
__global__ void count_local(const int* ids, const float* weights, int lanes, int experts, int first,
                            int local, int* counts, int* lane_expert, int* lane_slot,
                            float* clean_weights, int* flag) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= lanes) return;
  int id = ids[i];
  float w = weights[i];
  if (!lane_is_valid(id, w, experts)) {
    id = -1, w = 0.0f;
    atomicOr(flag, 1);
  }
  clean_weights[i] = w;
  const int e = id - first;
  if (id >= 0 && e >= 0 && e < local) {
    lane_expert[i] = e;
    lane_slot[i] = atomicAdd(counts + e, 1);
  } else {
    lane_expert[i] = -1;
  }
}

struct GroupPointers {
  const void** a1;
  const void** b1;
  void** c1;
  const void** a2;
  const void** b2;
  void** c2;
};

// Exclusive scan of counts into offsets and the grouped-GEMM pointer arrays of active experts
// (ascending expert id, the order the host uses for the size arrays).
__global__ void expert_offsets(const int* counts, int local, int* offsets, const bf16* w13,
                               const bf16* w2, const bf16* xp, bf16* y1, const bf16* act, bf16* y2,
                               int hidden, int inter, GroupPointers gp) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int off = 0, g = 0;
  for (int e = 0; e < local; ++e) {
    offsets[e] = off;
    if (counts[e] > 0) {
      gp.a1[g] = w13 + static_cast<std::size_t>(e) * 2 * inter * hidden;
      gp.b1[g] = xp + static_cast<std::size_t>(off) * hidden;
      gp.c1[g] = y1 + static_cast<std::size_t>(off) * 2 * inter;
      gp.a2[g] = w2 + static_cast<std::size_t>(e) * hidden * inter;
      gp.b2[g] = act + static_cast<std::size_t>(off) * inter;
      gp.c2[g] = y2 + static_cast<std::size_t>(off) * hidden;
      ++g;
    }
    off += counts[e];
  }
}

// One block per lane: copies the lane's row into its expert-sorted position.
__global__ void permute_rows(const bf16* x, const int* lane_expert, const int* lane_slot,
                             const int* offsets, int k, int hidden, bf16* xp, int* lane_pos) {
  const int i = blockIdx.x;
  const int e = lane_expert[i];
  if (e < 0) {
    if (threadIdx.x == 0) lane_pos[i] = -1;
    return;
  }
  const int pos = offsets[e] + lane_slot[i];
  if (threadIdx.x == 0) lane_pos[i] = pos;
  const bf16* src = x + static_cast<std::size_t>(i / k) * hidden;
  bf16* dst = xp + static_cast<std::size_t>(pos) * hidden;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = src[c];
}

__global__ void silu_and_mul(const bf16* y1, std::size_t rows, int inter, bf16* act) {
  const std::size_t n = rows * inter;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t r = i / inter, c = i % inter;
    const float g = __bfloat162float(y1[r * 2 * inter + c]);
    const float u = __bfloat162float(y1[r * 2 * inter + inter + c]);
    act[i] = __float2bfloat16_rn(g / (1.0f + __expf(-g)) * u);
  }
}

// One block per row: out[row] = sum of weight * expert output over the row's local lanes.
__global__ void combine_rows(const bf16* y2, const int* lane_pos, const float* weights, int k,
                             int hidden, bf16* out) {
  const int row = blockIdx.x;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
    float acc = 0;
    for (int j = 0; j < k; ++j) {
      const int pos = lane_pos[row * k + j];
      if (pos >= 0)
        acc +=
            weights[row * k + j] * __bfloat162float(y2[static_cast<std::size_t>(pos) * hidden + c]);
    }
    out[static_cast<std::size_t>(row) * hidden + c] = __float2bfloat16_rn(acc);
  }
}

// ---------------------------------------------------------------- host helpers

int blocks_for(std::size_t n, int threads = 256) {
  return static_cast<int>(std::min<std::size_t>((n + threads - 1) / threads, 65535));
}

template <class T>
void fill(DeviceBuffer<T>& b, std::uint64_t seed, float scale, cudaStream_t s) {
  fill_random<<<blocks_for(b.size()), 256, 0, s>>>(b.get(), b.size(), seed, scale);
  HARNESS_CHECK(cudaGetLastError());
}

std::vector<float> download_bf16(const bf16* p, std::size_t n) {
  std::vector<std::uint16_t> raw(n);
  if (n) HARNESS_CHECK(cudaMemcpy(raw.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(raw[i]);
  return out;
}

std::vector<float> download_f32(const float* p, std::size_t n) {
  std::vector<float> out(n);
  if (n) HARNESS_CHECK(cudaMemcpy(out.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return out;
}

// Rows to verify: up to `count`, spread over the table, preferring rows that touch local experts.
std::vector<int> sample_rows(int rows, int count, const std::vector<int>& preferred) {
  std::vector<int> out;
  const int step = std::max<int>(1, static_cast<int>(preferred.size()) / std::max(1, count));
  for (std::size_t i = 0; i < preferred.size() && static_cast<int>(out.size()) < count; i += step)
    out.push_back(preferred[i]);
  for (int r = 0; r < rows && static_cast<int>(out.size()) < count; r += std::max(1, rows / count))
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  std::sort(out.begin(), out.end());
  return out;
}

// Expert MLP weights on the device (one bank): w13 [L][2I][H], w2 [L][H][I].
struct DeviceMlp {
  int experts, hidden, inter;
  DeviceBuffer<bf16> w13, w2;
  DeviceMlp(int e, int h, int i, std::uint64_t seed, cudaStream_t s)
      : experts(e),
        hidden(h),
        inter(i),
        w13(static_cast<std::size_t>(e) * 2 * i * h),
        w2(static_cast<std::size_t>(e) * h * i) {
    fill(w13, seed, 1.0f / std::sqrt(static_cast<float>(h)), s);
    fill(w2, seed ^ 0x5bd1e995ULL, 1.0f / std::sqrt(static_cast<float>(i)), s);
  }
  // Host views of the listed experts, in list order. Each expert is downloaded (through a pinned
  // staging buffer) and converted once, then kept in a least-recently-used cache of at most
  // kCacheBytes, so the verification of later points reuses what earlier points fetched. (A
  // count cap that emptied the cache when full made a 128-expert bank miss on most requests.)
  [[nodiscard]] MlpView download(const std::vector<int>& which) const {
    MlpView v{hidden, inter, {}};
    const std::size_t s13 = static_cast<std::size_t>(2) * inter * hidden,
                      s2 = static_cast<std::size_t>(hidden) * inter;
    for (int e : which) {
      auto it = host_cache_.find(e);
      if (it == host_cache_.end()) {
        HostExpert h{fetch(w13.get() + e * s13, s13), fetch(w2.get() + e * s2, s2), {}};
        it = host_cache_.emplace(e, std::move(h)).first;
      } else {
        recency_.erase(it->second.recency);
      }
      recency_.push_front(e);
      it->second.recency = recency_.begin();
      v.experts.push_back({it->second.w13.data(), it->second.w2.data()});
    }
    // Evict the least recently used, never an expert of this request (the view points into it).
    const std::size_t expert_bytes = (s13 + s2) * sizeof(float);
    while (recency_.size() * expert_bytes > kCacheBytes && recency_.size() > which.size()) {
      host_cache_.erase(recency_.back());
      recency_.pop_back();
    }
    return v;
  }

 private:
  static constexpr std::size_t kCacheBytes = std::size_t{2} << 30;  // per bank
  struct HostExpert {
    std::vector<float> w13, w2;
    std::list<int>::iterator recency;
  };
  std::vector<float> fetch(const bf16* p, std::size_t n) const {
    if (staging_size_ < n) {
      staging_ = std::make_unique<PinnedBuffer<std::uint16_t>>(n);
      staging_size_ = n;
    }
    HARNESS_CHECK(cudaMemcpy(staging_->get(), p, n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> out(n);
    const std::uint16_t* raw = staging_->get();
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(raw[i]);
    return out;
  }
  mutable std::map<int, HostExpert> host_cache_;
  mutable std::list<int> recency_;  // the cached experts, most recent first
  mutable std::unique_ptr<PinnedBuffer<std::uint16_t>> staging_;
  mutable std::size_t staging_size_ = 0;
};

struct CudaWeights final : WeightSet {
  std::vector<std::unique_ptr<DeviceMlp>> banks;
};

// ---------------------------------------------------------------- experts engine

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

// The launch sequence of the `experts` component, with the routes it runs on.
class ExpertsEngine {
 public:
  // `native` runs NativeExperts; `cublas_grouped` the cuBLAS sequence below.
  ExpertsEngine(const ModelGeometry& g, const ExpertOwnership& own, int rows, cudaStream_t s,
                cublasHandle_t blas, bool native)
      : g_(g),
        own_(own),
        rows_(rows),
        s_(s),
        blas_(blas),
        lanes_(static_cast<std::size_t>(rows) * g.top_k),
        ids_(lanes_),
        weights_(lanes_),
        flag_(1) {
    if (native)
      native_ = std::make_unique<NativeExperts>(g, own, rows, native_tile_for(g, rows), s);
    else
      scratch_ = std::make_unique<CublasScratch>(g, own, lanes_);
    HARNESS_CHECK(cudaMemsetAsync(flag_.get(), 0, sizeof(int), s_));
  }

  void upload_routes(const Routes& r) {
    HARNESS_CHECK(cudaMemcpyAsync(ids_.get(), r.ids.data(), lanes_ * 4, cudaMemcpyHostToDevice, s_));
    HARNESS_CHECK(
        cudaMemcpyAsync(weights_.get(), r.weights.data(), lanes_ * 4, cudaMemcpyHostToDevice, s_));
    HARNESS_CHECK(cudaStreamSynchronize(s_));
  }

  void forward(const bf16* x, const DeviceMlp& w, bf16* out) {
    if (native_) {
      native_->forward(x, ids_.get(), weights_.get(), w.w13.get(), w.w2.get(), out, flag_.get());
      return;
    }
    CublasScratch& c = *scratch_;
    const int local = own_.local_experts, h = g_.hidden, inter = g_.intermediate, k = g_.top_k;
    HARNESS_CHECK(cudaMemsetAsync(c.counts.get(), 0, local * sizeof(int), s_));
    count_local<<<blocks_for(lanes_), 256, 0, s_>>>(
        ids_.get(), weights_.get(), static_cast<int>(lanes_), g_.experts, own_.first_expert, local,
        c.counts.get(), c.lane_expert.get(), c.lane_slot.get(), c.clean_weights.get(), flag_.get());
    HARNESS_CHECK(cudaGetLastError());
    auto** base = reinterpret_cast<void**>(c.ptrs.get());
    GroupPointers gp{const_cast<const void**>(base),
                     const_cast<const void**>(base + local),
                     base + 2 * local,
                     const_cast<const void**>(base + 3 * local),
                     const_cast<const void**>(base + 4 * local),
                     base + 5 * local};
    expert_offsets<<<1, 32, 0, s_>>>(c.counts.get(), local, c.offsets.get(), w.w13.get(),
                                     w.w2.get(), c.xp.get(), c.y1.get(), c.act.get(), c.y2.get(), h,
                                     inter, gp);
    HARNESS_CHECK(cudaGetLastError());
    // cuBLAS grouped GEMM takes group sizes on the host: this copy is part of the component.
    HARNESS_CHECK(cudaMemcpyAsync(c.host_counts.get(), c.counts.get(), local * sizeof(int),
                               cudaMemcpyDeviceToHost, s_));
    permute_rows<<<static_cast<unsigned>(lanes_), 128, 0, s_>>>(x, c.lane_expert.get(),
                                                                c.lane_slot.get(), c.offsets.get(),
                                                                k, h, c.xp.get(), c.lane_pos.get());
    HARNESS_CHECK(cudaGetLastError());
    HARNESS_CHECK(cudaStreamSynchronize(s_));
    std::vector<int> n_arr;
    std::size_t total = 0;
    for (int e = 0; e < local; ++e)
      if (c.host_counts.get()[e] > 0)
        n_arr.push_back(c.host_counts.get()[e]), total += n_arr.back();
    const int groups = static_cast<int>(n_arr.size());
    if (groups > 0) {
      const std::vector<cublasOperation_t> ta(groups, CUBLAS_OP_T), tb(groups, CUBLAS_OP_N);
      const std::vector<float> one(groups, 1.0f), zero(groups, 0.0f);
      const std::vector<int> sizes(groups, 1);
      const std::vector<int> m1(groups, 2 * inter), k1(groups, h), ld_h(groups, h),
          ld_2i(groups, 2 * inter);
      HARNESS_CHECK(cublasGemmGroupedBatchedEx(
          blas_, ta.data(), tb.data(), m1.data(), n_arr.data(), k1.data(), one.data(), gp.a1,
          CUDA_R_16BF, ld_h.data(), gp.b1, CUDA_R_16BF, ld_h.data(), zero.data(), gp.c1,
          CUDA_R_16BF, ld_2i.data(), groups, sizes.data(), CUBLAS_COMPUTE_32F));
      silu_and_mul<<<blocks_for(total * inter), 256, 0, s_>>>(c.y1.get(), total, inter,
                                                              c.act.get());
      HARNESS_CHECK(cudaGetLastError());
      const std::vector<int> m2(groups, h), k2(groups, inter), ld_i(groups, inter);
      HARNESS_CHECK(cublasGemmGroupedBatchedEx(
          blas_, ta.data(), tb.data(), m2.data(), n_arr.data(), k2.data(), one.data(), gp.a2,
          CUDA_R_16BF, ld_i.data(), gp.b2, CUDA_R_16BF, ld_i.data(), zero.data(), gp.c2,
          CUDA_R_16BF, ld_h.data(), groups, sizes.data(), CUBLAS_COMPUTE_32F));
    }
    combine_rows<<<static_cast<unsigned>(rows_), 128, 0, s_>>>(c.y2.get(), c.lane_pos.get(),
                                                               c.clean_weights.get(), k, h, out);
    HARNESS_CHECK(cudaGetLastError());
  }

  [[nodiscard]] bool take_flag() {
    int v = 0;
    HARNESS_CHECK(cudaMemcpyAsync(&v, flag_.get(), sizeof(int), cudaMemcpyDeviceToHost, s_));
    HARNESS_CHECK(cudaMemsetAsync(flag_.get(), 0, sizeof(int), s_));
    HARNESS_CHECK(cudaStreamSynchronize(s_));
    return v != 0;
  }

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

// ---------------------------------------------------------------- gate engine

// The gate_routing launch sequence (both backends): one cuBLAS bf16 GEMM of the router planes
// and x into fp32 logits, then softmax_topk. A bf16 router is one plane. An fp32 router is split
// once, at construction, into three bf16 planes whose sum is the fp32 weight exactly, stacked
// along the GEMM's M: every product is exact and accumulates in fp32, so the logits keep fp32
// semantics (softmax_topk adds the three plane logits) at the bf16 tensor-core rate, instead of
// an SGEMM on CUDA cores over an fp32 copy of x.
class GateEngine {
 public:
  // `router` is the device [E][H] router of g.router_dtype; a bf16 one must outlive the engine.
  GateEngine(const ModelGeometry& g, int rows, const void* router, cudaStream_t s,
             cublasHandle_t blas)
      : g_(g), rows_(rows), s_(s), blas_(blas) {
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
    logits_ = DeviceBuffer<float>(static_cast<std::size_t>(rows) * planes_ * g.experts);
  }

  void forward(const bf16* x, int* ids, float* weights, int* flag) {
    const float one = 1.0f, zero = 0.0f;
    const int m = planes_ * g_.experts;
    HARNESS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, rows_, g_.hidden, &one,
                              planes_ptr_, CUDA_R_16BF, g_.hidden, x, CUDA_R_16BF, g_.hidden, &zero,
                              logits_.get(), CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
    const int warps = 4;
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

 private:
  ModelGeometry g_;
  int rows_;
  cudaStream_t s_;
  cublasHandle_t blas_;
  int planes_ = 1;
  const bf16* planes_ptr_ = nullptr;  // [planes][E][H]
  DeviceBuffer<bf16> plane_buffer_;   // fp32 routers only
  DeviceBuffer<float> logits_;        // [rows][planes][E]
};

// ---------------------------------------------------------------- workloads

class CudaWorkload final : public Workload {
 public:
  CudaWorkload(const WorkloadSpec& spec, std::shared_ptr<const CudaWeights> weights, cudaStream_t s,
               cublasHandle_t blas, bool native)
      : spec_(spec),
        weights_(std::move(weights)),
        s_(s),
        blas_(blas),
        rows_(static_cast<int>(spec.point.tokens)),
        rng_(spec.seed) {
    const auto& g = spec.geometry;
    if (g.weight_dtype != Dtype::bf16)
      throw std::invalid_argument("the CUDA backends measure bf16 weights only");
    const std::size_t rh = static_cast<std::size_t>(rows_) * g.hidden;
    x_ = DeviceBuffer<bf16>(rh);
    fill(x_, spec.seed * 3 + 1, 1.0f, s_);
    flag_ = DeviceBuffer<int>(1);
    HARNESS_CHECK(cudaMemsetAsync(flag_.get(), 0, sizeof(int), s_));
    switch (spec.component) {
      case Component::gate_routing: {
        const std::size_t eh = static_cast<std::size_t>(g.experts) * g.hidden;
        const float scale = 1.0f / std::sqrt(static_cast<float>(g.hidden));
        if (g.router_dtype == Dtype::fp32) {
          router_f32_ = DeviceBuffer<float>(eh);
          fill(router_f32_, spec.seed * 3 + 2, scale, s_);
        } else {
          router_ = DeviceBuffer<bf16>(eh);
          fill(router_, spec.seed * 3 + 2, scale, s_);
        }
        gate_ = std::make_unique<GateEngine>(g, rows_,
                                             g.router_dtype == Dtype::fp32
                                                 ? static_cast<const void*>(router_f32_.get())
                                                 : static_cast<const void*>(router_.get()),
                                             s_, blas_);
        ids_ = DeviceBuffer<int>(static_cast<std::size_t>(rows_) * g.top_k);
        route_weights_ = DeviceBuffer<float>(static_cast<std::size_t>(rows_) * g.top_k);
        break;
      }
      case Component::experts: {
        own_ = ExpertOwnership::of(g, spec.target);
        routes_ = make_expert_routes(spec.point.tokens, spec.point.activated,
                                     spec.point.assignments, g, own_, rng_);
        engine_ = std::make_unique<ExpertsEngine>(g, own_, rows_, s_, blas_, native);
        engine_->upload_routes(routes_);
        out_ = DeviceBuffer<bf16>(rh);
        break;
      }
      case Component::finalize_copy:
        out_ = DeviceBuffer<bf16>(rh);
        break;
      case Component::wrapper:
        routed_ = DeviceBuffer<bf16>(rh);
        fill(routed_, spec.seed * 3 + 5, 1.0f, s_);
        y1_ = DeviceBuffer<bf16>(static_cast<std::size_t>(rows_) * 2 * g.shared.intermediate);
        act_ = DeviceBuffer<bf16>(static_cast<std::size_t>(rows_) * g.shared.intermediate);
        out_ = DeviceBuffer<bf16>(rh);
        break;
    }
    HARNESS_CHECK(cudaStreamSynchronize(s_));
  }

  void forward(int bank) override {
    const auto& g = spec_.geometry;
    switch (spec_.component) {
      case Component::gate_routing:
        gate_->forward(x_.get(), ids_.get(), route_weights_.get(), flag_.get());
        break;
      case Component::experts:
        engine_->forward(x_.get(), bank_(bank), out_.get());
        break;
      case Component::finalize_copy:
        HARNESS_CHECK(cudaMemcpyAsync(out_.get(), x_.get(), x_.size() * sizeof(bf16),
                                   cudaMemcpyDeviceToDevice, s_));
        break;
      case Component::wrapper:
        wrapper_forward(g);
        break;
    }
  }

  void synchronize() override { HARNESS_CHECK(cudaStreamSynchronize(s_)); }

  bool take_route_error() override {
    bool raised = false;
    if (engine_) raised = engine_->take_flag();
    if (spec_.component == Component::gate_routing) {
      int v = 0;
      HARNESS_CHECK(cudaMemcpyAsync(&v, flag_.get(), sizeof(int), cudaMemcpyDeviceToHost, s_));
      HARNESS_CHECK(cudaMemsetAsync(flag_.get(), 0, sizeof(int), s_));
      HARNESS_CHECK(cudaStreamSynchronize(s_));
      raised = raised || v != 0;
    }
    return raised;
  }

  std::vector<double> verify() override {
    std::vector<double> errors;
    const int banks =
        spec_.component == Component::experts ? static_cast<int>(weights_->banks.size()) : 1;
    for (int b = 0; b < banks; ++b) {
      poison();
      forward(b);
      synchronize();
      errors.push_back(compare(b));
    }
    return errors;
  }

 private:
  void poison() {
    if (out_.size()) HARNESS_CHECK(cudaMemsetAsync(out_.get(), 0xff, out_.size() * sizeof(bf16), s_));
    if (route_weights_.size())
      HARNESS_CHECK(cudaMemsetAsync(route_weights_.get(), 0xff, route_weights_.size() * 4, s_));
    if (ids_.size()) HARNESS_CHECK(cudaMemsetAsync(ids_.get(), 0xff, ids_.size() * 4, s_));
  }

  void wrapper_forward(const ModelGeometry& g) {
    const auto& w = bank_(0);
    const int si = g.shared.intermediate;
    const float one = 1.0f, zero = 0.0f;
    HARNESS_CHECK(cudaMemcpyAsync(out_.get(), routed_.get(), out_.size() * sizeof(bf16),
                               cudaMemcpyDeviceToDevice, s_));
    for (int e = 0; e < g.shared.count; ++e) {
      const bf16* w13 = w.w13.get() + static_cast<std::size_t>(e) * 2 * si * g.hidden;
      const bf16* w2 = w.w2.get() + static_cast<std::size_t>(e) * g.hidden * si;
      HARNESS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, 2 * si, rows_, g.hidden, &one, w13,
                                CUDA_R_16BF, g.hidden, x_.get(), CUDA_R_16BF, g.hidden, &zero,
                                y1_.get(), CUDA_R_16BF, 2 * si, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
      silu_and_mul<<<blocks_for(static_cast<std::size_t>(rows_) * si), 256, 0, s_>>>(
          y1_.get(), rows_, si, act_.get());
      HARNESS_CHECK(cudaGetLastError());
      // out = act * W2^T + out: the combine with the routed output rides on beta = 1.
      HARNESS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, g.hidden, rows_, si, &one, w2,
                                CUDA_R_16BF, si, act_.get(), CUDA_R_16BF, si, &one, out_.get(),
                                CUDA_R_16BF, g.hidden, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }

  std::vector<float> rows_of(const bf16* p, const std::vector<int>& rows, int width) const {
    std::vector<float> out;
    for (int r : rows) {
      auto v = download_bf16(p + static_cast<std::size_t>(r) * width, width);
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }

  double compare(int bank) {
    const auto& g = spec_.geometry;
    const int h = g.hidden;
    switch (spec_.component) {
      case Component::gate_routing: {
        const auto rows = sample_rows(rows_, 16, {});
        const auto x = rows_of(x_.get(), rows, h);
        const auto router = g.router_dtype == Dtype::fp32
                                ? download_f32(router_f32_.get(), router_f32_.size())
                                : download_bf16(router_.get(), router_.size());
        Routes want;
        gate_routing_ref(x, static_cast<int>(rows.size()), router, g, want);
        const auto ids = [&] {
          std::vector<int> all(ids_.size());
          HARNESS_CHECK(cudaMemcpy(all.data(), ids_.get(), all.size() * 4, cudaMemcpyDeviceToHost));
          return all;
        }();
        const auto weights = download_f32(route_weights_.get(), route_weights_.size());
        // Dense [row][E] weight maps: an order-insensitive comparison of the routes.
        std::vector<float> got_dense(rows.size() * g.experts, 0.0f),
            want_dense(got_dense.size(), 0.0f);
        for (std::size_t i = 0; i < rows.size(); ++i)
          for (int j = 0; j < g.top_k; ++j) {
            const int gid = ids[static_cast<std::size_t>(rows[i]) * g.top_k + j];
            if (gid < 0 || gid >= g.experts) return INFINITY;
            got_dense[i * g.experts + gid] +=
                weights[static_cast<std::size_t>(rows[i]) * g.top_k + j];
            want_dense[i * g.experts + want.ids[i * g.top_k + j]] += want.weights[i * g.top_k + j];
          }
        return relative_error(got_dense, want_dense);
      }
      case Component::experts: {
        std::vector<int> preferred;
        for (int r = 0; r < rows_; ++r)
          for (int j = 0; j < g.top_k; ++j)
            if (own_.owns(routes_.ids[static_cast<std::size_t>(r) * g.top_k + j])) {
              preferred.push_back(r);
              break;
            }
        // Two rows against bank 0, one row against every other bank.
        const auto rows = sample_rows(rows_, bank == 0 ? 2 : 1, preferred);
        // Sub-problem over the sampled rows, local experts compacted in first-use order.
        Routes sub{static_cast<int>(rows.size()), g.top_k, {}, {}};
        std::vector<int> experts_used;
        for (int r : rows)
          for (int j = 0; j < g.top_k; ++j) {
            const int id = routes_.ids[static_cast<std::size_t>(r) * g.top_k + j];
            int mapped = -1;
            if (own_.owns(id)) {
              const int e = id - own_.first_expert;
              auto it = std::find(experts_used.begin(), experts_used.end(), e);
              if (it == experts_used.end()) experts_used.push_back(e), it = experts_used.end() - 1;
              mapped = static_cast<int>(it - experts_used.begin());
            }
            sub.ids.push_back(mapped);
            sub.weights.push_back(routes_.weights[static_cast<std::size_t>(r) * g.top_k + j]);
          }
        const auto w = bank_(bank).download(experts_used);
        const auto x = rows_of(x_.get(), rows, h);
        std::vector<float> want(rows.size() * h);
        experts_ref(x, sub, w, 0, want, Intermediates::bf16);
        return relative_error(rows_of(out_.get(), rows, h), want);
      }
      case Component::finalize_copy: {
        const auto rows = sample_rows(rows_, 64, {});
        return relative_error(rows_of(out_.get(), rows, h), rows_of(x_.get(), rows, h));
      }
      case Component::wrapper: {
        const auto rows = sample_rows(rows_, 4, {});
        std::vector<int> all(static_cast<std::size_t>(g.shared.count));
        std::iota(all.begin(), all.end(), 0);
        const auto w = bank_(0).download(all);
        std::vector<float> want(rows.size() * h);
        wrapper_ref(rows_of(x_.get(), rows, h), static_cast<int>(rows.size()),
                    rows_of(routed_.get(), rows, h), w, want, Intermediates::bf16);
        return relative_error(rows_of(out_.get(), rows, h), want);
      }
    }
    return INFINITY;
  }

  [[nodiscard]] const DeviceMlp& bank_(int bank) const {
    return *weights_->banks.at(static_cast<std::size_t>(bank) % weights_->banks.size());
  }

  WorkloadSpec spec_;
  std::shared_ptr<const CudaWeights> weights_;
  cudaStream_t s_;
  cublasHandle_t blas_;
  int rows_;
  Rng rng_;
  ExpertOwnership own_{};
  Routes routes_;
  DeviceBuffer<bf16> x_, router_, routed_, out_, y1_, act_;
  DeviceBuffer<float> router_f32_, route_weights_;
  DeviceBuffer<int> ids_, flag_;
  std::unique_ptr<ExpertsEngine> engine_;
  std::unique_ptr<GateEngine> gate_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::string name, int device) : name_(std::move(name)), device_(device) {
    if (!known_cuda_backend(name_))
      throw std::invalid_argument("unknown CUDA backend '" + name_ +
                                  "' (this build provides cublas_grouped, native)");
    HARNESS_CHECK(cudaSetDevice(device_));
    HARNESS_CHECK(cudaGetDeviceProperties(&props_, device_));
    stream_ = std::make_unique<Stream>();
    blas_ = std::make_unique<Cublas>(stream_->get());
  }
  std::string name() const override { return name_; }
  std::string timing() const override { return "cupti_activity"; }
  std::int64_t cache_bytes() const override { return props_.l2CacheSize; }
  double tolerance() const override { return 1e-2; }
  std::shared_ptr<const WeightSet> make_weights(const WorkloadSpec& spec) override {
    HARNESS_CHECK(cudaSetDevice(device_));
    const auto& g = spec.geometry;
    auto w = std::make_shared<CudaWeights>();
    if (spec.component == Component::experts) {
      const auto own = ExpertOwnership::of(g, spec.target);
      for (int b = 0; b < spec.banks; ++b)
        w->banks.push_back(std::make_unique<DeviceMlp>(
            own.local_experts, g.hidden, g.intermediate,
            spec.seed * 7919 + static_cast<std::uint64_t>(b), stream_->get()));
    } else if (spec.component == Component::wrapper) {
      w->banks.push_back(std::make_unique<DeviceMlp>(
          g.shared.count, g.hidden, g.shared.intermediate, spec.seed * 3 + 6, stream_->get()));
    }
    HARNESS_CHECK(cudaStreamSynchronize(stream_->get()));
    return w;
  }

  std::unique_ptr<Workload> make(const WorkloadSpec& spec,
                                 std::shared_ptr<const WeightSet> weights) override {
    HARNESS_CHECK(cudaSetDevice(device_));
    auto w = std::dynamic_pointer_cast<const CudaWeights>(weights);
    if (!w) throw std::invalid_argument("CUDA workload given weights of another backend");
    return std::make_unique<CudaWorkload>(spec, std::move(w), stream_->get(), blas_->get(),
                                          name_ == "native");
  }
  std::map<std::string, std::string> live_state() const override {
    const Nvml* nvml = Nvml::get();
    if (!nvml) return {{"nvml", "unavailable"}};
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof(bus), device_);
    Nvml::Device dev{};
    if (nvml->handle_by_bus(bus, &dev) != 0) return {{"nvml", "no handle for " + std::string(bus)}};
    std::map<std::string, std::string> out;
    unsigned sm = 0, mem = 0, temp = 0;
    if (nvml->clock(dev, 1, &sm) == 0) out["sm_clock_mhz"] = std::to_string(sm);
    if (nvml->clock(dev, 2, &mem) == 0) out["mem_clock_mhz"] = std::to_string(mem);
    if (nvml->temperature(dev, 0, &temp) == 0) out["temperature_c"] = std::to_string(temp);
    unsigned count = 64;
    Nvml::ProcessInfo procs[64];
    if (nvml->processes(dev, &count, procs) == 0) {
      std::string pids;
      for (unsigned i = 0; i < count; ++i) {
        if (i) pids.push_back(',');
        pids.append(std::to_string(procs[i].pid));
      }
      out["gpu_processes"] = pids;
    }
    return out;
  }

  std::map<std::string, std::string> device_properties() const override {
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof(bus), device_);
    char uuid[48];
    const auto* u = reinterpret_cast<const unsigned char*>(props_.uuid.bytes);
    std::snprintf(uuid, sizeof(uuid),
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                  u[14], u[15]);
    int driver = 0, runtime = 0, blas_version = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    cublasGetVersion(blas_->get(), &blas_version);
    return {{"device", props_.name},
            {"uuid", uuid},
            {"pci_bus_id", bus},
            {"device_index", std::to_string(device_)},
            {"sm_count", std::to_string(props_.multiProcessorCount)},
            {"l2_bytes", std::to_string(props_.l2CacheSize)},
            {"cuda_driver_version", std::to_string(driver)},
            {"cuda_runtime_version", std::to_string(runtime)},
            {"cublas_version", std::to_string(blas_version)}};
  }

 private:
  std::string name_;
  int device_;
  cudaDeviceProp props_{};
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Cublas> blas_;
};

// Captures what `enqueue` queues on `s` into a CUDA graph, launches it once and waits for it.
template <class Enqueue>
void run_as_graph(cudaStream_t s, const Enqueue& enqueue) {
  HARNESS_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(s, &graph);  // leave capture mode before unwinding
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  HARNESS_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  HARNESS_CHECK(made);
  const cudaError_t launched = cudaGraphLaunch(exec, s);
  const cudaError_t synced = cudaStreamSynchronize(s);
  cudaGraphExecDestroy(exec);
  HARNESS_CHECK(launched);
  HARNESS_CHECK(synced);
}

DeviceBuffer<bf16> upload_bf16(const std::vector<float>& v) {
  DeviceBuffer<bf16> d(v.size());
  std::vector<std::uint16_t> raw(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) raw[i] = float_to_bf16_bits(v[i]);
  if (!v.empty())
    HARNESS_CHECK(cudaMemcpy(d.get(), raw.data(), raw.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const std::string& name, int device) {
  return std::make_unique<CudaBackend>(name, device);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

DeviceExpertsResult run_experts_on_device(const std::string& backend, int device,
                                          const ModelGeometry& g, const Target& t,
                                          const std::vector<float>& x, const Routes& routes,
                                          const MlpWeights& w, bool via_graph) {
  if (!known_cuda_backend(backend))
    throw std::invalid_argument("unknown CUDA backend '" + backend + "'");
  HARNESS_CHECK(cudaSetDevice(device));
  Stream stream;
  Cublas blas(stream.get());
  const auto own = ExpertOwnership::of(g, t);
  DeviceMlp mlp(own.local_experts, g.hidden, g.intermediate, 1, stream.get());
  HARNESS_CHECK(cudaStreamSynchronize(stream.get()));
  mlp.w13 = upload_bf16(w.w13);
  mlp.w2 = upload_bf16(w.w2);
  auto dx = upload_bf16(x);
  DeviceBuffer<bf16> out(x.size());
  HARNESS_CHECK(cudaMemset(out.get(), 0xff, out.size() * 2));
  // Copies from pageable memory on the legacy stream may still be landing, and the engine's
  // stream does not wait for that stream.
  HARNESS_CHECK(cudaDeviceSynchronize());
  ExpertsEngine engine(g, own, routes.rows, stream.get(), blas.get(), backend == "native");
  engine.upload_routes(routes);
  engine.forward(dx.get(), mlp, out.get());
  HARNESS_CHECK(cudaStreamSynchronize(stream.get()));
  if (via_graph) {
    HARNESS_CHECK(cudaMemsetAsync(out.get(), 0xff, out.size() * 2, stream.get()));
    run_as_graph(stream.get(), [&] { engine.forward(dx.get(), mlp, out.get()); });
  }
  DeviceExpertsResult r;
  r.route_error = engine.take_flag();
  r.out = download_bf16(out.get(), out.size());
  return r;
}

DeviceGateResult run_gate_on_device(const std::string& backend, int device, const ModelGeometry& g,
                                    const std::vector<float>& x, const std::vector<float>& router,
                                    bool via_graph) {
  if (!known_cuda_backend(backend))
    throw std::invalid_argument("unknown CUDA backend '" + backend + "'");
  HARNESS_CHECK(cudaSetDevice(device));
  Stream stream;
  Cublas blas(stream.get());
  const int rows = static_cast<int>(x.size() / g.hidden);
  auto dx = upload_bf16(x);
  DeviceBuffer<bf16> router_bf16;
  DeviceBuffer<float> router_f32;
  const void* router_ptr = nullptr;
  if (g.router_dtype == Dtype::fp32) {
    router_f32 = DeviceBuffer<float>(router.size());
    HARNESS_CHECK(
        cudaMemcpy(router_f32.get(), router.data(), router.size() * 4, cudaMemcpyHostToDevice));
    router_ptr = router_f32.get();
  } else {
    router_bf16 = upload_bf16(router);
    router_ptr = router_bf16.get();
  }
  const std::size_t lanes = static_cast<std::size_t>(rows) * g.top_k;
  DeviceBuffer<int> ids(lanes), flag(1);
  DeviceBuffer<float> weights(lanes);
  // The uploads above ran on the legacy stream, which the engine's stream does not wait for.
  HARNESS_CHECK(cudaDeviceSynchronize());
  GateEngine engine(g, rows, router_ptr, stream.get(), blas.get());
  const auto poison = [&] {
    HARNESS_CHECK(cudaMemsetAsync(ids.get(), 0x7f, lanes * 4, stream.get()));
    HARNESS_CHECK(cudaMemsetAsync(weights.get(), 0xff, lanes * 4, stream.get()));
    HARNESS_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(int), stream.get()));
  };
  const auto enqueue = [&] { engine.forward(dx.get(), ids.get(), weights.get(), flag.get()); };
  poison();
  if (via_graph) {
    enqueue();  // a direct forward first, as a workload would run before capturing
    poison();
    run_as_graph(stream.get(), enqueue);
  } else {
    enqueue();
  }
  HARNESS_CHECK(cudaStreamSynchronize(stream.get()));
  DeviceGateResult r;
  r.routes = Routes{rows, g.top_k, std::vector<int>(lanes), download_f32(weights.get(), lanes)};
  if (lanes)
    HARNESS_CHECK(cudaMemcpy(r.routes.ids.data(), ids.get(), lanes * 4, cudaMemcpyDeviceToHost));
  int raised = 0;
  HARNESS_CHECK(cudaMemcpy(&raised, flag.get(), sizeof(int), cudaMemcpyDeviceToHost));
  r.route_error = raised != 0;
  return r;
}

}  // namespace moe
