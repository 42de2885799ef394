#include <cudaTypedefs.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/device_helpers.h"
#include "kernels/native_experts.h"

namespace moe::cuda {

namespace {

constexpr int kMaxLocalExperts = 1024;
constexpr int kPlanThreads = 1024;

// ---------------------------------------------------------------- route plan

// Up to kPlanThreads * kPlanLanesPerThread lanes, one block plans the routes (each thread takes
// lanes tid, tid + kPlanThreads, ...); above that, one thread per lane and kPlanThreads lanes per
// block. Positions of local lanes are grouped by expert (ascending local id); inside an expert
// the order is whatever the atomics gave, which changes no output value: every output element
// depends only on its own row. Each block counts its lanes per expert in shared memory and (if
// there are several blocks) reserves its range of slots with one global atomic per expert; the
// last block to finish (ticket) scans the totals into offsets and the tile table, then resets the
// totals and the ticket for the next forward (so a forward needs no memset). With a single block
// the same kernel also writes the positions; with more, scatter_routes does (a second launch:
// docs/native-backend.md#one-plan-block-up-to-2048-lanes: one block of two lanes per thread beat
// the two launches on the H200, one of four to sixteen lanes per thread did not).
constexpr int kPlanLanesPerThread = 2;

__global__ void __launch_bounds__(kPlanThreads)
    plan_routes(const int* __restrict__ ids, const float* __restrict__ weights, int lanes, int k,
                int experts, int first, int local, int tile_tokens, int lanes_per_thread,
                int* total_counts, int* expert_offsets, unsigned* ticket, int* lane_slot,
                int* token_of, int* lane_pos, int4* tiles, int* num_tiles, int w2_tile_tokens,
                int4* w2_tiles, int* w2_num_tiles, int* flag) {
  __shared__ int counts[kMaxLocalExperts];
  __shared__ int offsets[kMaxLocalExperts];
  __shared__ bool last;
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const int base = static_cast<int>(blockIdx.x) * threads + tid;  // lane j: base + j * threads
  for (int e = tid; e < local; e += threads) counts[e] = 0;
  // Every lane's route is loaded before any is counted, so the loads overlap.
  int id[kPlanLanesPerThread];
  float weight[kPlanLanesPerThread];
#pragma unroll
  for (int j = 0; j < kPlanLanesPerThread; ++j) {
    const int i = base + j * threads;
    const bool mine = j < lanes_per_thread && i < lanes;
    id[j] = mine ? ids[i] : -1;
    weight[j] = mine ? weights[i] : 0.0f;
  }
  __syncthreads();
  int expert[kPlanLanesPerThread], slot[kPlanLanesPerThread];
#pragma unroll
  for (int j = 0; j < kPlanLanesPerThread; ++j) {
    expert[j] = -1;
    slot[j] = -1;
    if (j >= lanes_per_thread || base + j * threads >= lanes) continue;
    if (!lane_is_valid(id[j], weight[j], experts)) {
      atomicOr(flag, 1);
    } else if (id[j] >= first && id[j] < first + local) {
      expert[j] = id[j] - first;
      slot[j] = atomicAdd(&counts[expert[j]], 1);
    }
  }
  __syncthreads();
  // This block's base slot per expert (with a single block: 0, no global atomics).
  for (int e = tid; e < local; e += threads)
    offsets[e] = gridDim.x > 1 && counts[e] ? atomicAdd(&total_counts[e], counts[e]) : 0;
  __syncthreads();
  if (gridDim.x > 1) {
    // One lane per thread here (lanes_per_thread is 1 with several blocks).
    if (base < lanes) lane_slot[base] = expert[0] >= 0 ? slot[0] + offsets[expert[0]] : -1;
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int e = tid; e < local; e += threads) {
      counts[e] = __ldcg(&total_counts[e]);
      total_counts[e] = 0;  // ready for the next forward
    }
    if (tid == 0) *ticket = 0u;
    __syncthreads();
  }
  if (tid < 32) {
    // Each lane of warp 0 scans a contiguous run of experts; a shuffle scan joins the runs.
    const int per = (local + 31) / 32;
    const int begin = min(local, tid * per), end = min(local, begin + per);
    // W2's own table where it runs tiles of another height (w2_tile_tokens > 0).
    const int w2_tokens = w2_tile_tokens > 0 ? w2_tile_tokens : tile_tokens;
    int rows = 0, tile_count = 0, w2_count = 0;
    for (int e = begin; e < end; ++e) {
      rows += counts[e];
      tile_count += (counts[e] + tile_tokens - 1) / tile_tokens;
      w2_count += (counts[e] + w2_tokens - 1) / w2_tokens;
    }
    int rows_incl = rows, tiles_incl = tile_count, w2_incl = w2_count;
    for (int o = 1; o < 32; o <<= 1) {
      const int r = __shfl_up_sync(0xffffffffu, rows_incl, o);
      const int t = __shfl_up_sync(0xffffffffu, tiles_incl, o);
      const int t2 = __shfl_up_sync(0xffffffffu, w2_incl, o);
      if (tid >= o) rows_incl += r, tiles_incl += t, w2_incl += t2;
    }
    int off = rows_incl - rows, tile = tiles_incl - tile_count, w2_tile = w2_incl - w2_count;
    for (int e = begin; e < end; ++e) {
      offsets[e] = off;
      expert_offsets[e] = off;
      for (int s = 0; s < counts[e]; s += tile_tokens)
        tiles[tile++] = make_int4(e, off + s, min(tile_tokens, counts[e] - s), 0);
      if (w2_tile_tokens > 0)
        for (int s = 0; s < counts[e]; s += w2_tokens)
          w2_tiles[w2_tile++] = make_int4(e, off + s, min(w2_tokens, counts[e] - s), 0);
      off += counts[e];
    }
    if (tid == 31) {
      *num_tiles = tiles_incl;
      if (w2_tile_tokens > 0) *w2_num_tiles = w2_incl;
    }
  }
  if (gridDim.x > 1) return;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kPlanLanesPerThread; ++j) {
    const int i = base + j * threads;
    if (j >= lanes_per_thread || i >= lanes) continue;
    const int pos = expert[j] < 0 ? -1 : offsets[expert[j]] + slot[j];
    lane_pos[i] = pos;
    if (pos >= 0) token_of[pos] = i / k;
  }
}

// Positions of every lane once plan_routes (several blocks) has the expert offsets.
__global__ void __launch_bounds__(kPlanThreads)
    scatter_routes(const int* __restrict__ ids, int lanes, int k, int first,
                   const int* __restrict__ lane_slot, const int* __restrict__ expert_offsets,
                   int* lane_pos, int* token_of) {
  const int i = static_cast<int>(blockIdx.x) * kPlanThreads + static_cast<int>(threadIdx.x);
  if (i >= lanes) return;
  const int slot = lane_slot[i];
  const int pos = slot < 0 ? -1 : expert_offsets[ids[i] - first] + slot;
  lane_pos[i] = pos;
  if (pos >= 0) token_of[pos] = i / k;
}

// ---------------------------------------------------------------- small forwards: the plan in W13

// At most kFusedLanes lanes on the narrow tile, every W13 block plans the routes itself instead
// of reading a plan_routes kernel's plan (docs/native-backend.md#small-forwards): at a few lanes
// that launch costs more than the work. Each block's plan costs O(lanes) per thread, so it pays
// only up to 16 lanes (measured on the H200); the combine stays a kernel of its own (combining in
// the last W2 block of each feature block was measured slower).
constexpr int kFusedLanes = 16;

// From this many lanes the narrow tile loads its weights under L2 evict-first. Each weight is read
// once per forward, but a token tile's rows are read by every feature block of its expert, and the
// grid runs the tiles of one feature block before the next; with the weights evicted first those
// rows stay in L2 (and the expert outputs, for the combine). Measured on the H200 against loads
// without a hint: 0.88-1.00x the forward's time from 32 to 512 tokens at k = 8, but 0.98-1.02x
// from 1 to 4 tokens; and one kernel choosing the policy at run time was up to 9 % slower below
// the threshold, so there the kernel is the one without a hint. The wgmma pipeline's TMA loads
// measured 3-6 % slower with the hint and keep none (docs/native-backend.md#weights-evict-first).
constexpr int kEvictFirstLanes = 256;

// The routes a W13 kernel plans from; block (0, 0) also publishes the plan (lane positions, token
// of each position, tile table and count) for the W2 and combine kernels and raises the flag for
// an invalid lane.
struct FusedRoutes {
  const int* ids;
  const float* weights;
  int lanes, k, experts, first, local;
  int* flag;
  int* lane_pos;
  int* token_of;
  int4* tiles;
  int* num_tiles;
};

// The plan in shared memory. Positions are grouped by local expert in ascending order and, inside
// an expert, by lane, so that every block computes the same plan without atomics.
struct FusedPlan {
  int expert[kFusedLanes];  // local expert of each lane, -1 for a remote or invalid lane
  int pos[kFusedLanes];     // position of each lane, -1 for none
  int starts[kFusedLanes];  // 1 where a lane's position starts a tile
  int token_of[kFusedLanes];
  int4 tile;  // this block's tile
  int num_tiles;
};

// Called by every thread of a block of at least kFusedLanes threads; on return `plan` is complete.
template <int kTileTokens>
__device__ void plan_fused(const FusedRoutes& r, int tile_index, bool publish, FusedPlan& plan) {
  const int i = static_cast<int>(threadIdx.x);
  const bool mine = i < r.lanes;
  int expert = -1;
  if (mine) {
    const int id = r.ids[i];
    if (!lane_is_valid(id, r.weights[i], r.experts)) {
      if (publish) atomicOr(r.flag, 1);
    } else if (id >= r.first && id < r.first + r.local) {
      expert = id - r.first;
    }
    plan.expert[i] = expert;
  }
  __syncthreads();
  int pos = -1, rank_in_expert = 0;
  if (mine && expert >= 0) {
    int before = 0;
    for (int j = 0; j < r.lanes; ++j) {
      const int e = plan.expert[j];
      before += e >= 0 && e < expert;
      rank_in_expert += e == expert && j < i;
    }
    pos = before + rank_in_expert;
    plan.token_of[pos] = i / r.k;
  }
  if (mine) {
    plan.pos[i] = pos;
    plan.starts[i] = pos >= 0 && rank_in_expert % kTileTokens == 0;
  }
  __syncthreads();
  if (mine && plan.starts[i]) {
    int count = 0, index = 0;
    for (int j = 0; j < r.lanes; ++j) {
      count += plan.expert[j] == expert;
      index += plan.starts[j] && plan.pos[j] < pos;
    }
    const int4 tile = make_int4(expert, pos, min(kTileTokens, count - rank_in_expert), 0);
    if (index == tile_index) plan.tile = tile;
    if (publish) r.tiles[index] = tile;
  }
  if (i == 0) {
    int tiles = 0;
    for (int j = 0; j < r.lanes; ++j) tiles += plan.starts[j];
    plan.num_tiles = tiles;
    if (publish) *r.num_tiles = tiles;
  }
  if (publish && mine) {
    r.lane_pos[i] = pos;
    if (pos >= 0) r.token_of[pos] = i / r.k;
  }
  __syncthreads();
}

// ---------------------------------------------------------------- grouped expert GEMM

// Block tile: kRows weight rows x kTokens token rows, K in steps of kBK through kStages shared
// memory stages. Warps: kWF along weight rows, kWT along tokens, kWK splitting each K step
// (reduced through shared memory at the end). Each warp owns kMT 16-row by kNT 8-token
// mma tiles. Shared rows are kBK bf16 wide with the 16-byte chunks XOR-swizzled by row so that
// ldmatrix reads of 8 rows hit 8 distinct bank groups.
template <int kWF_, int kWT_, int kWK_, int kMT_, int kNT_, int kBK_, int kStages_, int kMinBlocks_>
struct TileConfig {
  static constexpr int kWF = kWF_, kWT = kWT_, kWK = kWK_, kMT = kMT_, kNT = kNT_, kBK = kBK_,
                       kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = 32 * kWF * kWT * kWK;
  static constexpr int kRows = kWF * kMT * 16;
  static constexpr int kTokens = kWT * kNT * 8;
  static constexpr int kChunks = kBK / 8;  // 16-byte chunks per shared row
  static constexpr int kStageW = kRows * kBK, kStageX = kTokens * kBK;  // elements
  static constexpr int kWLoads = kRows * kChunks / kThreads;
  static constexpr int kXLoads = kTokens * kChunks / kThreads;
  static constexpr int kKPerWarp = kBK / kWK;
  static constexpr int kPipeBytes = kStages * (kStageW + kStageX) * 2;
  static constexpr int kReduceBytes = (kWK - 1) * kWF * kWT * kMT * kNT * 4 * 32 * 4;
  static constexpr int kSmemBytes = kPipeBytes > kReduceBytes ? kPipeBytes : kReduceBytes;
  static_assert(kNT % 2 == 0 && kMT % 2 == 0, "mma tiles come in pairs");
  static_assert(kKPerWarp % 16 == 0, "each warp's K slice is whole k16 steps");
  static_assert(kRows * kChunks % kThreads == 0 && kTokens * kChunks % kThreads == 0,
                "every thread issues the same number of copies");
};

// Few rows per expert: 16 tokens, 2-way split-K, 128-wide K steps: bandwidth-bound streaming.
using NarrowTile = TileConfig<2, 1, 2, 2, 2, 128, 4, 2>;
// Tens of rows per expert: 128 x 64 tiles.
using MediumTile = TileConfig<4, 1, 1, 2, 8, 64, 4, 2>;
// Between the medium and the wide tile: 128 x 80 and 128 x 112 tiles as the medium one (one warp
// along tokens), 128 x 96 tiles 64 x 48 per warp.
using Wide80Tile = TileConfig<4, 1, 1, 2, 10, 64, 4, 2>;
using Wide96Tile = TileConfig<2, 2, 1, 4, 6, 64, 3, 2>;
using Wide112Tile = TileConfig<4, 1, 1, 2, 14, 64, 3, 2>;
// Many rows per expert: 128 x 128 tiles, 64 x 64 per warp; 128 x 160 tiles, 32 x 80 per warp.
using WideTile = TileConfig<2, 2, 1, 4, 8, 64, 3, 2>;
using Wide160Tile = TileConfig<4, 2, 1, 2, 10, 64, 3, 1>;

