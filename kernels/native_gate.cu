#include <cooperative_groups.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/device_helpers.h"
#include "kernels/native_gate.h"

namespace moe::cuda {

namespace {

constexpr int kMaxSplits = 16;  // the largest (non-portable) cluster size of sm_90
constexpr int kTokensPerPass = 4;  // tokens a warp routes at once

struct GateArgs {
  const bf16* x;  // [rows][hidden]
  const bf16* w;  // [experts][k_total], k_total = planes * hidden
  int rows, experts, hidden, k_total, top_k;
  bool renormalize;
  int* ids;
  float* weights;
  int* flag;
};

// CTA tile: kRows token rows x all experts (padded to kE), K in steps of kBK through kStages
// cp.async stages. 8 warps: kRowWarps along rows (16 each) x the rest along experts.
template <int kRowWarps_, int kE_>
struct GateConfig {
  static constexpr int kThreads = 256, kWarps = 8, kRowWarps = kRowWarps_,
                       kExpertWarps = kWarps / kRowWarps;
  static constexpr int kRows = 16 * kRowWarps, kE = kE_, kBK = 64, kChunks = kBK / 8, kStages = 4;
  static constexpr int kWarpExperts = kE / kExpertWarps, kNT = kWarpExperts / 8;
  static constexpr int kStageX = kRows * kBK, kStageW = kE * kBK;  // elements
  static constexpr int kXLoads = kRows * kChunks / kThreads, kWLoads = kE * kChunks / kThreads;
  static constexpr int kLogitStride = kE + 4;  // fp32 partial logits, padded
  static constexpr int kPipeBytes = kStages * (kStageX + kStageW) * 2;
  // A CTA owns ceil(kRows / S) rows x S partials of kE logits: at most kRows + S rows.
  static constexpr int kLogitBytes = (kRows + kMaxSplits) * kLogitStride * 4;
  static constexpr int kSmemBytes = kPipeBytes > kLogitBytes ? kPipeBytes : kLogitBytes;
  static constexpr int kPerLane = kE / 32;
  static_assert(kNT % 2 == 0, "B fragments come in pairs of n8 tiles");
  static_assert(kRows * kChunks % kThreads == 0 && kE * kChunks % kThreads == 0,
                "every thread issues the same number of copies");
};
template <int kE>
using GateNarrow = GateConfig<2, kE>;  // 32 rows: more clusters for fewer tokens
template <int kE>
using GateWide = GateConfig<4, kE>;  // 64 rows: half the router re-reads per token

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) route_tokens(GateArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  extern __shared__ __align__(128) unsigned char gate_smem[];
  bf16* smem = reinterpret_cast<bf16*>(gate_smem);
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int wr = warp % C::kRowWarps, we = warp / C::kRowWarps;
  const int row0 = static_cast<int>(blockIdx.x) * C::kRows;
  const int split = static_cast<int>(cluster.block_rank());
  const int splits = static_cast<int>(cluster.num_blocks());
  const int steps_total = (a.k_total + C::kBK - 1) / C::kBK;
  const int first = split * steps_total / splits;
  const int steps = (split + 1) * steps_total / splits - first;

  // This thread's copies: x rows past the table and experts past E are zero-filled.
  const bf16* x_src[C::kXLoads];
  const bf16* w_src[C::kWLoads];
  bool x_ok[C::kXLoads], w_ok[C::kWLoads];
  int x_dst[C::kXLoads], w_dst[C::kWLoads];
  const int chunk = tid % C::kChunks;  // the same for every copy: kThreads is a multiple
#pragma unroll
  for (int i = 0; i < C::kXLoads; ++i) {
    const int r = (tid + i * C::kThreads) / C::kChunks;
    x_ok[i] = row0 + r < a.rows;
    x_src[i] = a.x + static_cast<std::int64_t>(x_ok[i] ? row0 + r : 0) * a.hidden;
    x_dst[i] = swizzled<C::kBK>(r, chunk);
  }
#pragma unroll
  for (int i = 0; i < C::kWLoads; ++i) {
    const int e = (tid + i * C::kThreads) / C::kChunks;
    w_ok[i] = e < a.experts;
    w_src[i] = a.w + static_cast<std::int64_t>(w_ok[i] ? e : 0) * a.k_total;
    w_dst[i] = swizzled<C::kBK>(e, chunk);
  }
  auto stage_x = [&](int stage) { return smem + stage * (C::kStageX + C::kStageW); };
  const auto load = [&](int stage, int i) {
    bf16* sx = stage_x(stage);
    bf16* sw = sx + C::kStageX;
    const int k0 = (first + i) * C::kBK + chunk * 8;
    const int xk = k0 % a.hidden;  // router planes reuse the x row (H is a multiple of kBK then)
#pragma unroll
    for (int j = 0; j < C::kXLoads; ++j) {
      const bool ok = x_ok[j] && k0 < a.k_total;
      cp_async16(sx + x_dst[j], ok ? x_src[j] + xk : a.x, ok);
    }
#pragma unroll
    for (int j = 0; j < C::kWLoads; ++j) {
      const bool ok = w_ok[j] && k0 < a.k_total;
      cp_async16(sw + w_dst[j], ok ? w_src[j] + k0 : a.w, ok);
    }
  };

  float acc[C::kNT][4] = {};
  cp_async_pipeline<C::kStages>(steps, load, [&](int stage) {
    const bf16* sx = stage_x(stage);
    const bf16* sw = sx + C::kStageX;
#pragma unroll
    for (int ks = 0; ks < C::kBK / 16; ++ks) {
      unsigned af[4];
      load_a_fragment<C::kBK>(af, sx, wr * 16, 2 * ks, lane);
#pragma unroll
      for (int p = 0; p < C::kNT / 2; ++p) {
        unsigned b0[2], b1[2];
        load_b_fragments<C::kBK>(b0, b1, sw, we * C::kWarpExperts + p * 16, 2 * ks, lane);
        mma_bf16(acc[2 * p], af, b0[0], b0[1]);
        mma_bf16(acc[2 * p + 1], af, b1[0], b1[1]);
      }
    }
  });
  cp_async_wait<0>();
  cluster.sync();  // every CTA of the cluster is done with its stages: they can take partials

  // Row r of the tile belongs to CTA r % S, which keeps the S partial logit rows of its rows
  // ([r / S][split][expert]); each CTA pushes its partials there (remote stores do not wait).
  float* partials = reinterpret_cast<float*>(gate_smem);
  const int group = lane >> 2, pair = (lane & 3) * 2;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = wr * 16 + group + 8 * h;
    float* dst = cluster.map_shared_rank(partials, r % splits) +
                 ((r / splits) * splits + split) * C::kLogitStride + we * C::kWarpExperts + pair;
#pragma unroll
    for (int n = 0; n < C::kNT; ++n)
      *reinterpret_cast<float2*>(dst + 8 * n) = make_float2(acc[n][2 * h], acc[n][2 * h + 1]);
  }
  cluster.sync();  // every partial has landed

