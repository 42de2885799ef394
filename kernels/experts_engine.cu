#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda_common.cuh"
#include "kernels/device_helpers.h"
#include "kernels/experts_engine.cuh"

namespace moe::cuda {

namespace {

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

}  // namespace

namespace {

// The local rows of each active local expert of `r` (their mean is the grid's M / A).
std::vector<int> active_expert_rows(const Routes& r, const ExpertOwnership& own) {
  std::vector<int> count(static_cast<std::size_t>(own.local_experts), 0);
  for (const int id : r.ids)
    if (own.owns(id)) ++count[static_cast<std::size_t>(id - own.first_expert)];
  std::erase(count, 0);
  return count;
}

// The tile by cost, or HARNESS_NATIVE_TILE=narrow|medium|wide80|...|split160: a diagnostic that
// forces one tile (the per-tile sweeps of docs/native-backend.md#tile-choice measure each tile's
// cost this way).
NativeTile tile_for(double rows_per_expert) {
  if (const char* forced = std::getenv("HARNESS_NATIVE_TILE")) {
    std::string names;
    for (const auto& tiles : {std::span<const NativeTile>(kNativeTiles),
                              std::span<const NativeTile>(kNativeExperimentTiles)})
      for (const auto t : tiles) {
        if (std::string(forced) == to_string(t)) return t;
        names += std::string(names.empty() ? "" : ", ") + to_string(t);
      }
    throw std::invalid_argument(std::string("HARNESS_NATIVE_TILE=") + forced +
                                ": expected one of " + names);
  }
  return native_tile_for(rows_per_expert);
}

}  // namespace

ExpertsEngine::ExpertsEngine(const ModelGeometry& g, const ExpertOwnership& own,
                             const Routes& routes, cudaStream_t s, cublasHandle_t blas, bool native)
    : g_(g),
      own_(own),
      rows_(routes.rows),
      s_(s),
      blas_(blas),
      lanes_(static_cast<std::size_t>(routes.rows) * g.top_k),
      ids_(lanes_),
      weights_(lanes_),
      flag_(1) {
  if (native) {
    const auto expert_rows = active_expert_rows(routes, own);
    native_ = std::make_unique<NativeExperts>(
        g, own, rows_, tile_for(native_rows_per_expert(expert_rows)), expert_rows, s);
  } else
    scratch_ = std::make_unique<CublasScratch>(g, own, lanes_);
  HARNESS_CHECK(cudaMemsetAsync(flag_.get(), 0, sizeof(int), s_));
}

void ExpertsEngine::upload_routes(const Routes& r) {
  HARNESS_CHECK(cudaMemcpyAsync(ids_.get(), r.ids.data(), lanes_ * 4, cudaMemcpyHostToDevice, s_));
  HARNESS_CHECK(
      cudaMemcpyAsync(weights_.get(), r.weights.data(), lanes_ * 4, cudaMemcpyHostToDevice, s_));
  HARNESS_CHECK(cudaStreamSynchronize(s_));
}

void ExpertsEngine::forward(const bf16* x, const DeviceMlp& w, bf16* out) {
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
  expert_offsets<<<1, 32, 0, s_>>>(c.counts.get(), local, c.offsets.get(), w.w13.get(), w.w2.get(),
                                   c.xp.get(), c.y1.get(), c.act.get(), c.y2.get(), h, inter, gp);
  HARNESS_CHECK(cudaGetLastError());
  // cuBLAS grouped GEMM takes group sizes on the host: this copy is part of the component.
  HARNESS_CHECK(cudaMemcpyAsync(c.host_counts.get(), c.counts.get(), local * sizeof(int),
                                cudaMemcpyDeviceToHost, s_));
  permute_rows<<<static_cast<unsigned>(lanes_), 128, 0, s_>>>(x, c.lane_expert.get(),
                                                              c.lane_slot.get(), c.offsets.get(), k,
                                                              h, c.xp.get(), c.lane_pos.get());
  HARNESS_CHECK(cudaGetLastError());
  HARNESS_CHECK(cudaStreamSynchronize(s_));
  std::vector<int> n_arr;
  std::size_t total = 0;
  for (int e = 0; e < local; ++e)
    if (c.host_counts.get()[e] > 0) n_arr.push_back(c.host_counts.get()[e]), total += n_arr.back();
  const int groups = static_cast<int>(n_arr.size());
  if (groups > 0) {
    const std::vector<cublasOperation_t> ta(groups, CUBLAS_OP_T), tb(groups, CUBLAS_OP_N);
    const std::vector<float> one(groups, 1.0f), zero(groups, 0.0f);
    const std::vector<int> sizes(groups, 1);
    const std::vector<int> m1(groups, 2 * inter), k1(groups, h), ld_h(groups, h),
        ld_2i(groups, 2 * inter);
    HARNESS_CHECK(cublasGemmGroupedBatchedEx(
        blas_, ta.data(), tb.data(), m1.data(), n_arr.data(), k1.data(), one.data(), gp.a1,
        CUDA_R_16BF, ld_h.data(), gp.b1, CUDA_R_16BF, ld_h.data(), zero.data(), gp.c1, CUDA_R_16BF,
        ld_2i.data(), groups, sizes.data(), CUBLAS_COMPUTE_32F));
    silu_and_mul<<<blocks_for(total * inter), 256, 0, s_>>>(c.y1.get(), total, inter, c.act.get());
    HARNESS_CHECK(cudaGetLastError());
    const std::vector<int> m2(groups, h), k2(groups, inter), ld_i(groups, inter);
    HARNESS_CHECK(cublasGemmGroupedBatchedEx(
        blas_, ta.data(), tb.data(), m2.data(), n_arr.data(), k2.data(), one.data(), gp.a2,
        CUDA_R_16BF, ld_i.data(), gp.b2, CUDA_R_16BF, ld_i.data(), zero.data(), gp.c2, CUDA_R_16BF,
        ld_h.data(), groups, sizes.data(), CUBLAS_COMPUTE_32F));
  }
  combine_rows<<<static_cast<unsigned>(rows_), 128, 0, s_>>>(c.y2.get(), c.lane_pos.get(),
                                                             c.clean_weights.get(), k, h, out);
  HARNESS_CHECK(cudaGetLastError());
}

std::string ExpertsEngine::configuration() const {
  return native_ ? native_->configuration() : "cuBLAS grouped GEMMs";
}

bool ExpertsEngine::take_flag() {
  int v = 0;
  HARNESS_CHECK(cudaMemcpyAsync(&v, flag_.get(), sizeof(int), cudaMemcpyDeviceToHost, s_));
  HARNESS_CHECK(cudaMemsetAsync(flag_.get(), 0, sizeof(int), s_));
  HARNESS_CHECK(cudaStreamSynchronize(s_));
  return v != 0;
}

}  // namespace moe::cuda