struct GemmArgs {
  const bf16* weights;  // [local][weight rows][K]
  std::int64_t expert_stride;
  int k;             // reduction length (H for W13, I for W2)
  int out_features;  // I (gated) or H
  const bf16* src;   // x [tokens][H] (gated, gathered through token_of) or act [positions][I]
  const int* token_of;
  const int4* tiles;  // (local expert, first position, rows)
  const int* num_tiles;
  bf16* out;  // [positions][out_features]: act (gated) or the expert outputs (W2)
};

// Gated: block rows are kRows/2 gate rows [f0, f0 + kRows/2) and the matching up rows
// [I + f0, ...); warp wf owns the gate m-tiles [wf*kMT/2, ...) and the up m-tiles at the same
// offsets, so SiLU(gate) * up combines registers of one thread.
template <class C, bool kGated>
__device__ __forceinline__ int warp_mtile_row(int wf, int j) {
  if constexpr (kGated) {
    constexpr int half = C::kMT / 2;
    return (j < half ? 0 : C::kRows / 2) + (wf * half + (j % half)) * 16;
  } else {
    return (wf * C::kMT + j) * 16;
  }
}

// The cp.async copies of one thread for one block tile: weight rows (gated: the gate half and
// the up half of W13) and token rows (gathered through token_of for W13), both into rows of kBK
// bf16 with the 16-byte chunks XOR-swizzled by row (for kBK = 64 this is the 128-byte swizzle
// that wgmma descriptors expect). Weight rows past the matrix and K past its end are zero-filled;
// token rows past the tile are not copied.
template <class C, bool kGated, bool kEvictFirst = false>
struct TileLoader {
  const bf16* w_src[C::kWLoads];
  bool w_ok[C::kWLoads];
  int w_dst[C::kWLoads], w_chunk[C::kWLoads];
  const bf16* x_src[C::kXLoads];
  bool x_ok[C::kXLoads];
  int x_dst[C::kXLoads], x_chunk[C::kXLoads];
  const bf16* w_base;
  const bf16* x_base;
  int k;
  std::uint64_t w_policy;  // kEvictFirst: the weights' L2 policy

  __device__ TileLoader(const GemmArgs& a, int expert, int first_pos, int tile_rows, int feature0,
                        int tid)
      : w_base(a.weights + expert * a.expert_stride),
        x_base(a.src),
        k(a.k),
        w_policy(kEvictFirst ? l2_evict_first() : 0) {
#pragma unroll
    for (int i = 0; i < C::kWLoads; ++i) {
      const int q = tid + i * C::kThreads, row = q / C::kChunks, chunk = q % C::kChunks;
      int feature, weight_row;
      if constexpr (kGated) {
        feature = feature0 + row % (C::kRows / 2);
        weight_row = (row < C::kRows / 2 ? 0 : a.out_features) + feature;
      } else {
        feature = feature0 + row;
        weight_row = feature;
      }
      w_ok[i] = feature < a.out_features;
      w_src[i] = w_base + static_cast<std::int64_t>(w_ok[i] ? weight_row : 0) * a.k;
      w_chunk[i] = chunk;
      w_dst[i] = swizzled<C::kBK>(row, chunk);
    }
#pragma unroll
    for (int i = 0; i < C::kXLoads; ++i) {
      const int q = tid + i * C::kThreads, row = q / C::kChunks, chunk = q % C::kChunks;
      x_ok[i] = row < tile_rows;  // so also false past the tile (row >= kTokens >= tile_rows)
      const int pos = first_pos + (x_ok[i] ? row : 0);
      const std::int64_t src_row = kGated ? a.token_of[pos] : pos;
      x_src[i] = a.src + src_row * a.k;
      x_chunk[i] = chunk;
      x_dst[i] = swizzled<C::kBK>(row, chunk);
    }
  }

  // Queues K step `step` into the stage at `sw` (weights) / `sx` (tokens).
  __device__ __forceinline__ void load(bf16* sw, bf16* sx, int step) const {
    const int k0 = step * C::kBK;
    // policy: the L2 hint, or none.
    const auto load_weights = [&](auto... policy) {
#pragma unroll
      for (int i = 0; i < C::kWLoads; ++i) {
        const int col = k0 + w_chunk[i] * 8;
        const bool ok = w_ok[i] && col < k;
        cp_async16(sw + w_dst[i], ok ? w_src[i] + col : w_base, ok, policy...);
      }
    };
    if constexpr (kEvictFirst)
      load_weights(w_policy);
    else
      load_weights();
#pragma unroll
    for (int i = 0; i < C::kXLoads; ++i) {
      // Token rows past the tile are not copied: they meet only outputs the epilogue drops.
      if (!x_ok[i]) continue;
      const int col = k0 + x_chunk[i] * 8;
      const bool ok = col < k;
      cp_async16(sx + x_dst[i], ok ? x_src[i] + col : x_base, ok);
    }
  }
};

// Visits one warp's outputs. acc[j][n][r] (the mma/wgmma fragment layout) holds weight row
// row_of(j) + lane/4 + 8*(r/2) of the block and token token0 + 8n + 2*(lane%4) + r%2 of the
// tile. Gated: m-tiles j < kMT/2 are gate rows and j + kMT/2 the up rows of the same features
// (row_of gives the feature offset); the output is SiLU(gate) * up with gate and up rounded to
// bf16 first, as a separate GEMM would store them. Ungated: the expert output row in bf16.
// put(token, feature offset in the block, value) receives every output element.
template <bool kGated, int kMT, int kNT, class RowOf, class Put>
__device__ __forceinline__ void for_each_output(const float (&acc)[kMT][kNT][4], RowOf row_of,
                                                int token0, int lane, Put put) {
  const int group = lane >> 2, pair = (lane & 3) * 2;
#pragma unroll
  for (int n = 0; n < kNT; ++n)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int t = token0 + n * 8 + pair + (r & 1);
#pragma unroll
      for (int j = 0; j < (kGated ? kMT / 2 : kMT); ++j) {
        const int feature = row_of(j) + group + (r >> 1) * 8;
        if constexpr (kGated) {
          put(t, feature,
              __float2bfloat16_rn(silu_mul_of_sums(acc[j][n][r], acc[j + kMT / 2][n][r])));
        } else {
          put(t, feature, __float2bfloat16_rn(acc[j][n][r]));
        }
      }
    }
}

// Stores one warp's outputs (for_each_output) straight to global memory.
template <bool kGated, int kMT, int kNT, class RowOf>
__device__ __forceinline__ void store_accumulators(const GemmArgs& a,
                                                   const float (&acc)[kMT][kNT][4], RowOf row_of,
                                                   int feature0, int token0, int first_pos,
                                                   int tile_rows, int lane) {
  for_each_output<kGated>(acc, row_of, token0, lane, [&](int t, int feature, bf16 v) {
    if (t < tile_rows && feature0 + feature < a.out_features)
      a.out[static_cast<std::int64_t>(first_pos + t) * a.out_features + feature0 + feature] = v;
  });
}

// kPlan (gated, the narrow tile, at most kFusedLanes lanes): the block plans the routes from
// `routes` itself (plan_fused). kEvictFirst: the weights load under L2 evict-first
// (kEvictFirstLanes).
template <class C, bool kGated, bool kPlan = false, bool kEvictFirst = false>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    expert_gemm(GemmArgs a, FusedRoutes routes) {
  const int tile_index = static_cast<int>(blockIdx.x);
  const int feature0 = static_cast<int>(blockIdx.y) * (kGated ? C::kRows / 2 : C::kRows);
  int4 tile;
  if constexpr (kPlan) {
    static_assert(kGated && C::kThreads >= kFusedLanes, "W13, one thread per lane");
    __shared__ FusedPlan plan;
    plan_fused<C::kTokens>(routes, tile_index, blockIdx.x == 0 && blockIdx.y == 0, plan);
    if (tile_index >= plan.num_tiles) return;
    tile = plan.tile;
    a.token_of = plan.token_of;
  } else {
    if (tile_index >= *a.num_tiles) return;
    tile = a.tiles[tile_index];
  }
  const int first_pos = tile.y, tile_rows = tile.z;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* smem = reinterpret_cast<bf16*>(smem_raw);
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int wf = warp % C::kWF, wt = (warp / C::kWF) % C::kWT, wk = warp / (C::kWF * C::kWT);
  const TileLoader<C, kGated, kEvictFirst> loader(a, tile.x, first_pos, tile_rows, feature0, tid);
  const int k_steps = (a.k + C::kBK - 1) / C::kBK;
  auto stage_w = [&](int stage) { return smem + stage * (C::kStageW + C::kStageX); };

  float acc[C::kMT][C::kNT][4];
#pragma unroll
  for (int j = 0; j < C::kMT; ++j)
#pragma unroll
    for (int n = 0; n < C::kNT; ++n)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[j][n][r] = 0.0f;

  cp_async_pipeline<C::kStages>(
      k_steps,
      [&](int stage, int step) { loader.load(stage_w(stage), stage_w(stage) + C::kStageW, step); },
      [&](int stage) {
        const bf16* sw = stage_w(stage);
        const bf16* sx = sw + C::kStageW;
#pragma unroll
        for (int ks = 0; ks < C::kKPerWarp / 16; ++ks) {
          const int chunk0 = (wk * C::kKPerWarp + ks * 16) / 8;
          unsigned af[C::kMT][4];
#pragma unroll
          for (int j = 0; j < C::kMT; ++j)
            load_a_fragment<C::kBK>(af[j], sw, warp_mtile_row<C, kGated>(wf, j), chunk0, lane);
          unsigned bfr[C::kNT][2];
#pragma unroll
          for (int p = 0; p < C::kNT / 2; ++p)
            load_b_fragments<C::kBK>(bfr[2 * p], bfr[2 * p + 1], sx, wt * C::kNT * 8 + p * 16,
                                     chunk0, lane);
#pragma unroll
          for (int j = 0; j < C::kMT; ++j)
#pragma unroll
            for (int n = 0; n < C::kNT; ++n) mma_bf16(acc[j][n], af[j], bfr[n][0], bfr[n][1]);
        }
      });

  if constexpr (C::kWK > 1) {
    // Split-K: warps wk > 0 park their partial sums in shared memory; wk == 0 adds them.
    cp_async_wait<0>();
    __syncthreads();
    float* red = reinterpret_cast<float*>(smem_raw);
    constexpr int kRegs = C::kMT * C::kNT * 4;
    const int slot = wf + C::kWF * wt;
    if (wk > 0) {
      float* dst = red + ((wk - 1) * C::kWF * C::kWT + slot) * kRegs * 32;
#pragma unroll
      for (int j = 0; j < C::kMT; ++j)
#pragma unroll
        for (int n = 0; n < C::kNT; ++n)
#pragma unroll
          for (int r = 0; r < 4; ++r) dst[((j * C::kNT + n) * 4 + r) * 32 + lane] = acc[j][n][r];
    }
    __syncthreads();
    if (wk > 0) return;
    for (int w = 1; w < C::kWK; ++w) {
      const float* src = red + ((w - 1) * C::kWF * C::kWT + slot) * kRegs * 32;
#pragma unroll
      for (int j = 0; j < C::kMT; ++j)
#pragma unroll
        for (int n = 0; n < C::kNT; ++n)
#pragma unroll
          for (int r = 0; r < 4; ++r) acc[j][n][r] += src[((j * C::kNT + n) * 4 + r) * 32 + lane];
    }
  }
  store_accumulators<kGated>(
      a, acc, [&](int j) { return warp_mtile_row<C, kGated>(wf, j); }, feature0, wt * C::kNT * 8,
      first_pos, tile_rows, lane);
}

// Block: 2 warpgroups x (two 64-row m-tiles) = 256 weight rows, kTokens token rows, K in steps
// of 64 through kStages cp.async stages (at least 3). Gated: warpgroup g takes gate rows [64g, 64g
// + 64) and the same up rows, so SiLU(gate) * up stays in one thread's registers.
#if HARNESS_WGMMA
// A build for sm_90a beside other architectures compiles the wgmma kernels for each of them, but
// only the sm_90a pass has wgmma, TMA and clusters: the other passes compile them as a trap (the
// host launches them only on compute capability 9.0, which runs the sm_90a code of such a build),
// and what only those kernels use is then unreferenced there, on purpose.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HARNESS_WGMMA_ARCH 0
#pragma nv_diag_suppress declared_but_not_referenced
#else
#define HARNESS_WGMMA_ARCH 1
#endif
template <int kTokens_, int kStages_>
struct WgmmaConfig {
  static constexpr int kThreads = 256, kRows = 256, kTokens = kTokens_, kBK = 64,
                       kStages = kStages_, kChunks = 8;
  static constexpr int kStageW = kRows * kBK, kStageX = kTokens * kBK;
  // The 80- and 112-token tiles' token chunks are not a multiple of the threads: the last copy of
  // some threads falls past the tile (TileLoader skips it).
  static constexpr int kWLoads = kRows * kChunks / kThreads,
                       kXLoads = (kTokens * kChunks + kThreads - 1) / kThreads;
  static constexpr int kNT = kTokens / 8;
  // +1024: the stages are placed on a 1024-byte boundary (the swizzle atom).
  static constexpr int kSmemBytes = kStages * (kStageW + kStageX) * 2 + 1024;
  static_assert(kStages >= 3, "a stage is refilled two steps after its wgmma was issued");
  static_assert(kRows == kNativeWgmmaBlockRows, "native_launch_waves counts these blocks");
};
#else
// Builds without sm_90a run the medium and wide tiles on mma.sync only; a wgmma tile is then just
// its token rows (TileConfigs checks the pairs agree), so that no unused member warns.
template <int kTokens_, int kStages_>
struct WgmmaConfig {
  static constexpr int kTokens = kTokens_;
};
#endif
using WgmmaWide160 = WgmmaConfig<160, 4>;
using WgmmaWide = WgmmaConfig<128, 4>;
using WgmmaWide112 = WgmmaConfig<112, 4>;
using WgmmaWide96 = WgmmaConfig<96, 4>;
using WgmmaWide80 = WgmmaConfig<80, 5>;
using WgmmaMedium = WgmmaConfig<64, 5>;
#if HARNESS_WGMMA
// W13 on split tiles (experiment, HARNESS_NATIVE_TILE=split160): 128 token rows as wgmma's M in two
// consumer warpgroups (as the wide tile's W13) plus kTail more as wgmma's N in a third, which
// runs the 256 weight rows as four m64 against them. One block streams its weights once for up
// to 128 + kTail tokens, and the tail costs flops by 8-row steps, not by 64.
template <int kTail_>
struct WgmmaSplit : WgmmaConfig<128 + kTail_, 4> {
  static constexpr int kThreads = 384, kTail = kTail_;
};
using WgmmaSplit160 = WgmmaSplit<32>;
#endif