  // This CTA's rows, kTokensPerPass per warp at a time; partials summed in split order.
  const int owned = (C::kRows - split + splits - 1) / splits;
  for (int base = warp * kTokensPerPass; base < owned; base += C::kWarps * kTokensPerPass) {
    float v[kTokensPerPass][C::kPerLane];
    int row[kTokensPerPass];
#pragma unroll
    for (int i = 0; i < kTokensPerPass; ++i) {
      const int j = base + i, r = split + j * splits;
      row[i] = j < owned && row0 + r < a.rows ? row0 + r : -1;
#pragma unroll
      for (int q = 0; q < C::kPerLane; ++q) v[i][q] = 0.0f;
      if (row[i] < 0) continue;
      for (int s = 0; s < splits; ++s) {
        const float* part = partials + (j * splits + s) * C::kLogitStride;
#pragma unroll
        for (int q = 0; q < C::kPerLane; ++q) v[i][q] += part[lane + 32 * q];
      }
    }
    route_tokens_of_warp(v, row, a.experts, a.top_k, a.renormalize, lane, a.ids, a.weights,
                         a.flag);
  }
#else
  (void)a;  // NativeGate::covers() keeps other architectures off this kernel
#endif
}

// fp32 router [E][H] -> three bf16 planes per expert row, [E][3][H], with hi + mid + lo == w:
// each plane holds the next 8 significant bits of the remainder (24 in all, fp32's precision).
__global__ void split_router_planes(const float* w, std::int64_t n, int hidden, bf16* planes) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t e = i / hidden, c = i % hidden;
    const float v = w[i];
    const bf16 hi = __float2bfloat16_rn(v);
    const float r1 = v - __bfloat162float(hi);
    const bf16 mid = __float2bfloat16_rn(r1);
    const bf16 lo = __float2bfloat16_rn(r1 - __bfloat162float(mid));
    bf16* row = planes + e * 3 * hidden;
    row[c] = hi;
    row[hidden + c] = mid;
    row[2 * hidden + c] = lo;
  }
}

