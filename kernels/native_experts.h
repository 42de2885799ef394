// The `native` experts component: our own sm_90 kernels, no host synchronization, so a forward
// is capturable in a CUDA graph. Internal to kernels/: include only from .cu files.
//
// One forward is four kernels (five above 2048 lanes, three at most 16 lanes on the narrow tile,
// two for one token row: expert_gemm_one_token streams W13, then W2 and sums the lanes):
//   1. plan_routes   validates every lane (docs/measurement.md flag), counts local assignments per
//                    expert, scans them into expert offsets and writes a tile table (expert, first
//                    position, rows) for the GEMMs; with one block (<= 2048 lanes) it also
//                    writes the token of every expert-sorted position and the position of every
//                    lane, otherwise scatter_routes does that. At most 16 lanes on the narrow
//                    tile, every W13 block plans the routes itself (no plan_routes launch).
//   2. expert_gemm<gated>   x rows gathered through the plan (fused permute) times W13 of each
//                    tile's expert, SiLU(gate) * up in the epilogue -> act [positions][I].
//   3. expert_gemm<!gated>  act times W2 -> expert outputs [positions][H] (bf16).
//   4. combine_lanes        per token: router-weighted sum of its lanes' expert outputs in fp32.
// The wgmma tiles (medium and wide, sm_90a) run 2 and 3 as warp-specialised persistent launches
// (expert_gemm_pipelined: a producer warpgroup loads stages by TMA and cp.async, two consumer
// warpgroups run wgmma, mbarriers hand the stages over) unless HARNESS_NATIVE_SCHEDULE says
// `launches` (one block per block tile, every thread loading and computing) or `persistent`
// (expert_gemms_persistent: 2 and 3 in one launch, a queue of W13 then W2 block tiles, W2 tiles
// waiting on a per-tile count; faster only where that saves a wave)
// (docs/native-backend.md#the-warp-specialised-pipeline). Where an expert takes more than one
// tile they run in clusters of two CTAs that multicast the weights of neighbouring tiles
// (`clustered`; docs/native-backend.md#clusters-of-tiles-share-their-weights).
// The narrow tile runs bf16 mma.sync tensor-core tiles fed by a multi-stage cp.async pipeline; the
// tile shape is picked from the expected rows per expert: a split-K, 16-token tile that keeps
// enough weight bytes in flight when few rows share an expert, up to 128x128 tiles when many do.
// (Combining in the W2 epilogue with fp32 atomics was measured slower: N*k*H atomics cost more
// than writing and re-reading the bf16 expert outputs; so was the W2 block whose row completes a
// token summing its lanes: docs/native-backend.md.)
#pragma once

#include <cuda.h>

#include <cstdint>
#include <span>
#include <string>

#include "core/geometry.h"
#include "kernels/cuda_memory.h"
#include "kernels/native_tile_rule.h"

namespace moe::cuda {

// The `native` backend's version (Backend::version): 2 since its pipelined grids are sized from
// the routes' own tiles (docs/native-backend.md, "The pipelined grid: the routes' own tiles"); 3
// since the pipelined W13 copies no token rows past a tile (up to 3.5 % faster where an expert's
// last tile is partly empty: docs/native-backend.md, "Tiles of up to 160 tokens"); 4 since the
// launches, the persistent schedule and so the narrow tile copy none either (up to 1.4 % faster
// at a few rows per expert: the same section).
inline constexpr int kNativeExpertsVersion = 4;

// How the medium and wide (wgmma) tiles run their two GEMMs (HARNESS_NATIVE_SCHEDULE): one launch
// each, one persistent launch for both, or one warp-specialised persistent launch each (TMA loads,
// mbarrier stages; the default: docs/native-backend.md#the-warp-specialised-pipeline), the last
// also in clusters of CTAs that share the weight loads of neighbouring tiles of an expert.
enum class NativeSchedule { launches, persistent, pipelined, clustered };

// The TMA descriptors of the pipelined schedule: the weights, and W2's input activations.
struct PipelineMaps {
  CUtensorMap w13{}, w2{}, act{};
  CUtensorMap act_w2{};  // act in boxes of W2's tall tile, where W2 runs one
};

class NativeExperts {
 public:
  // Throws std::invalid_argument for shapes the kernels do not cover (H or I not a multiple of 8,
  // more than 1024 local experts).
  // `expert_rows`: the local rows of each active expert of the routes it is built for. Their mean
  // picks the schedule, and their tiles size the pipelined launches' grids, so that no block
  // starts without a block tile: grids of one block per SM with few block tiles ran at one of
  // several levels up to 22 % apart, drawn anew by each workload (docs/native-backend.md, "The
  // pipelined grid: the routes' own tiles"). Any routes run correctly; routes with more tiles
  // run them in more rounds.
  NativeExperts(const ModelGeometry& g, const ExpertOwnership& own, int rows, NativeTile tile,
                std::span<const int> expert_rows, cudaStream_t s);
  NativeExperts(const NativeExperts&) = delete;
  NativeExperts& operator=(const NativeExperts&) = delete;

  // out[rows][H] = sum over local lanes of weight * expert MLP(x row). `ids`/`weights` are the
  // [rows][k] routes; invalid lanes become padding and set *flag.
  void forward(const bf16* x, const int* ids, const float* weights, const bf16* w13, const bf16* w2,
               bf16* out, int* flag);
  // "medium tile (64 tokens, wgmma, pipelined)".
  [[nodiscard]] std::string configuration() const;

 private:
  [[nodiscard]] bool uses_tensor_maps() const {
    return schedule_ == NativeSchedule::pipelined || schedule_ == NativeSchedule::clustered;
  }
  ModelGeometry g_;
  ExpertOwnership own_;
  int rows_;
  NativeTile tile_;
  cudaStream_t s_;
  int lanes_;
  int max_tiles_;       // the tile table's bound, for any routes
  int grid_tiles_;      // the tiles of the routes it was built for: the pipelined launches' grids
  bool wgmma_ = false;  // medium and wide tiles on Hopper tensor-core wgmma (sm_90a builds)
  NativeSchedule schedule_ = NativeSchedule::launches;  // wgmma tiles only
  bool one_token_ = false;            // one token row: two launches, no plan or combine kernel
  bool plan_in_gemm_ = false;         // narrow tile, few lanes: the W13 blocks plan the routes
  bool weights_evict_first_ = false;  // narrow tile, many lanes: weights load L2 evict-first
  int sms_ = 0;
  int pairs_ = 0;  // clustered: the clusters of two resident at once
  // clustered, 129-256 rows per expert: W2's tiles of 128 features x this many tokens (else 0),
  // with a tile table of their own
  int w2_tall_tokens_ = 0;
  int w2_max_tiles_ = 0;
  int w2_grid_tiles_ = 0;
  DeviceBuffer<int4> w2_tiles_;
  DeviceBuffer<int> w2_num_tiles_;
  DeviceBuffer<int> lane_slot_, lane_pos_, token_of_, num_tiles_, total_counts_, expert_offsets_;
  DeviceBuffer<unsigned> ticket_, unit_queue_;
  DeviceBuffer<int> up_done_;
  DeviceBuffer<int4> tiles_;
  DeviceBuffer<bf16> act_, y_;
  // pipelined: TMA descriptors of W13 and W2 as last passed to forward (re-encoded when they
  // move) and of act_.
  const bf16* mapped_w13_ = nullptr;
  const bf16* mapped_w2_ = nullptr;
  PipelineMaps maps_;
};

}  // namespace moe::cuda