// The weight boxes the tensor maps are encoded with: 64 K columns (128 bytes, the swizzle span)
// by 128 weight rows, two per stage.
constexpr int kMapRows = 128;

#if HARNESS_WGMMA
// ---------------------------------------------------------------- Hopper wgmma GEMM (sm_90a)

// Shared-memory matrix descriptor of a K-major tile with 128-byte rows in the 128-byte swizzle:
// 8-row groups 1024 bytes apart (stride byte offset); the leading byte offset is unused.
__device__ __forceinline__ std::uint64_t wgmma_desc(const void* tile) {
  const std::uint64_t addr = smem_addr(tile);
  return ((addr & 0x3FFFFu) >> 4) | (std::uint64_t{1} << 16) | (std::uint64_t{1024 >> 4} << 32) |
         (std::uint64_t{1} << 62);
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// The accumulators were written by asynchronous wgmma: orders every later read of them after the
// wgmma_wait that retired it. `acc` is the thread's accumulators, flat.
template <int kN>
__device__ __forceinline__ void order_after_wgmma(float (&acc)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

// D (64 x kN, fp32, the warpgroup's fragments) (+)= A (64 x 16) * B (16 x kN), both K-major in
// shared memory.
template <int kN>
__device__ __forceinline__ void wgmma_bf16(float (&d)[kN / 2], std::uint64_t a, std::uint64_t b,
                                           int accumulate);
template <>
__device__ __forceinline__ void wgmma_bf16<32>(float (&d)[16], std::uint64_t a, std::uint64_t b,
                                               int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15}, "
      "%16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_bf16<64>(float (&d)[32], std::uint64_t a, std::uint64_t b,
                                               int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_bf16<80>(float (&d)[40], std::uint64_t a, std::uint64_t b,
                                               int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, "
      "%26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, %40, %41, p, 1, "
      "1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
      : "l"(a), "l"(b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_bf16<96>(float (&d)[48], std::uint64_t a, std::uint64_t b,
                                               int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47}, %48, %49, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "l"(a), "l"(b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_bf16<112>(float (&d)[56], std::uint64_t a, std::uint64_t b,
                                                int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %58, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n112k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, "
      "%26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "
      "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55}, %56, %57, p, 1, 1, 0, "
      "0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
      : "l"(a), "l"(b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_bf16<128>(float (&d)[64], std::uint64_t a, std::uint64_t b,
                                                int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(a), "l"(b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_bf16<256>(float (&d)[128], std::uint64_t a, std::uint64_t b,
                                                int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, "
      "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, "
      "%99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, "
      "%114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, "
      "%129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_bf16<160>(float (&d)[80], std::uint64_t a, std::uint64_t b,
                                                int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79}, %80, "
      "%81, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
      : "l"(a), "l"(b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_bf16<192>(float (&d)[96], std::uint64_t a, std::uint64_t b,
                                                int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, "
      "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, "
      "1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(a), "l"(b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_bf16<224>(float (&d)[112], std::uint64_t a, std::uint64_t b,
                                                int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %114, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n224k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, "
      "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, "
      "%99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111}, %112, %113, "
      "p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111])
      : "l"(a), "l"(b), "r"(accumulate));
}

// One stage of the orientation with tokens as wgmma's N: acc[j] (+)= the stage's weight rows
// [row(j), row(j) + 64) times its kN token rows at sx, K16 step after K16 step (kBK columns); the
// first step overwrites the accumulators unless `accumulate`.
template <int kBK, int kN, int kMTiles, class RowOf>
__device__ __forceinline__ void wgmma_weights_by_tokens(float (&acc)[kMTiles][kN / 8][4],
                                                        const bf16* sw, const bf16* sx, RowOf row,
                                                        int accumulate) {
#pragma unroll
  for (int ks = 0; ks < kBK / 16; ++ks) {
    const std::uint64_t b = wgmma_desc(sx + ks * 16);
#pragma unroll
    for (int j = 0; j < kMTiles; ++j)
      wgmma_bf16<kN>(reinterpret_cast<float(&)[kN / 2]>(acc[j]),
                     wgmma_desc(sw + row(j) * kBK + ks * 16), b, accumulate || ks > 0);
  }
}
// The dynamic shared memory of a wgmma block, placed on a 1024-byte boundary (the swizzle atom).
__device__ __forceinline__ bf16* wgmma_smem() {
  extern __shared__ __align__(1024) unsigned char wgmma_smem_raw[];
  return reinterpret_cast<bf16*>(wgmma_smem_raw +
                                 ((1024 - smem_addr(wgmma_smem_raw) % 1024) % 1024));
}

// One block tile: tile `tile_index` of the tile table times feature block `feature_block` of the
// weights (kRows weight rows; gated: kRows/2 gate and kRows/2 up rows). Every thread of the block
// calls it; on return every wgmma and every copy it issued is complete.
template <class C, bool kGated>
__device__ __forceinline__ void wgmma_tile(const GemmArgs& a, int tile_index, int feature_block,
                                           bf16* smem) {
  const int4 tile = a.tiles[tile_index];
  const int first_pos = tile.y, tile_rows = tile.z;
  const int feature0 = feature_block * (kGated ? C::kRows / 2 : C::kRows);
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int group = warp / 4, warp_in_group = warp % 4;
  const TileLoader<C, kGated> loader(a, tile.x, first_pos, tile_rows, feature0, tid);
  const int k_steps = (a.k + C::kBK - 1) / C::kBK;
  auto stage_w = [&](int stage) { return smem + stage * (C::kStageW + C::kStageX); };
  // Shared rows of this warpgroup's two m-tiles.
  const int mtile_row[2] = {kGated ? group * 64 : group * 128,
                            kGated ? C::kRows / 2 + group * 64 : group * 128 + 64};

  // Loads run kStages - 2 K steps ahead, and one step's wgmma group stays in flight while the
  // next is issued: the stage refilled at step s was last read by the wgmma of step s - 2,
  // which wait_group<1> at the end of step s - 1 has retired (and the barrier made that so for
  // both warpgroups).
  float acc[2][C::kNT][4];
  int accumulate = 0;  // the first wgmma of the tile overwrites the accumulators
  cp_async_pipeline<C::kStages, C::kStages - 2, true>(
      k_steps,
      [&](int stage, int step) { loader.load(stage_w(stage), stage_w(stage) + C::kStageW, step); },
      [&](int stage) {
        const bf16* sw = stage_w(stage);
        const bf16* sx = sw + C::kStageW;
        wgmma_fence();
        wgmma_weights_by_tokens<C::kBK, C::kTokens>(
            acc, sw, sx, [&](int j) { return mtile_row[j]; }, accumulate);
        accumulate = 1;
        wgmma_commit();
        wgmma_wait<1>();
      });
  wgmma_wait<0>();
  order_after_wgmma(reinterpret_cast<float(&)[2 * C::kNT * 4]>(acc));
  const auto row_of = [&](int j) {
    return (kGated ? group * 64 : mtile_row[j]) + 16 * warp_in_group;
  };
  cp_async_wait<0>();  // the pipeline's trailing (empty) groups: nothing left in flight
  if constexpr (C::kTokens < 96) {
    // Fragment rows: warp w of the warpgroup holds rows 16w + lane/4 (+8) of each m-tile.
    store_accumulators<kGated>(a, acc, row_of, feature0, 0, first_pos, tile_rows, lane);
    return;
  }
  // The wide tiles' outputs go through shared memory, so that global stores are whole 16-byte
  // runs of a token's features (a fragment store holds 2-byte pieces of 4 token rows): measured
  // 2-4 % faster for the Qwen3 models from N = 2048; the medium tile gained nothing measurable
  // (docs/native-backend.md#the-epilogue-through-shared-memory).
  __syncthreads();  // both warpgroups' last wgmma read its stage: the stages are free
  constexpr int kFeatures = kGated ? C::kRows / 2 : C::kRows, kStride = kFeatures + 8;
  static_assert(C::kTokens * kStride * 2 <= C::kStages * (C::kStageW + C::kStageX) * 2,
                "the output tile fits in the pipeline's stages");
  for_each_output<kGated>(acc, row_of, 0, lane,
                          [&](int t, int feature, bf16 v) { smem[t * kStride + feature] = v; });
  __syncthreads();
  constexpr int kChunks = kFeatures / 8;  // 16-byte runs per token row (H and I: multiples of 8)
  for (int q = tid; q < tile_rows * kChunks; q += C::kThreads) {
    const int t = q / kChunks, feature = feature0 + (q % kChunks) * 8;
    if (feature < a.out_features)
      *reinterpret_cast<uint4*>(a.out + static_cast<std::int64_t>(first_pos + t) * a.out_features +
                                feature) =
          *reinterpret_cast<const uint4*>(smem + t * kStride + (q % kChunks) * 8);
  }
}

template <class C, bool kGated>
__global__ void __launch_bounds__(C::kThreads, 1) expert_gemm_wgmma(GemmArgs a) {
#if !HARNESS_WGMMA_ARCH
  __trap();  // never launched: the host runs these on compute capability 9.0 only
#else
  const int tile_index = static_cast<int>(blockIdx.x);
  if (tile_index >= *a.num_tiles) return;
  wgmma_tile<C, kGated>(a, tile_index, static_cast<int>(blockIdx.y), wgmma_smem());
#endif
}

// The persistent schedule (HARNESS_NATIVE_SCHEDULE=persistent; docs/native-backend.md#launch-
// waves-set-the-time-off-balanced-routing): both GEMMs in one launch of at most one block per
// SM, each block taking units from a queue until none is left. Units are the W13 block tiles
// (tile-major), then the W2 block tiles; a W2 unit starts once every W13 unit of its tile has
// stored its activations (a per-tile count). Units are handed out in ticket order, and a block
// draws its next unit while it runs one, so every W13 unit a W2 unit waits for is held by a
// running block that is running it or an earlier W13 unit, and waits for nothing: no deadlock,
// whatever the number of resident blocks. The launch then takes about
// ceil((W13 + W2 units) / SMs) unit-times instead of ceil(W13 / SMs) + ceil(W2 / SMs), and W2
// units fill the SMs the last W13 wave leaves idle. The last block out resets the queue and the
// counts, so the next forward (or graph replay) starts from zero.
struct UnitQueue {
  unsigned* ticket;  // next unit to hand out
  unsigned* exited;  // blocks that found the queue empty
  int* up_done;      // [tiles] W13 units of each tile whose activations are stored
  int up_blocks;     // W13 feature blocks per tile
  int down_blocks;   // W2 feature blocks per tile
};

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    expert_gemms_persistent(GemmArgs up, GemmArgs down, UnitQueue q) {
#if !HARNESS_WGMMA_ARCH
  __trap();  // never launched: the host runs these on compute capability 9.0 only
#else
  // The unit this block runs, and the next one, drawn while it runs so that the ticket's round
  // trip hides behind the work.
  __shared__ int drawn[2];
  bf16* smem = wgmma_smem();
  const int tiles = *up.num_tiles;
  const int up_units = tiles * q.up_blocks, units = up_units + tiles * q.down_blocks;
  if (threadIdx.x == 0) drawn[0] = static_cast<int>(atomicAdd(q.ticket, 1u));
  __syncthreads();
  for (int slot = 0;; slot ^= 1) {
    const int unit = drawn[slot];
    if (unit >= units) break;
    // Every thread read drawn[slot ^ 1] before the barrier that ended the previous unit.
    if (threadIdx.x == 0) drawn[slot ^ 1] = static_cast<int>(atomicAdd(q.ticket, 1u));
    if (unit < up_units) {
      const int tile = unit / q.up_blocks;
      wgmma_tile<C, true>(up, tile, unit % q.up_blocks, smem);
      __threadfence();  // this thread's activation stores, before the count that releases them
      __syncthreads();
      if (threadIdx.x == 0) atomicAdd(&q.up_done[tile], 1);
    } else {
      const int u = unit - up_units, tile = u / q.down_blocks;
      if (threadIdx.x == 0)
        while (ld_acquire_gpu(&q.up_done[tile]) < q.up_blocks) __nanosleep(64);
      __syncthreads();
      wgmma_tile<C, false>(down, tile, u % q.down_blocks, smem);
    }
    // This unit's last reads of the shared stages, before the next unit's copies; thread 0's
    // draw, before every thread reads it.
    __syncthreads();
  }
  if (threadIdx.x == 0 && atomicAdd(q.exited, 1u) == gridDim.x - 1) {
    // Every block has left the loop: no unit runs or waits any more.
    for (int t = 0; t < tiles; ++t) q.up_done[t] = 0;
    *q.ticket = 0u;
    *q.exited = 0u;
  }
#endif
}

// ---------------------------------------------------------------- the warp-specialised pipeline

// mbarrier and TMA wrappers (sm_90). A barrier's phase completes when its pending arrivals reach
// zero and, for the stages' `full` barriers, when the bytes it was told to expect have landed.
__device__ __forceinline__ void mbar_init(std::uint64_t* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals)
               : "memory");
}
// One thread arms a pipeline's stage barriers: `full[s]` completes with `full_arrivals` arrivals
// (and the bytes they expect), `empty[s]` with `empty_arrivals`. The fence makes the initialised
// barriers visible to the cluster (and to the TMA unit) before the caller's block or cluster
// barrier lets anyone arrive on them.
__device__ __forceinline__ void init_stage_barriers(std::uint64_t* full, std::uint64_t* empty,
                                                    int stages, unsigned full_arrivals,
                                                    unsigned empty_arrivals) {
  for (int s = 0; s < stages; ++s) {
    mbar_init(&full[s], full_arrivals);
    mbar_init(&empty[s], empty_arrivals);
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_bytes(std::uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
// Returns once the phase of parity `parity` has completed (a fresh barrier is in phase 0, so
// waiting for parity 1 returns at once).
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// One arrival on `bar` once every cp.async this thread issued so far has landed (counted in the
// barrier's arrivals: .noinc).
__device__ __forceinline__ void cp_async_arrive(std::uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar))
               : "memory");
}
// A box of the 2-D tensor map `map` at (column, row) into shared memory; its bytes count against
// `bar`'s expected bytes.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap& map, int column, int row,
                                            std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(&map)), "r"(column), "r"(row), "r"(smem_addr(bar))
      : "memory");
}
// The same box into shared memory at dst's offset in each CTA of the cluster that `ctas` names
// (a bit per rank), counted against the barrier at bar's offset in each.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap& map, int column,
                                                      int row, std::uint64_t* bar,
                                                      std::uint16_t ctas) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::"
      "cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(&map)), "r"(column), "r"(row), "r"(smem_addr(bar)),
      "h"(ctas)
      : "memory");
}
// Thread-block clusters: this CTA's rank, a barrier of every (non-exited) thread of the cluster,
// and an arrival on the barrier at bar's offset in the shared memory of CTA `rank`. The arrival
// has the default (CTA-scope) semantics: what it releases are stage reads by wgmma, retired
// before it; with .release.cluster it also waited for the warp's earlier global stores and the
// clustered kernels ran 1.26-1.64x slower
// (docs/native-backend.md#clusters-of-tiles-share-their-weights).
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// A bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from shared to global
// memory, committed as a bulk async-group of this thread's; the waits take this thread's groups:
// until they have read their shared memory, or until their writes are done.
__device__ __forceinline__ void bulk_store(void* dst, const void* src, int bytes) {
  asm volatile(
      "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
      "cp.async.bulk.commit_group;\n" ::"l"(dst),
      "r"(smem_addr(src)), "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
// The registers each thread of this warpgroup holds from here on: fewer (kMore false) or more, a
// multiple of 8 from 24 to 256. Every warp of the warpgroup executes it.
template <bool kMore, int kRegisters>
__device__ __forceinline__ void warpgroup_registers() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256);
  if constexpr (kMore)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
  else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
// Barrier `id` (1-15; 0 is __syncthreads) of `threads` threads, a multiple of 32.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void mbar_arrive_cluster(std::uint64_t* bar, unsigned rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
      "r"(rank)
      : "memory");
}