// Launch configuration of `tiles` clusters of `splits` CTAs (cfg points into this object).
template <class C>
struct ClusterLaunch {
  cudaLaunchAttribute cluster{};
  cudaLaunchConfig_t cfg{};
  ClusterLaunch(int tiles, int splits, cudaStream_t s) {
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 1;
    cluster.val.clusterDim.y = static_cast<unsigned>(splits);
    cluster.val.clusterDim.z = 1;
    cfg.gridDim = dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
    cfg.blockDim = dim3(C::kThreads);
    cfg.dynamicSmemBytes = C::kSmemBytes;
    cfg.stream = s;
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

template <class C>
void launch(const GateArgs& a, int tiles, int splits, cudaStream_t s) {
  const ClusterLaunch<C> l(tiles, splits, s);
  CUDA_CHECK(cudaLaunchKernelEx(&l.cfg, route_tokens<C>, a));
}

// Opts the kernel into its shared memory and returns the largest cluster size up to `splits`
// (halving) of which this device can hold at least one cluster.
template <class C>
int prepare(int tiles, int splits) {
  CUDA_CHECK(cudaFuncSetAttribute(route_tokens<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  C::kSmemBytes));
  CUDA_CHECK(
      cudaFuncSetAttribute(route_tokens<C>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (; splits > 1; splits /= 2) {
    const ClusterLaunch<C> l(tiles, splits, nullptr);
    int clusters = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, route_tokens<C>, &l.cfg));
    if (clusters > 0) break;
  }
  return splits;
}

int rows_of_tile(bool wide) {
  return wide ? GateWide<128>::kRows : GateNarrow<128>::kRows;
}

}  // namespace

bool NativeGate::covers(const ModelGeometry& g) {
  if (g.experts < 1 || g.experts > 256 || g.top_k < 1 || g.top_k > 32 || g.top_k > g.experts ||
      g.hidden % 8 != 0)
    return false;
  if (g.router_dtype == Dtype::fp32 && g.hidden % GateWide<128>::kBK != 0) return false;
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      major < 9)
    return false;
  // The image this device runs must have been compiled for sm_90 or later (clusters).
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, route_tokens<GateWide<128>>) == cudaSuccess &&
         attr.binaryVersion >= 90;
}

NativeGate::NativeGate(const ModelGeometry& g, int rows, const void* router, cudaStream_t s)
    : g_(g), rows_(rows), s_(s) {
  if (!covers(g))
    throw std::invalid_argument("the native gate does not cover " + g.name +
                                " on this device (needs sm_90, E <= 256, k <= 32, H % 8 == 0)");
  if (g.router_dtype == Dtype::fp32) {
    planes_ = 3;
    const std::int64_t n = static_cast<std::int64_t>(g.experts) * g.hidden;
    planes_buffer_ = DeviceBuffer<bf16>(static_cast<std::size_t>(3 * n));
    split_router_planes<<<static_cast<unsigned>(std::min<std::int64_t>((n + 255) / 256, 65535)),
                          256, 0, s_>>>(static_cast<const float*>(router), n, g.hidden,
                                        planes_buffer_.get());
    CUDA_CHECK(cudaGetLastError());
    router_ = planes_buffer_.get();
  } else {
    router_ = static_cast<const bf16*>(router);
  }
  // Wide tiles once there are enough rows to fill the GPU with 8-CTA clusters of them.
  const bool wide = rows >= 1024;
  tile_rows_ = rows_of_tile(wide);
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int tiles = (rows + tile_rows_ - 1) / tile_rows_;
  const int steps = (planes_ * g.hidden + GateWide<128>::kBK - 1) / GateWide<128>::kBK;
  // Enough CTAs for every SM, at most the portable cluster size, at least two K steps each.
  const int splits =
      std::clamp(sms / std::max(1, tiles), 1, std::min(kMaxSplits, std::max(1, steps / 2)));
  if (g.experts <= 128)
    splits_ =
        wide ? prepare<GateWide<128>>(tiles, splits) : prepare<GateNarrow<128>>(tiles, splits);
  else
    splits_ =
        wide ? prepare<GateWide<256>>(tiles, splits) : prepare<GateNarrow<256>>(tiles, splits);
}

void NativeGate::forward(const bf16* x, int* ids, float* weights, int* flag) {
  if (rows_ == 0) return;
  const GateArgs a{x,        router_,        rows_, g_.experts, g_.hidden, planes_ * g_.hidden,
                   g_.top_k, g_.renormalize, ids,   weights,    flag};
  const int tiles = (rows_ + tile_rows_ - 1) / tile_rows_;
  const bool wide = tile_rows_ == GateWide<128>::kRows;
  if (g_.experts <= 128) {
    wide ? launch<GateWide<128>>(a, tiles, splits_, s_)
         : launch<GateNarrow<128>>(a, tiles, splits_, s_);
  } else {
    wide ? launch<GateWide<256>>(a, tiles, splits_, s_)
         : launch<GateNarrow<256>>(a, tiles, splits_, s_);
  }
}

}  // namespace moe::cuda