// The consumer side of one block tile's K steps: waits for each step's stage (`full`), runs
// issue(stage, accumulated) as one wgmma group (accumulated: an earlier step wrote the
// accumulators), and once a group's predecessor has retired frees the predecessor's stage
// (`empty`, one arrival per warp). On return every wgmma of the tile has retired and every stage
// it read is free. `it` counts K steps over the block's tiles (stage and phase). kCtas > 1: a
// stage is freed in every CTA of the cluster (their producers multicast into this CTA's stages):
// lane r of the warp arrives on CTA rank + r's barrier.
template <int kStages, bool kGated, int kCtas, class Issue>
__device__ __forceinline__ void consume_stages(std::uint64_t* full, std::uint64_t* empty,
                                               int k_steps, int& it, int lane, unsigned rank,
                                               const Issue& issue) {
  const auto release = [&](int stage) {
    if (lane == 0) mbar_arrive(&empty[stage]);
    if (kCtas > 1 && lane > 0 && lane < kCtas)
      mbar_arrive_cluster(&empty[stage], (rank + static_cast<unsigned>(lane)) % kCtas);
  };
  for (int step = 0; step < k_steps; ++step, ++it) {
    const int stage = it % kStages;
    mbar_wait(&full[stage], (it / kStages) & 1);
    // W13's token rows came through cp.async (the generic proxy); wgmma reads through the async
    // proxy.
    if constexpr (kGated) fence_async_shared();
    wgmma_fence();
    issue(stage, step > 0);
    wgmma_commit();
    wgmma_wait<1>();  // the previous step's wgmma has retired: its stage is free
    if (step > 0) release((it - 1) % kStages);
  }
  wgmma_wait<0>();
  release((it - 1) % kStages);
}

// Shared memory of a pipelined block (Pipelined, TallW2): at most 227 KB, the stages placed on a
// 1024-byte boundary beside `other_bytes` (a staging buffer), and a full and an empty barrier per
// stage. pipeline_stages is as many stages of `stage_bytes` as fit.
constexpr int kPipelineMaxSmem = 227 * 1024;
constexpr int pipeline_stages(int stage_bytes, int other_bytes) {
  return (kPipelineMaxSmem - 1024 - other_bytes) / (stage_bytes + 16);
}
constexpr int pipeline_smem_bytes(int stages, int stage_bytes, int other_bytes) {
  return stages * stage_bytes + other_bytes + 1024 + 2 * stages * 8;
}

// HARNESS_NATIVE_SCHEDULE=pipelined: a persistent launch of one block per SM for one GEMM, each
// block taking block tiles (tile, feature block) round-robin, feature block fastest. A producer
// warpgroup fills kStages stages ahead and two consumer warpgroups run the same wgmma steps as
// wgmma_tile, each stage handed over by mbarriers: `full` completes when the stage's bytes have
// landed, `empty` when both consumer warpgroups' wgmma reading it have retired. So loads never
// wait on a block-wide barrier, and the next block tile's loads run under this one's epilogue.
// W13 stores its fragments directly; W2 writes its outputs into a staging buffer of their own
// and copies each token row out with one bulk copy, which the consumers do not wait for
// (docs/native-backend.md#w2s-outputs-leave-by-bulk-copies). The 256 weight rows come by
// TMA (two 128-row boxes, in the 128-byte swizzle the descriptors read); W2's token rows, which
// are consecutive positions, by one more box; W13's, gathered through the plan (TMA cannot),
// by cp.async from the whole producer warpgroup (one warp could not issue them fast enough:
// measured 2x slower). Same sums in the same order as wgmma_tile, so the outputs are
// bit-identical. docs/native-backend.md#the-warp-specialised-pipeline.
template <class C, bool kGated>
struct Pipelined : C {
  static constexpr int kConsumerThreads = C::kThreads, kProducerThreads = 128;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  static constexpr int kStageBytes = (C::kStageW + C::kStageX) * 2;
  // The token rows each producer thread copies: 16-byte chunk t % 8 of rows t / 8 + 16 j.
  static constexpr int kCopyRows = C::kTokens * C::kChunks / kProducerThreads;
  // W2's staging buffer: the block tile's outputs as [tokens][kRows features], rows padded by 16
  // bytes (bank-conflict-free fragment writes; rows stay 16-byte aligned for the bulk copies).
  static constexpr bool kStaged = !kGated;
  // The wide tile stages its 128 token rows 64 at a time, so that its W2 keeps 4 stages (all 128
  // at once left 3, which measured up to 12 % slower).
  static constexpr int kStagingTokens = C::kTokens < 128 ? C::kTokens : 64;
  static constexpr int kStagingStride = C::kRows + 8;
  static constexpr int kStagingBytes = kStaged ? kStagingTokens * kStagingStride * 2 : 0;
  // As many stages as fit beside the staging buffer: wide and W13 wide112 and wide160 4, W2
  // wide112 and wide160 3, W2 medium, wide80 and wide96 4, the others 5. The stages, the staging
  // buffer, then the barriers.
  static constexpr int kStages = pipeline_stages(kStageBytes, kStagingBytes);
  static constexpr int kSmemBytes = pipeline_smem_bytes(kStages, kStageBytes, kStagingBytes);
  // Tiles of more than 128 tokens hold kTokens accumulators per consumer thread (two m64 tiles of
  // kTokens / 2), more than fit the 168 registers each of 384 threads gets: the producer
  // warpgroup, which holds no accumulators, hands registers to the consumers (setmaxnreg).
  static constexpr bool kSplitRegisters = C::kTokens > 128;
  // Split tiles (WgmmaSplit): the third consumer warpgroup holds the tail's accumulators only.
  static constexpr int kTail = [] {
    if constexpr (requires { C::kTail; })
      return C::kTail;
    else
      return 0;
  }();
  static constexpr int kTailThreads = kTail > 0 ? 128 : 0;
  static constexpr int kProducerRegisters = 56, kConsumerRegisters = kTail > 0 ? 168 : 224,
                       kTailRegisters = 112;
  static_assert(kProducerThreads * kProducerRegisters +
                        (kConsumerThreads - kTailThreads) * kConsumerRegisters +
                        kTailThreads * kTailRegisters <=
                    65536 / kThreads / 8 * 8 * kThreads,
                "the split stays within what the block was launched with");
  static_assert(C::kRows == 2 * kMapRows && C::kTokens * C::kChunks % kProducerThreads == 0);
  static_assert(kStages >= 2 && kSmemBytes <= kPipelineMaxSmem,
                "a stage fills while another is read");
  static_assert(kStageBytes % 1024 == 0 && C::kStageW * 2 % 1024 == 0,
                "every box lands on a swizzle atom");
};
// The stage counts above (and docs/native-backend.md), W13 then W2.
static_assert(Pipelined<WgmmaMedium, true>::kStages == 5 &&
              Pipelined<WgmmaMedium, false>::kStages == 4);
static_assert(Pipelined<WgmmaWide80, true>::kStages == 5 &&
              Pipelined<WgmmaWide80, false>::kStages == 4);
static_assert(Pipelined<WgmmaWide96, true>::kStages == 5 &&
              Pipelined<WgmmaWide96, false>::kStages == 4);
static_assert(Pipelined<WgmmaWide112, true>::kStages == 4 &&
              Pipelined<WgmmaWide112, false>::kStages == 3);
static_assert(Pipelined<WgmmaWide, true>::kStages == 4 &&
              Pipelined<WgmmaWide, false>::kStages == 4);
static_assert(Pipelined<WgmmaWide160, true>::kStages == 4 &&
              Pipelined<WgmmaWide160, false>::kStages == 3);
static_assert(Pipelined<WgmmaSplit160, true>::kStages == 4);

// kCtas > 1 (HARNESS_NATIVE_SCHEDULE=clustered): clusters of kCtas CTAs take the unit (tiles
// kCtas p ... kCtas p + kCtas - 1 of the table, one feature block), one tile each. Where all are
// the same expert's (or past the table's end: empty tiles), they need the same weight rows, and the
// two weight boxes of each stage are fetched once for all of them, by CTAs in turn (box b of K step
// s by rank (2s + b) % kCtas; TMA multicast), so every weight byte crosses L2 once per cluster
// instead of once per tile; otherwise each loads its own. A stage is refilled once every CTA's
// consumers have freed it, and the CTAs leave together.
template <class C, bool kGated, int kCtas>
__global__ void __launch_bounds__(Pipelined<C, kGated>::kThreads, 1)
    expert_gemm_pipelined(GemmArgs a, const __grid_constant__ CUtensorMap weights,
                          const __grid_constant__ CUtensorMap tokens, int blocks_per_tile) {
#if !HARNESS_WGMMA_ARCH
  __trap();  // never launched: the host runs these on compute capability 9.0 only
#else
  using P = Pipelined<C, kGated>;
  bf16* smem = wgmma_smem();
  bf16* staging = smem + P::kStages * (C::kStageW + C::kStageX);
  auto* full = reinterpret_cast<std::uint64_t*>(staging + P::kStagingBytes / 2);
  std::uint64_t* empty = full + P::kStages;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  constexpr int kConsumerWarps = P::kConsumerThreads / 32;
  constexpr bool kClustered = kCtas > 1;
  const unsigned rank = kClustered ? cluster_rank() : 0u;
  // full: W13, every producer thread's cp.async arrival and the expect_tx; W2, the expect_tx.
  if (tid == 0)
    init_stage_barriers(full, empty, P::kStages, kGated ? P::kProducerThreads + 1 : 1,
                        kConsumerWarps * kCtas);
  if constexpr (kClustered)
    cluster_sync();  // every CTA's barriers are armed before any arrives on or fills another
  else
    __syncthreads();
  const int tiles = *a.num_tiles;
  const int units = (tiles + kCtas - 1) / kCtas * blocks_per_tile;
  const int k_steps = (a.k + C::kBK - 1) / C::kBK;
  auto stage_w = [&](int stage) { return smem + stage * (C::kStageW + C::kStageX); };
  // f(tile table row, first feature, shared weights) for each block tile of this block (of this
  // cluster), in order: units round-robin over the blocks (clusters), feature block fastest.
  const auto for_each_block_tile = [&](const auto& f) {
    const int first = static_cast<int>(blockIdx.x) / kCtas,
              stride = static_cast<int>(gridDim.x) / kCtas;
    for (int unit = first; unit < units; unit += stride) {
      const int feature0 = (unit % blocks_per_tile) * (kGated ? C::kRows / 2 : C::kRows);
      const int row = unit / blocks_per_tile * kCtas;
      if constexpr (kClustered) {
        const int4 lead = a.tiles[row];
        int4 mine = lead;
        bool shared = true;
#pragma unroll
        for (int r = 1; r < kCtas; ++r) {
          const int4 t = row + r < tiles ? a.tiles[row + r] : make_int4(lead.x, lead.y, 0, 0);
          shared = shared && t.x == lead.x;
          if (static_cast<unsigned>(r) == rank) mine = t;
        }
        f(mine, feature0, shared);
      } else {
        f(a.tiles[row], feature0, false);
      }
    }
  };

  if (warp >= kConsumerWarps) {
    if constexpr (P::kSplitRegisters) warpgroup_registers<false, P::kProducerRegisters>();
    const int ptid = tid - P::kConsumerThreads, chunk = ptid % C::kChunks;
    if (!kGated && ptid != 0) {  // W2: one thread issues the boxes
      if constexpr (kClustered) cluster_sync();
      return;
    }
    const int rows_per_expert = kGated ? 2 * a.out_features : a.out_features;
    constexpr unsigned kBytes = (kGated ? C::kStageW : C::kStageW + C::kStageX) * 2;
    int it = 0;
    for_each_block_tile([&](const int4 tile, int feature0, bool shared) {
      const int row0 = tile.x * rows_per_expert + feature0;
      const int row1 = kGated ? row0 + a.out_features : row0 + kMapRows;
      // W13: this thread's token rows, null past the tile.
      const bf16* src[kGated ? P::kCopyRows : 1];
      if constexpr (kGated) {
#pragma unroll
        for (int j = 0; j < P::kCopyRows; ++j) {
          const int row = ptid / C::kChunks + j * (P::kProducerThreads / C::kChunks);
          src[j] = row < tile.z ? a.src + static_cast<std::int64_t>(a.token_of[tile.y + row]) * a.k
                                : nullptr;
        }
      }
      for (int step = 0; step < k_steps; ++step, ++it) {
        const int stage = it % P::kStages, k0 = step * C::kBK;
        mbar_wait(&empty[stage], ((it / P::kStages) & 1) ^ 1);
        bf16* sw = stage_w(stage);
        bf16* sx = sw + C::kStageW;
        if (ptid == 0) {
          mbar_arrive_expect_bytes(&full[stage], kBytes);
          if (kClustered && shared) {
            // This CTA's boxes of the step for all; the others' land here the same way.
#pragma unroll
            for (int b = 0; b < 2; ++b)
              if ((2 * step + b) % kCtas == static_cast<int>(rank))
                tma_load_2d_multicast(sw + b * kMapRows * C::kBK, weights, k0, b ? row1 : row0,
                                      &full[stage], (1u << kCtas) - 1);
          } else {
            tma_load_2d(sw, weights, k0, row0, &full[stage]);
            tma_load_2d(sw + kMapRows * C::kBK, weights, k0, row1, &full[stage]);
          }
          // Rows past the tile are the next tile's (or zeros past the end): they only reach
          // output columns the epilogue drops.
          if constexpr (!kGated) tma_load_2d(sx, tokens, k0, tile.y, &full[stage]);
        }
        if constexpr (kGated) {
          const int col = k0 + chunk * 8;
#pragma unroll
          for (int j = 0; j < P::kCopyRows; ++j) {
            // Rows past the tile are not copied: whatever the stage holds there reaches only
            // output tokens the epilogue drops. Zero-filling them from one address made the
            // tiles' time grow with their padding
            // (docs/native-backend.md#tiles-of-up-to-160-tokens).
            if (src[j] == nullptr) continue;
            const int row = ptid / C::kChunks + j * (P::kProducerThreads / C::kChunks);
            // K past its end is zero-filled: stale values there would meet the weights' zeros
            // inside the sums (NaN x 0).
            const bool ok = col < a.k;
            cp_async16(sx + swizzled<C::kBK>(row, chunk), ok ? src[j] + col : a.src, ok);
          }
          cp_async_arrive(&full[stage]);
        }
      }
    });
    if constexpr (kGated) asm volatile("cp.async.wait_all;\n" ::: "memory");
    // Clustered: every thread of every CTA stays until none arrives on another's barriers.
    if constexpr (kClustered) cluster_sync();
    return;
  }

  const int group = warp / 4, warp_in_group = warp % 4;
  if constexpr (kGated && P::kTail > 0) {
    if (group == 2) {
      warpgroup_registers<false, P::kTailRegisters>();
      // The tail: tokens [128, 128 + kTail) as wgmma's N against the four m64 of weight rows (gate
      // rows 0-127 in m-tiles 0 and 1, their up rows in 2 and 3), as the generic orientation.
      int it = 0;
      for_each_block_tile([&](const int4 tile, int feature0, bool) {
        float acc[4][P::kTail / 8][4];
        consume_stages<P::kStages, kGated, kCtas>(
            full, empty, k_steps, it, lane, rank, [&](int stage, bool accumulated) {
              if (tile.z <= 128) return;  // no tail rows: the stages are only released
              const bf16* sw = stage_w(stage);
              wgmma_weights_by_tokens<C::kBK, P::kTail>(
                  acc, sw, sw + C::kStageW + 128 * C::kBK, [](int j) { return 64 * j; },
                  accumulated);
            });
        order_after_wgmma(reinterpret_cast<float(&)[4 * P::kTail / 2]>(acc));
        if (tile.z > 128)
          store_accumulators<kGated>(
              a, acc, [&](int j) { return 64 * j + 16 * warp_in_group; }, feature0, 128, tile.y,
              tile.z, lane);
      });
      if constexpr (kClustered) cluster_sync();
      return;
    }
  }
  if constexpr (P::kSplitRegisters) warpgroup_registers<true, P::kConsumerRegisters>();
  if constexpr (kGated && (C::kTokens == 128 || P::kTail > 0)) {
    // W13 on the 128-token tile: warpgroup g takes tokens [64g, 64g + 64) against all 256 weight
    // rows, one m64n256k16 per K16 (tokens as A, weights as B), so a K16 step reads 2 x (2 + 8) KB
    // of shared memory instead of 2 x (2 x 2 + 4) KB. Measured 2-11 % faster for W13 from N =
    // 3838 (Qwen3-30B-A3B), and 6 % slower for W2, which keeps the other orientation
    // (docs/native-backend.md#the-warp-specialised-pipeline). acc[i][r]: token 16w + lane/4 +
    // 8(r/2) of the warpgroup's 64, gate row 8i + 2(lane%4) + r%2 for i < 16, up row for i + 16.
    int it = 0;
    for_each_block_tile([&](const int4 tile, int feature0, bool) {
      float acc[C::kRows / 8][4];
      consume_stages<P::kStages, kGated, kCtas>(
          full, empty, k_steps, it, lane, rank, [&](int stage, bool accumulated) {
            const bf16* sw = stage_w(stage);
            const bf16* sx = sw + C::kStageW + group * 64 * C::kBK;
#pragma unroll
            for (int ks = 0; ks < C::kBK / 16; ++ks) {
              if constexpr (P::kTail > 0) {
                // 512 threads launch with 128 registers each, too few for one m64n256's operands
                // (ptxas checks an instruction against the launch's count, not setmaxnreg's): the
                // gate rows and the up rows as two m64n128.
                auto& halves = reinterpret_cast<float(&)[2][C::kRows / 4]>(acc);
#pragma unroll
                for (int h = 0; h < 2; ++h)
                  wgmma_bf16<C::kRows / 2>(halves[h], wgmma_desc(sx + ks * 16),
                                           wgmma_desc(sw + h * (C::kRows / 2) * C::kBK + ks * 16),
                                           accumulated || ks > 0);
              } else {
                wgmma_bf16<C::kRows>(reinterpret_cast<float(&)[C::kRows / 2]>(acc),
                                     wgmma_desc(sx + ks * 16), wgmma_desc(sw + ks * 16),
                                     accumulated || ks > 0);
              }
            }
          });
      order_after_wgmma(reinterpret_cast<float(&)[C::kRows / 2]>(acc));
      // SiLU(gate) * up (silu_mul_of_sums), two neighbouring features per store.
      const int pair = (lane & 3) * 2;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int t = group * 64 + 16 * warp_in_group + lane / 4 + 8 * half;
        if (t >= tile.z) continue;
        bf16* out = a.out + static_cast<std::int64_t>(tile.y + t) * a.out_features + feature0;
#pragma unroll
        for (int i = 0; i < C::kRows / 16; ++i) {
          float v[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            v[e] = silu_mul_of_sums(acc[i][2 * half + e], acc[i + C::kRows / 16][2 * half + e]);
          }
          // The feature is even and I a multiple of 8: both features or neither.
          if (feature0 + 8 * i + pair < a.out_features)
            *reinterpret_cast<__nv_bfloat162*>(out + 8 * i + pair) =
                __floats2bfloat162_rn(v[0], v[1]);
        }
      }
    });
    if constexpr (kClustered) cluster_sync();
    return;
  }

  // Consumers: warpgroup g, as in wgmma_tile.
  const int mtile_row[2] = {kGated ? group * 64 : group * 128,
                            kGated ? C::kRows / 2 + group * 64 : group * 128 + 64};
  const auto row_of = [&](int j) {
    return (kGated ? group * 64 : mtile_row[j]) + 16 * warp_in_group;
  };
  int it = 0;
  for_each_block_tile([&](const int4 tile, int feature0, bool) {
    float acc[2][C::kNT][4];
    consume_stages<P::kStages, kGated, kCtas>(
        full, empty, k_steps, it, lane, rank, [&](int stage, bool accumulated) {
          const bf16* sw = stage_w(stage);
          wgmma_weights_by_tokens<C::kBK, C::kTokens>(
              acc, sw, sw + C::kStageW, [&](int j) { return mtile_row[j]; }, accumulated);
        });
    order_after_wgmma(reinterpret_cast<float(&)[2 * C::kNT * 4]>(acc));
    if constexpr (P::kStaged) {
      // In rounds of kStagingTokens token rows (the wide tile's 128 in two), consumer thread t
      // copies row first + t; before the buffer is rewritten it waits until its previous copy has
      // read it, and every consumer waits for all of those (named barrier 1: the producer
      // warpgroup runs on).
#pragma unroll 1
      for (int first = 0; first < C::kTokens; first += P::kStagingTokens) {
        if (tid < P::kStagingTokens) bulk_wait_read();
        named_barrier_sync(1, P::kConsumerThreads);
        for_each_output<kGated>(acc, row_of, 0, lane, [&](int t, int feature, bf16 v) {
          if (P::kStagingTokens == C::kTokens || (t >= first && t < first + P::kStagingTokens))
            staging[(t - first) * P::kStagingStride + feature] = v;
        });
        fence_async_shared();  // the copies read through the async proxy
        named_barrier_sync(1, P::kConsumerThreads);
        if (tid < P::kStagingTokens && first + tid < tile.z)
          bulk_store(
              a.out + static_cast<std::int64_t>(tile.y + first + tid) * a.out_features + feature0,
              staging + tid * P::kStagingStride, 2 * min(C::kRows, a.out_features - feature0));
      }
    } else {
      store_accumulators<kGated>(a, acc, row_of, feature0, 0, tile.y, tile.z, lane);
    }
  });
  if constexpr (P::kStaged) bulk_wait_all();  // the buffer outlives every copy
  if constexpr (kClustered) cluster_sync();
#endif
}

// W2 where the rule pairs an expert's tiles and its rows fit one tall tile
// (native_w2_tall_tokens; docs/native-backend.md#w2-on-tiles-of-128-features): a block tile is
// 128 output features by kTokens token rows, so an expert's 129-256 rows take one tile per
// feature block instead of two in pairs. Each consumer warpgroup runs one m64 of the features
// against all the token rows (wgmma's N, kTokens / 2 accumulators a thread); both operands come
// by TMA (one 128-row box of W2, one kTokens-row box of act). Otherwise as
// expert_gemm_pipelined: a persistent block per SM, block tiles round-robin with the feature
// block fastest, a producer thread filling the stages ahead through mbarriers. Same sums in the
// same order as every other W2 tile (tested bit for bit against the two launches).
template <int kTokens_>
struct TallW2 {
  static constexpr int kTokens = kTokens_, kRows = 128, kBK = 64;
  static constexpr int kStageW = kRows * kBK, kStageX = kTokens * kBK;
  static constexpr int kStageBytes = (kStageW + kStageX) * 2;
  static constexpr int kConsumerThreads = 256, kThreads = kConsumerThreads + 128;
  static constexpr int kStages = std::min(pipeline_stages(kStageBytes, 0), 6);
  static constexpr int kSmemBytes = pipeline_smem_bytes(kStages, kStageBytes, 0);
  static_assert(kRows == kMapRows && kTokens % 16 == 0 && kTokens <= 256 && kStages >= 3);
  static_assert(kRows == kNativeW2TallBlockRows, "native_launch_waves counts these blocks");
  static_assert(kStageBytes % 1024 == 0, "every box lands on a swizzle atom");
};

template <int kTokens>
__global__ void __launch_bounds__(TallW2<kTokens>::kThreads, 1)
    expert_gemm_w2_tall(GemmArgs a, const __grid_constant__ CUtensorMap weights,
                        const __grid_constant__ CUtensorMap tokens, int blocks_per_tile) {
#if !HARNESS_WGMMA_ARCH
  __trap();  // never launched: the host runs these on compute capability 9.0 only
#else
  using T = TallW2<kTokens>;
  bf16* smem = wgmma_smem();
  auto* full = reinterpret_cast<std::uint64_t*>(smem + T::kStages * (T::kStageW + T::kStageX));
  std::uint64_t* empty = full + T::kStages;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  constexpr int kConsumerWarps = T::kConsumerThreads / 32;
  if (tid == 0) init_stage_barriers(full, empty, T::kStages, 1, kConsumerWarps);
  __syncthreads();
  const int units = *a.num_tiles * blocks_per_tile;
  const int k_steps = (a.k + T::kBK - 1) / T::kBK;
  auto stage_w = [&](int stage) { return smem + stage * (T::kStageW + T::kStageX); };
  const auto for_each_block_tile = [&](const auto& f) {
    for (int unit = static_cast<int>(blockIdx.x); unit < units; unit += static_cast<int>(gridDim.x))
      f(a.tiles[unit / blocks_per_tile], (unit % blocks_per_tile) * T::kRows);
  };

  if (warp >= kConsumerWarps) {
    if (tid != T::kConsumerThreads) return;  // one thread issues the boxes
    int it = 0;
    for_each_block_tile([&](const int4 tile, int feature0) {
      for (int step = 0; step < k_steps; ++step, ++it) {
        const int stage = it % T::kStages, k0 = step * T::kBK;
        mbar_wait(&empty[stage], ((it / T::kStages) & 1) ^ 1);
        bf16* sw = stage_w(stage);
        mbar_arrive_expect_bytes(&full[stage], T::kStageBytes);
        tma_load_2d(sw, weights, k0, tile.x * a.out_features + feature0, &full[stage]);
        // Rows past the tile are the next tile's (or zeros past the end): they only reach
        // output columns the epilogue drops.
        tma_load_2d(sw + T::kStageW, tokens, k0, tile.y, &full[stage]);
      }
    });
    return;
  }

  const int group = warp / 4, warp_in_group = warp % 4;
  int it = 0;
  for_each_block_tile([&](const int4 tile, int feature0) {
    float acc[kTokens / 2];
    consume_stages<T::kStages, false, 1>(
        full, empty, k_steps, it, lane, 0u, [&](int stage, bool accumulated) {
          const bf16* sw = stage_w(stage) + group * 64 * T::kBK;
          const bf16* sx = stage_w(stage) + T::kStageW;
#pragma unroll
          for (int ks = 0; ks < T::kBK / 16; ++ks)
            wgmma_bf16<kTokens>(acc, wgmma_desc(sw + ks * 16), wgmma_desc(sx + ks * 16),
                                accumulated || ks > 0);
        });
    order_after_wgmma(acc);
    // acc[4 n + 2 h + e]: feature 16 w + lane/4 + 8 h of the warpgroup's 64, token 8 n +
    // 2 (lane % 4) + e.
    const int feature = feature0 + 64 * group + 16 * warp_in_group + lane / 4;
#pragma unroll
    for (int n = 0; n < kTokens / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = 8 * n + 2 * (lane & 3) + e;
        if (t >= tile.z) continue;
        bf16* out = a.out + static_cast<std::int64_t>(tile.y + t) * a.out_features;
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (feature + 8 * h < a.out_features)
            out[feature + 8 * h] = __float2bfloat16_rn(acc[4 * n + 2 * h + e]);
      }
    }
  });
#endif
}
#if !HARNESS_WGMMA_ARCH
#pragma nv_diag_default declared_but_not_referenced
#endif
#endif  // HARNESS_WGMMA

// ---------------------------------------------------------------- one token: two launches

// A forward of one token row runs two launches and nothing else (docs/native-backend.md#one-token):
// expert_gemm_one_token<true> multiplies the token by the W13 rows of each local lane and writes
// SiLU(gate) * up per lane; expert_gemm_one_token<false> multiplies those by W2 and sums the
// lanes with their router weights inside the block, so there is neither a plan nor a combine
// launch. With one token a tensor-core tile would pad 15 of its 16 rows: each warp streams its
// weight rows through 16-byte loads and FMAs, the only thing a forward of one token has to do.
constexpr int kOneTokenWarps = 8;
constexpr int kOneTokenMaxLanes = 32;  // the lanes fit one warp's ballot
// Weight rows per warp unit: the gate and up rows of 2 features (W13), or 4 output features (W2).
constexpr int kOneTokenRows = 4;
// 16-byte chunk steps (32 chunks each) of every row a thread loads before it uses any: 2 (8 loads
// in flight), or 3 where that leaves no partial batch of steps in W2's rows (I = 768: one batch of
// 12 loads; measured 0.98-0.99x the forward at N = 1 for Qwen3-30B-A3B, while 3 steps on
// DeepSeek-V3's 8 measured 1.01-1.02x and on W13 no better: docs/native-backend.md#one-token).
constexpr int kOneTokenSteps = 2;
constexpr int kOneTokenWholeSteps = 3;

struct OneTokenArgs {
  const int* ids;
  const float* route_weights;
  int k, experts, first, local;
  int* flag;  // raised for an invalid lane by block 0 of the W13 launch
  const bf16* weights;
  std::int64_t expert_stride;
  int reduction;     // H (W13) or I (W2)
  int out_features;  // I or H
  const bf16* src;   // x [H] (W13) or act [lane][I] (W2)
  bf16* out;         // act [lane][I] (W13) or out [H] (W2)
};

// The block's local lanes in lane order (the order combine_lanes sums them in) and how each warp
// unit splits them: `slices` warps share a lane's rows along K when there are fewer lanes than
// warps, so that every warp streams.
struct OneTokenLanes {
  int lane[kOneTokenMaxLanes];
  int expert[kOneTokenMaxLanes];
  float weight[kOneTokenMaxLanes];
  int count, slices;
  float partial[kOneTokenMaxLanes][kOneTokenRows];  // per unit (lane, slice), per row
};

__device__ void one_token_lanes(const OneTokenArgs& a, bool raise_flag, OneTokenLanes& s) {
  const int t = static_cast<int>(threadIdx.x);
  if (t < 32) {
    const int id = t < a.k ? a.ids[t] : -1;
    const float w = t < a.k ? a.route_weights[t] : 0.0f;
    const bool valid = t >= a.k || lane_is_valid(id, w, a.experts);
    const bool local = t < a.k && valid && id >= a.first && id < a.first + a.local;
    const unsigned locals = __ballot_sync(0xffffffffu, local);
    const unsigned invalid = __ballot_sync(0xffffffffu, !valid);
    if (raise_flag && t == 0 && invalid != 0u) atomicOr(a.flag, 1);
    if (local) {
      const int index = __popc(locals & ((1u << t) - 1u));
      s.lane[index] = t;
      s.expert[index] = id - a.first;
      s.weight[index] = w;
    }
    if (t == 0) {
      s.count = __popc(locals);
      s.slices = max(1, kOneTokenWarps / max(1, s.count));
    }
  }
  __syncthreads();
}

__device__ __forceinline__ float dot8(const uint4& w, const uint4& v) {
  const auto* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
  const auto* v2 = reinterpret_cast<const __nv_bfloat162*>(&v);
  float sum = 0.0f;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 a = __bfloat1622float2(w2[q]), b = __bfloat1622float2(v2[q]);
    sum = fmaf(a.x, b.x, sum);
    sum = fmaf(a.y, b.y, sum);
  }
  return sum;
}

// One warp: the dot products of kOneTokenRows weight rows with `vec` over the 16-byte chunks
// [begin, end) of K, summed over the warp (every thread gets the sums).
template <int kSteps>
__device__ __forceinline__ void warp_dots(const bf16* const (&rows)[kOneTokenRows], const bf16* vec,
                                          int begin, int end, float (&sum)[kOneTokenRows]) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
#pragma unroll
  for (int r = 0; r < kOneTokenRows; ++r) sum[r] = 0.0f;
  for (int c0 = begin + lane; c0 < end; c0 += 32 * kSteps) {
    uint4 w[kSteps][kOneTokenRows], v[kSteps];
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      const int c = c0 + 32 * i;
      const bool ok = c < end;
      v[i] = ok ? __ldg(reinterpret_cast<const uint4*>(vec) + c) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int r = 0; r < kOneTokenRows; ++r)
        w[i][r] = ok ? __ldcs(reinterpret_cast<const uint4*>(rows[r]) + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
#pragma unroll
      for (int r = 0; r < kOneTokenRows; ++r) sum[r] += dot8(w[i][r], v[i]);
  }
#pragma unroll
  for (int r = 0; r < kOneTokenRows; ++r)
    for (int o = 16; o > 0; o /= 2) sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], o);
}

// Gated: block b computes features 2b and 2b + 1 of every local lane (grid I / 2). Not gated:
// output features [4b, 4b + 4) of the token (grid H / 4), summed over the lanes.
template <bool kGated, int kSteps = kOneTokenSteps>
__global__ void __launch_bounds__(kOneTokenWarps * 32, 4) expert_gemm_one_token(OneTokenArgs a) {
  __shared__ OneTokenLanes s;
  constexpr int kFeatures = kGated ? kOneTokenRows / 2 : kOneTokenRows;
  const int f0 = static_cast<int>(blockIdx.x) * kFeatures;
  one_token_lanes(a, kGated && blockIdx.x == 0, s);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int chunks = a.reduction / 8, units = s.count * s.slices;
  for (int u = warp; u < units; u += kOneTokenWarps) {
    const int l = u / s.slices, slice = u % s.slices;
    const bf16* w = a.weights + s.expert[l] * a.expert_stride;
    const bf16* rows[kOneTokenRows];
#pragma unroll
    for (int r = 0; r < kOneTokenRows; ++r) {
      const int row = kGated ? (r < kFeatures ? 0 : a.out_features) + f0 + r % kFeatures : f0 + r;
      rows[r] = w + static_cast<std::int64_t>(row) * a.reduction;
    }
    const bf16* vec = kGated ? a.src : a.src + static_cast<std::int64_t>(s.lane[l]) * a.reduction;
    float sum[kOneTokenRows];
    warp_dots<kSteps>(rows, vec, chunks * slice / s.slices, chunks * (slice + 1) / s.slices, sum);
    if ((threadIdx.x & 31) == 0)
#pragma unroll
      for (int r = 0; r < kOneTokenRows; ++r) s.partial[u][r] = sum[r];
  }
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x);
  // The slices of a lane in slice order, so the sums do not depend on timing.
  const auto lane_sum = [&](int l, int r) {
    float v = 0.0f;
    for (int slice = 0; slice < s.slices; ++slice) v += s.partial[l * s.slices + slice][r];
    return v;
  };
  if constexpr (kGated) {
    // SiLU(gate) * up from the sums rounded to bf16, as in every epilogue (silu_mul_of_sums).
    if (t < s.count * kFeatures) {
      const int l = t / kFeatures, f = t % kFeatures;
      a.out[static_cast<std::int64_t>(s.lane[l]) * a.out_features + f0 + f] =
          __float2bfloat16_rn(silu_mul_of_sums(lane_sum(l, f), lane_sum(l, kFeatures + f)));
    }
  } else {
    // As combine_lanes: each lane's output rounded to bf16, then weighted and summed in fp32.
    if (t < kFeatures) {
      float v = 0.0f;
      for (int l = 0; l < s.count; ++l) v += s.weight[l] * round_bf16(lane_sum(l, t));
      a.out[f0 + t] = __float2bfloat16_rn(v);
    }
  }
}

// One block per token row: out[row] = sum over its local lanes of weight * expert output, in
// fp32, read as 16-byte chunks of 8 bf16 (H is a multiple of 8). Rows with no local lane get 0.
// The row's lane positions and weights are staged in shared memory, and each batch of up to
// kCombineBatch expert rows is loaded before any is added, so the loads overlap instead of
// paying one memory latency each.
constexpr int kCombineBatch = 8;

__global__ void combine_lanes(const bf16* __restrict__ y, const int* __restrict__ lane_pos,
                              const float* __restrict__ weights, int k, int hidden,
                              bf16* __restrict__ out) {
  extern __shared__ int row_lanes[];  // k positions, then k weights
  auto* row_weights = reinterpret_cast<float*>(row_lanes + k);
  const int row = static_cast<int>(blockIdx.x);
  for (int j = static_cast<int>(threadIdx.x); j < k; j += blockDim.x) {
    row_lanes[j] = lane_pos[row * k + j];
    row_weights[j] = weights[row * k + j];
  }
  __syncthreads();
  for (int c = static_cast<int>(threadIdx.x); c < hidden / 8; c += blockDim.x) {
    float sum[8] = {};
    for (int j0 = 0; j0 < k; j0 += kCombineBatch) {
      uint4 v[kCombineBatch];
#pragma unroll
      for (int b = 0; b < kCombineBatch; ++b) {
        const int pos = j0 + b < k ? row_lanes[j0 + b] : -1;
        v[b] = pos < 0
                   ? make_uint4(0, 0, 0, 0)
                   : reinterpret_cast<const uint4*>(y + static_cast<std::int64_t>(pos) * hidden)[c];
      }
#pragma unroll
      for (int b = 0; b < kCombineBatch; ++b) {
        const int j = j0 + b;
        const float w = j < k && row_lanes[j] >= 0 ? row_weights[j] : 0.0f;
        const auto* h2 = reinterpret_cast<const __nv_bfloat162*>(&v[b]);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 f = __bfloat1622float2(h2[q]);
          sum[2 * q] += w * f.x;
          sum[2 * q + 1] += w * f.y;
        }
      }
    }
    uint4 packed;
    auto* o2 = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
    for (int q = 0; q < 4; ++q) o2[q] = __floats2bfloat162_rn(sum[2 * q], sum[2 * q + 1]);
    reinterpret_cast<uint4*>(out + static_cast<std::int64_t>(row) * hidden)[c] = packed;
  }
}

// The tile shapes have the token rows the tile rule plans with.
static_assert(NarrowTile::kTokens == native_tile_tokens(NativeTile::narrow));
// The blocks of the launch model refinement is told of (native_launch_waves) are these.
static_assert(NarrowTile::kRows == kNativeNarrowBlockRows &&
              NarrowTile::kMinBlocks == kNativeNarrowBlocksPerSm);

// The shared-memory opt-in is a per-device attribute of a kernel: set it once for each device.
void allow_dynamic_smem(const void* kernel, int bytes) {
  static std::set<std::pair<const void*, int>> done;  // (kernel, device)
  int device = 0;
  HARNESS_CHECK(cudaGetDevice(&device));
  if (done.contains({kernel, device})) return;
  HARNESS_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.insert({kernel, device});
}

// Feature blocks of a GEMM with `weight_rows` output rows (2I gated, H for W2).
template <class C>
int feature_blocks(int weight_rows) {
  return (weight_rows + C::kRows - 1) / C::kRows;
}

// `kernel` on `grid` blocks of tile C's threads and dynamic shared memory.
template <class C, class Kernel, class... Args>
void launch_blocks(Kernel kernel, dim3 grid, cudaStream_t s, const Args&... args) {
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), C::kSmemBytes);
  kernel<<<grid, C::kThreads, C::kSmemBytes, s>>>(args...);
  HARNESS_CHECK(cudaGetLastError());
}

// A grid of max_tiles x feature blocks of `kernel`, one block tile each.
template <class C, class Kernel, class... Args>
void launch_tiles(Kernel kernel, int weight_rows, int max_tiles, cudaStream_t s,
                  const Args&... args) {
  launch_blocks<C>(
      kernel,
      dim3(static_cast<unsigned>(max_tiles), static_cast<unsigned>(feature_blocks<C>(weight_rows))),
      s, args...);
}

template <class C, bool kGated, bool kWgmma, bool kEvictFirst = false>
void launch_gemm(const GemmArgs& a, int weight_rows, int max_tiles, cudaStream_t s) {
#if HARNESS_WGMMA
  if constexpr (kWgmma) launch_tiles<C>(expert_gemm_wgmma<C, kGated>, weight_rows, max_tiles, s, a);
#endif
  if constexpr (!kWgmma)
    launch_tiles<C>(expert_gemm<C, kGated, false, kEvictFirst>, weight_rows, max_tiles, s, a,
                    FusedRoutes{});
}

template <class C, bool kWgmma = false, bool kEvictFirst = false>
void launch_both(const GemmArgs& up, const GemmArgs& down, int inter, int hidden, int max_tiles,
                 cudaStream_t s) {
  launch_gemm<C, true, kWgmma, kEvictFirst>(up, 2 * inter, max_tiles, s);
  launch_gemm<C, false, kWgmma, kEvictFirst>(down, hidden, max_tiles, s);
}

#if HARNESS_WGMMA
// Both GEMMs as one persistent launch: at most one block per SM, never more blocks than units.
template <class C>
void launch_persistent(const GemmArgs& up, const GemmArgs& down, UnitQueue q, int max_tiles,
                       int sms, cudaStream_t s) {
  const int blocks = std::max(1, std::min(sms, max_tiles * (q.up_blocks + q.down_blocks)));
  launch_blocks<C>(expert_gemms_persistent<C>, dim3(static_cast<unsigned>(blocks)), s, up, down, q);
}
#endif

#if HARNESS_WGMMA
// The launch of one pipelined GEMM kernel: its block, shared memory and cluster of kCtas CTAs.
template <class C, bool kGated, int kCtas>
struct PipelinedLaunch {
  static constexpr auto kKernel = expert_gemm_pipelined<C, kGated, kCtas>;
  cudaLaunchAttribute cluster{};
  cudaLaunchConfig_t config{};

  explicit PipelinedLaunch(cudaStream_t s) {
    using P = Pipelined<C, kGated>;
    allow_dynamic_smem(reinterpret_cast<const void*>(kKernel), P::kSmemBytes);
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim = {static_cast<unsigned>(kCtas), 1, 1};
    config.gridDim = dim3(static_cast<unsigned>(kCtas));
    config.blockDim = dim3(P::kThreads);
    config.dynamicSmemBytes = P::kSmemBytes;
    config.stream = s;
    config.attrs = &cluster;
    config.numAttrs = kCtas > 1 ? 1 : 0;
  }
  PipelinedLaunch(const PipelinedLaunch&) = delete;
  PipelinedLaunch& operator=(const PipelinedLaunch&) = delete;

  // Clusters of this kernel the device can hold resident at once, asked once per device.
  int resident_clusters() const {
    static std::map<int, int> known;  // device -> clusters
    int device = 0;
    HARNESS_CHECK(cudaGetDevice(&device));
    const auto [at, added] = known.try_emplace(device, 0);
    if (added) HARNESS_CHECK(cudaOccupancyMaxActiveClusters(&at->second, kKernel, &config));
    if (at->second < 1)
      throw std::runtime_error("no cluster of " + std::to_string(kCtas) +
                               " CTAs of the pipelined experts kernel fits on the GPU");
    return at->second;
  }
};

// One GEMM as a pipelined launch: one block per SM (clustered: as many clusters as are resident
// at once), never more than the units of `grid_tiles` tiles, the routes' own (the blocks take the
// units the plan wrote in turn, whatever their number). `tokens`: W2's activations (W13 gathers
// its token rows and ignores it).
template <class C, bool kGated, int kCtas>
void launch_pipelined(const GemmArgs& a, const CUtensorMap& weights, const CUtensorMap& tokens,
                      int weight_rows, int grid_tiles, int sms, cudaStream_t s) {
  PipelinedLaunch<C, kGated, kCtas> launch(s);
  const int per_tile = feature_blocks<C>(weight_rows);
  const int units = (grid_tiles + kCtas - 1) / kCtas * per_tile;
  const int clusters = kCtas > 1 ? launch.resident_clusters() : sms;
  const int blocks = kCtas * std::max(1, std::min(clusters, units));
  launch.config.gridDim = dim3(static_cast<unsigned>(blocks));
  HARNESS_CHECK(cudaLaunchKernelEx(&launch.config, launch.kKernel, a, weights, tokens, per_tile));
}

// W2 on tall tiles of kTokens token rows: one block per SM, never more than the units of
// `grid_tiles` tiles (as launch_pipelined). `tokens`: act in boxes of kTokens rows; `w2`: in boxes
// of 128 rows.
template <int kTokens>
void launch_w2_tall(const GemmArgs& down, const CUtensorMap& w2, const CUtensorMap& tokens,
                    int hidden, int grid_tiles, int sms, cudaStream_t s) {
  using T = TallW2<kTokens>;
  const auto kernel = expert_gemm_w2_tall<kTokens>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), T::kSmemBytes);
  const int per_tile = (hidden + T::kRows - 1) / T::kRows;
  const int blocks = std::max(1, std::min(sms, grid_tiles * per_tile));
  kernel<<<static_cast<unsigned>(blocks), T::kThreads, T::kSmemBytes, s>>>(down, w2, tokens,
                                                                           per_tile);
  HARNESS_CHECK(cudaGetLastError());
}

void launch_w2_tall(int tokens, const GemmArgs& down, const CUtensorMap& w2, const CUtensorMap& act,
                    int hidden, int grid_tiles, int sms, cudaStream_t s) {
  static_assert(std::size(kNativeW2TallTokens) == 4);
  switch (tokens) {
    case kNativeW2TallTokens[0]:
      return launch_w2_tall<kNativeW2TallTokens[0]>(down, w2, act, hidden, grid_tiles, sms, s);
    case kNativeW2TallTokens[1]:
      return launch_w2_tall<kNativeW2TallTokens[1]>(down, w2, act, hidden, grid_tiles, sms, s);
    case kNativeW2TallTokens[2]:
      return launch_w2_tall<kNativeW2TallTokens[2]>(down, w2, act, hidden, grid_tiles, sms, s);
    case kNativeW2TallTokens[3]:
      return launch_w2_tall<kNativeW2TallTokens[3]>(down, w2, act, hidden, grid_tiles, sms, s);
  }
  throw std::logic_error("no W2 tile of " + std::to_string(tokens) + " tokens");
}

// The clustered schedule's resident pairs of CTAs, for the configuration.
template <class C>
int resident_pairs() {
  return PipelinedLaunch<C, true, 2>(nullptr).resident_clusters();
}
#endif

// The TMA descriptor of a [rows][k] bf16 matrix in boxes of box_rows x 64, the 128-byte swizzle,
// zero fill past its ends. The encoder is the driver's, found at run time, so that the library
// loads on machines without a driver.
CUtensorMap tma_map(const bf16* w, int k, std::int64_t rows, int box_rows) {
  static const auto encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    HARNESS_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                   cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr)
      throw std::runtime_error(
          "the CUDA driver has no cuTensorMapEncodeTiled (needs 12.0 or later)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t row_bytes[1] = {static_cast<cuuint64_t>(k) * sizeof(bf16)};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)}, unit_strides[2] = {1, 1};
  const CUresult r =
      encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(w), dims, row_bytes, box,
             unit_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(r) +
                             ") for a " + std::to_string(rows) + " x " + std::to_string(k) +
                             " matrix");
  return map;
}

// HARNESS_NATIVE_SCHEDULE's values, by which the configuration names the schedule too.
constexpr std::pair<NativeSchedule, const char*> kScheduleNames[] = {
    {NativeSchedule::launches, "launches"},
    {NativeSchedule::persistent, "persistent"},
    {NativeSchedule::pipelined, "pipelined"},
    {NativeSchedule::clustered, "clustered"}};

const char* schedule_name(NativeSchedule schedule) {
  return std::ranges::find(kScheduleNames, schedule, &std::pair<NativeSchedule, const char*>::first)
      ->second;
}

// How the medium and wide tiles run: wgmma where the build and the GPU have it (as two launches,
// one persistent launch with `queue`, or two pipelined launches), mma.sync otherwise.
struct TileSchedule {
  bool wgmma;
  NativeSchedule schedule;   // wgmma only
  unsigned* queue;           // persistent: ticket, exited
  int* up_done;              // persistent: one count per tile
  const PipelineMaps* maps;  // pipelined
  int sms;
  int grid_tiles;  // pipelined: the tiles its grids are sized for (NativeExperts::grid_tiles_)
};

#if HARNESS_WGMMA
// W13 as a pipelined launch in clusters of kCtas CTAs (1: none).
template <class C, int kCtas>
void launch_pipelined_w13(const TileSchedule& how, const GemmArgs& up, int inter, cudaStream_t s) {
  launch_pipelined<C, true, kCtas>(up, how.maps->w13, how.maps->act, 2 * inter, how.grid_tiles,
                                   how.sms, s);
}
// Both GEMMs as pipelined launches in clusters of kCtas CTAs (1: none).
template <class C, int kCtas>
void launch_pipelined_both(const TileSchedule& how, const GemmArgs& up, const GemmArgs& down,
                           int inter, int hidden, cudaStream_t s) {
  launch_pipelined_w13<C, kCtas>(how, up, inter, s);
  launch_pipelined<C, false, kCtas>(down, how.maps->w2, how.maps->act, hidden, how.grid_tiles,
                                    how.sms, s);
}
#endif

// The kernel configurations of one wgmma-capable tile: its mma.sync fallback and its wgmma tile,
// both with the token rows the tile rule plans with.
template <NativeTile kTile, class Mma, class Wgmma>
struct TileConfigs {
  using MmaTile = Mma;
  using WgmmaTile = Wgmma;
  static_assert(Mma::kTokens == native_tile_tokens(kTile) && Wgmma::kTokens == Mma::kTokens);
};

// f(TileConfigs<...>{}) for tile t (not the narrow tile, which has no wgmma configuration).
template <class F>
void with_tile_configs(NativeTile t, const F& f) {
  switch (t) {
    case NativeTile::medium:
      return f(TileConfigs<NativeTile::medium, MediumTile, WgmmaMedium>{});
    case NativeTile::wide80:
      return f(TileConfigs<NativeTile::wide80, Wide80Tile, WgmmaWide80>{});
    case NativeTile::wide96:
      return f(TileConfigs<NativeTile::wide96, Wide96Tile, WgmmaWide96>{});
    case NativeTile::wide112:
      return f(TileConfigs<NativeTile::wide112, Wide112Tile, WgmmaWide112>{});
    case NativeTile::wide:
      return f(TileConfigs<NativeTile::wide, WideTile, WgmmaWide>{});
    case NativeTile::wide160:
      return f(TileConfigs<NativeTile::wide160, Wide160Tile, WgmmaWide160>{});
    case NativeTile::narrow:
    case NativeTile::split160:
      break;
  }
  throw std::logic_error(std::string("the ") + to_string(t) + " tile has no wgmma configuration");
}

template <class MmaTile, class WgmmaTile>
void launch_tile(const TileSchedule& how, const GemmArgs& up, const GemmArgs& down, int inter,
                 int hidden, int max_tiles, cudaStream_t s) {
#if HARNESS_WGMMA
  if (how.wgmma && how.schedule == NativeSchedule::pipelined) {
    launch_pipelined_both<WgmmaTile, 1>(how, up, down, inter, hidden, s);
    return;
  }
  if (how.wgmma && how.schedule == NativeSchedule::clustered) {
    launch_pipelined_both<WgmmaTile, 2>(how, up, down, inter, hidden, s);
    return;
  }
  if (how.wgmma && how.schedule == NativeSchedule::persistent) {
    const UnitQueue q{how.queue, how.queue + 1, how.up_done, feature_blocks<WgmmaTile>(2 * inter),
                      feature_blocks<WgmmaTile>(hidden)};
    launch_persistent<WgmmaTile>(up, down, q, max_tiles, how.sms, s);
    return;
  }
  if (how.wgmma) {
    launch_both<WgmmaTile, true>(up, down, inter, hidden, max_tiles, s);
    return;
  }
#endif
  launch_both<MmaTile>(up, down, inter, hidden, max_tiles, s);
}

}  // namespace

std::string NativeExperts::configuration() const {
  // The rule's tile first (tools that group points by tile read the first word), then the mode.
  if (one_token_) return "narrow tile (one token: two launches, the plan and the combine in them)";
  const bool wgmma = tile_ != NativeTile::narrow && wgmma_;
  return std::string(to_string(tile_)) + " tile (" + std::to_string(native_tile_tokens(tile_)) +
         " tokens" + (wgmma ? ", wgmma" : "") +
         (schedule_ == NativeSchedule::launches ? ""
                                                : std::string(", ") + schedule_name(schedule_)) +
         (pairs_ > 0 ? " in " + std::to_string(pairs_) + " pairs of SMs" : "") +
         (w2_tall_tokens_ > 0 ? ", W2 on 128 x " + std::to_string(w2_tall_tokens_) + " tiles"
                              : "") +
         (plan_in_gemm_ ? ", routes planned in the W13 blocks" : "") +
         (weights_evict_first_ ? ", weights evict-first in L2)" : ")");
}

NativeExperts::NativeExperts(const ModelGeometry& g, const ExpertOwnership& own, int rows,
                             NativeTile tile, std::span<const int> expert_rows, cudaStream_t s)
    : g_(g), own_(own), rows_(rows), tile_(tile), s_(s), lanes_(rows * g.top_k) {
  const double rows_per_expert = native_rows_per_expert(expert_rows);
  if (g.hidden % 8 != 0 || g.intermediate % 8 != 0)
    throw std::invalid_argument(
        "native experts need H and I multiples of 8 (H=" + std::to_string(g.hidden) +
        ", I=" + std::to_string(g.intermediate) + ")");
  if (own.local_experts > kMaxLocalExperts)
    throw std::invalid_argument("native experts cover at most " + std::to_string(kMaxLocalExperts) +
                                " local experts");
#if HARNESS_WGMMA
  int device = 0, major = 0, minor = 0;
  HARNESS_CHECK(cudaGetDevice(&device));
  HARNESS_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  HARNESS_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  wgmma_ = major == 9 && minor == 0 && std::getenv("HARNESS_NATIVE_NO_WGMMA") == nullptr;
  HARNESS_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device));
#endif
  // HARNESS_NATIVE_SCHEDULE=launches|persistent|pipelined|clustered: how the wgmma tiles run their
  // GEMMs (NativeSchedule; docs/native-backend.md has the A/Bs). Unless it says otherwise,
  // clustered where an expert takes more than one tile (never split160), else pipelined; other
  // tiles ignore it.
  if (wgmma_ && tile_ != NativeTile::narrow)
    schedule_ = tile_ != NativeTile::split160 && native_pairs_tiles(tile_, rows_per_expert)
                    ? NativeSchedule::clustered
                    : NativeSchedule::pipelined;
  if (const char* schedule = std::getenv("HARNESS_NATIVE_SCHEDULE")) {
    const std::string v = schedule;
    const auto* named =
        std::ranges::find_if(kScheduleNames, [&](const auto& name) { return v == name.second; });
    if (named == std::end(kScheduleNames))
      throw std::invalid_argument("HARNESS_NATIVE_SCHEDULE=" + v +
                                  ": expected launches, persistent, pipelined or clustered");
    if (wgmma_ && tile_ != NativeTile::narrow) schedule_ = named->first;
  }
  if (tile_ == NativeTile::split160 && (!wgmma_ || schedule_ != NativeSchedule::pipelined))
    throw std::invalid_argument("the split160 tile runs on wgmma and pipelined only");
#if HARNESS_WGMMA
  if (schedule_ == NativeSchedule::clustered)
    with_tile_configs(tile_, [&](auto configs) {
      pairs_ = resident_pairs<typename decltype(configs)::WgmmaTile>();
    });
#endif
  const int t = native_tile_tokens(tile_);
  max_tiles_ = native_max_tile_count(lanes_, own.local_experts, t);
  grid_tiles_ = std::min(native_tile_count(expert_rows, t), max_tiles_);
  lane_slot_ = DeviceBuffer<int>(static_cast<std::size_t>(lanes_));
  lane_pos_ = DeviceBuffer<int>(static_cast<std::size_t>(lanes_));
  total_counts_ = DeviceBuffer<int>(static_cast<std::size_t>(own.local_experts));
  expert_offsets_ = DeviceBuffer<int>(static_cast<std::size_t>(own.local_experts));
  ticket_ = DeviceBuffer<unsigned>(1);
  // plan_routes leaves these zero after every forward; they start zero.
  HARNESS_CHECK(cudaMemsetAsync(total_counts_.get(), 0, total_counts_.size() * sizeof(int), s_));
  HARNESS_CHECK(cudaMemsetAsync(ticket_.get(), 0, sizeof(unsigned), s_));
  token_of_ = DeviceBuffer<int>(static_cast<std::size_t>(lanes_));
  num_tiles_ = DeviceBuffer<int>(1);
  tiles_ = DeviceBuffer<int4>(static_cast<std::size_t>(std::max(1, max_tiles_)));
  if (schedule_ == NativeSchedule::persistent) {
    // The persistent launch's queue and counts start at zero; its last block resets them.
    unit_queue_ = DeviceBuffer<unsigned>(2);
    up_done_ = DeviceBuffer<int>(static_cast<std::size_t>(std::max(1, max_tiles_)));
    HARNESS_CHECK(cudaMemsetAsync(unit_queue_.get(), 0, 2 * sizeof(unsigned), s_));
    HARNESS_CHECK(cudaMemsetAsync(up_done_.get(), 0, up_done_.size() * sizeof(int), s_));
  }
  act_ = DeviceBuffer<bf16>(static_cast<std::size_t>(lanes_) * g.intermediate);
  if (uses_tensor_maps()) maps_.act = tma_map(act_.get(), g.intermediate, lanes_, t);
  // W2 on tall tiles where the tiles are paired (only with wgmma) and an expert's rows fit one.
  if (schedule_ == NativeSchedule::clustered)
    w2_tall_tokens_ = native_w2_tall_tokens(tile_, rows_per_expert);
  if (tile_ == NativeTile::split160) w2_tall_tokens_ = kNativeW2TallTokens[0];
  if (w2_tall_tokens_ > 0) {
    w2_max_tiles_ = native_max_tile_count(lanes_, own.local_experts, w2_tall_tokens_);
    w2_grid_tiles_ = std::min(native_tile_count(expert_rows, w2_tall_tokens_), w2_max_tiles_);
    w2_tiles_ = DeviceBuffer<int4>(static_cast<std::size_t>(w2_max_tiles_));
    w2_num_tiles_ = DeviceBuffer<int>(1);
    maps_.act_w2 = tma_map(act_.get(), g.intermediate, lanes_, w2_tall_tokens_);
  }
  y_ = DeviceBuffer<bf16>(static_cast<std::size_t>(lanes_) * g.hidden);
  one_token_ = tile_ == NativeTile::narrow && rows_ == 1 && g.top_k <= kOneTokenMaxLanes;
  plan_in_gemm_ = tile_ == NativeTile::narrow && lanes_ <= kFusedLanes && !one_token_;
  weights_evict_first_ = tile_ == NativeTile::narrow && lanes_ >= kEvictFirstLanes;
}

void NativeExperts::forward(const bf16* x, const int* ids, const float* weights, const bf16* w13,
                            const bf16* w2, bf16* out, int* flag) {
  const int h = g_.hidden, inter = g_.intermediate;
  if (one_token_) {
    const OneTokenArgs up{ids,
                          weights,
                          g_.top_k,
                          g_.experts,
                          own_.first_expert,
                          own_.local_experts,
                          flag,
                          w13,
                          static_cast<std::int64_t>(2) * inter * h,
                          h,
                          inter,
                          x,
                          act_.get()};
    OneTokenArgs down = up;
    down.weights = w2, down.expert_stride = static_cast<std::int64_t>(h) * inter;
    down.reduction = inter, down.out_features = h, down.src = act_.get(), down.out = out;
    constexpr unsigned threads = kOneTokenWarps * 32;
    expert_gemm_one_token<true><<<static_cast<unsigned>(inter / 2), threads, 0, s_>>>(up);
    HARNESS_CHECK(cudaGetLastError());
    const bool whole =
        inter % (8 * 32 * kOneTokenWholeSteps) == 0 && inter % (8 * 32 * kOneTokenSteps) != 0;
    (whole ? expert_gemm_one_token<false, kOneTokenWholeSteps>
           : expert_gemm_one_token<false>)<<<static_cast<unsigned>(h / 4), threads, 0, s_>>>(down);
    HARNESS_CHECK(cudaGetLastError());
    return;
  }
  const int lanes_per_thread = (lanes_ + kPlanThreads - 1) / kPlanThreads;
  const unsigned plan_blocks =
      lanes_per_thread <= kPlanLanesPerThread ? 1u : static_cast<unsigned>(lanes_per_thread);
  if (!plan_in_gemm_) {
    plan_routes<<<plan_blocks, kPlanThreads, 0, s_>>>(
        ids, weights, lanes_, g_.top_k, g_.experts, own_.first_expert, own_.local_experts,
        native_tile_tokens(tile_), plan_blocks == 1 ? lanes_per_thread : 1, total_counts_.get(),
        expert_offsets_.get(), ticket_.get(), lane_slot_.get(), token_of_.get(), lane_pos_.get(),
        tiles_.get(), num_tiles_.get(), w2_tall_tokens_, w2_tiles_.get(), w2_num_tiles_.get(),
        flag);
    HARNESS_CHECK(cudaGetLastError());
  }
  if (plan_blocks > 1) {
    scatter_routes<<<plan_blocks, kPlanThreads, 0, s_>>>(ids, lanes_, g_.top_k, own_.first_expert,
                                                         lane_slot_.get(), expert_offsets_.get(),
                                                         lane_pos_.get(), token_of_.get());
    HARNESS_CHECK(cudaGetLastError());
  }
  const GemmArgs up{w13,
                    static_cast<std::int64_t>(2) * inter * h,
                    h,
                    inter,
                    x,
                    token_of_.get(),
                    tiles_.get(),
                    num_tiles_.get(),
                    act_.get()};
  const GemmArgs down{w2,           static_cast<std::int64_t>(h) * inter,
                      inter,        h,
                      act_.get(),   token_of_.get(),
                      tiles_.get(), num_tiles_.get(),
                      y_.get()};
  if (uses_tensor_maps() && (w13 != mapped_w13_ || w2 != mapped_w2_)) {
    const std::int64_t experts = own_.local_experts;
    maps_.w13 = tma_map(w13, h, experts * 2 * inter, kMapRows);
    maps_.w2 = tma_map(w2, inter, experts * h, kMapRows);
    mapped_w13_ = w13, mapped_w2_ = w2;
  }
  const TileSchedule how{wgmma_, schedule_, unit_queue_.get(), up_done_.get(),
                         &maps_, sms_,      grid_tiles_};
#if HARNESS_WGMMA
  // W2 on the tall tiles' own table (plan_routes wrote it beside W13's).
  const auto tall_w2 = [&] {
    GemmArgs tall = down;
    tall.tiles = w2_tiles_.get(), tall.num_tiles = w2_num_tiles_.get();
    launch_w2_tall(w2_tall_tokens_, tall, maps_.w2, maps_.act_w2, h, w2_grid_tiles_, sms_, s_);
  };
  if (tile_ == NativeTile::split160) {
    launch_pipelined_w13<WgmmaSplit160, 1>(how, up, inter, s_);
    tall_w2();
  } else
#endif
      if (tile_ != NativeTile::narrow) {
    with_tile_configs(tile_, [&](auto configs) {
      using C = decltype(configs);
#if HARNESS_WGMMA
      if (w2_tall_tokens_ > 0) {  // clustered W13, then W2 on its own tiles
        launch_pipelined_w13<typename C::WgmmaTile, 2>(how, up, inter, s_);
        tall_w2();
        return;
      }
#endif
      launch_tile<typename C::MmaTile, typename C::WgmmaTile>(how, up, down, inter, h, max_tiles_,
                                                              s_);
    });
  } else if (plan_in_gemm_) {
    const FusedRoutes routes{ids,
                             weights,
                             lanes_,
                             g_.top_k,
                             g_.experts,
                             own_.first_expert,
                             own_.local_experts,
                             flag,
                             lane_pos_.get(),
                             token_of_.get(),
                             tiles_.get(),
                             num_tiles_.get()};
    launch_tiles<NarrowTile>(expert_gemm<NarrowTile, true, true>, 2 * inter, max_tiles_, s_, up,
                             routes);
    launch_gemm<NarrowTile, false, false>(down, h, max_tiles_, s_);
  } else if (weights_evict_first_) {
    launch_both<NarrowTile, false, true>(up, down, inter, h, max_tiles_, s_);
  } else {
    launch_both<NarrowTile>(up, down, inter, h, max_tiles_, s_);
  }
  const std::size_t lane_bytes = static_cast<std::size_t>(g_.top_k) * 8;
  // One 16-byte chunk per thread where H allows (H/8 threads, a multiple of 32, at most 1024).
  const int threads = std::clamp((h / 8 + 31) / 32 * 32, 32, 1024);
  combine_lanes<<<static_cast<unsigned>(rows_), threads, lane_bytes, s_>>>(
      y_.get(), lane_pos_.get(), weights, g_.top_k, h, out);
  HARNESS_CHECK(cudaGetLastError());
}

}  // namespace moe::cuda
