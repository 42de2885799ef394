// The `native` experts backend's tile rule (docs/native-backend.md#tile-choice), host code that
// builds without CUDA: which token tile a forward runs for its rows per expert, and the rows per
// expert where that choice makes the time step (docs/measurement.md#grid), which the planner
// places grid rows around.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/job_spec.h"
#include "core/refinement.h"

namespace moe {

// Token rows per tile: narrow 16, medium 64, wide80 80, wide96 96, wide112 112, wide 128, wide160
// 160. The tiles between medium and wide size an expert's tiles to its rows in steps of 16
// (docs/native-backend.md#tiles-sized-to-the-rows). wide160 is built and tested but not among the
// rule's tiles (kNativeRuleTiles): only HARNESS_NATIVE_TILE runs it, until the sweep says the rule
// should (docs/native-backend.md#tiles-of-up-to-160-tokens).
// split160 (experiment, HARNESS_NATIVE_TILE only, not in kNativeTiles): W13 as 128 tokens in
// wgmma's M plus a 32-token tail in N, pipelined; W2 on tall tiles of 160 tokens.
enum class NativeTile { narrow, medium, wide80, wide96, wide112, wide, wide160, split160 };
inline constexpr NativeTile kNativeTiles[] = {
    NativeTile::narrow,  NativeTile::medium, NativeTile::wide80, NativeTile::wide96,
    NativeTile::wide112, NativeTile::wide,   NativeTile::wide160};
// Experiments HARNESS_NATIVE_TILE also runs, on fewer schedules than kNativeTiles (split160:
// wgmma, pipelined; docs/native-backend.md#w13-on-split-tiles).
inline constexpr NativeTile kNativeExperimentTiles[] = {NativeTile::split160};
inline constexpr NativeTile kNativeRuleTiles[] = {NativeTile::narrow,  NativeTile::medium,
                                                  NativeTile::wide80,  NativeTile::wide96,
                                                  NativeTile::wide112, NativeTile::wide};
[[nodiscard]] const char* to_string(NativeTile t);
[[nodiscard]] constexpr int native_tile_tokens(NativeTile t) {
  switch (t) {
    case NativeTile::narrow:
      return 16;
    case NativeTile::medium:
      return 64;
    case NativeTile::wide80:
      return 80;
    case NativeTile::wide96:
      return 96;
    case NativeTile::wide112:
      return 112;
    case NativeTile::wide:
      return 128;
    case NativeTile::wide160:
    case NativeTile::split160:
      return 160;
  }
  return 0;
}
// The tile of kNativeRuleTiles that minimises the predicted cost of the padded work when each
// active expert has `rows_per_expert` rows (the forward's mean: local assignments / active local
// experts).
[[nodiscard]] NativeTile native_tile_for(double rows_per_expert);
// Its predicted cost, in units of one full medium tile: tiles per expert x the tile's cost.
[[nodiscard]] double native_tile_cost(NativeTile t, double rows_per_expert);
// Whether a wgmma tile runs its GEMMs in clusters of two CTAs that share (multicast) the weight
// loads of neighbouring tiles (the clustered schedule): where an expert takes more than one tile.
// With one tile per expert the pairs are tiles of different experts, which share nothing and
// measured 1-2 % slower; clusters of three and four tiles measured slower than pairs
// (docs/native-backend.md#clusters-of-tiles-share-their-weights).
[[nodiscard]] bool native_pairs_tiles(NativeTile t, double rows_per_expert);
// Where the tiles are paired and an expert's rows fit one of them, W2 runs instead on tiles of 128
// output features by this many token rows, one per expert: the fewest of 160, 192, 224 and 256
// that hold ceil(rows_per_expert); 0 elsewhere, where W2 runs the tile's own shape. Measured
// 4-14 % faster than W2 in pairs of 256-row tiles from 145 to 256 rows per expert, and about
// even from 164 to 186 (docs/native-backend.md#w2-on-tiles-of-128-features).
inline constexpr int kNativeW2TallTokens[] = {160, 192, 224, 256};
[[nodiscard]] int native_w2_tall_tokens(NativeTile t, double rows_per_expert);

// The mean local rows per active expert of `expert_rows` (the local rows of each active expert of
// the routes a forward runs), 0 for none: what picks the tile.
[[nodiscard]] double native_rows_per_expert(std::span<const int> expert_rows);
// Tiles of `tokens` token rows that hold those experts' rows, each expert's padded to whole tiles:
// the length of the tile table a forward on those routes builds (at least 1).
[[nodiscard]] int native_tile_count(std::span<const int> expert_rows, int tokens);
// The most tiles of `tokens` rows any routes of `lanes` rows over `local_experts` experts need
// (what the tile tables are allocated for): ceil(c_e / t) <= c_e / t + 1 for each expert with rows.
[[nodiscard]] int native_max_tile_count(int lanes, int local_experts, int tokens);

// Rows per expert b, up to `max_rows`, where the `native` forward changes between b and more
// rows per expert: the tile changes, or the tiles per expert of an expert with b + 1 rows. A
// forward whose mean lies in (b, b + 1) mixes experts of both sides. Ascending.
[[nodiscard]] std::vector<std::int64_t> native_time_steps(std::int64_t max_rows);

// The launches' block shapes (static_asserts in native_experts.cu hold them to the kernels): the
// narrow tile's blocks have 64 weight rows and two fit an SM; every wgmma tile's have 256 (in
// clusters of two CTAs where the tiles are paired); W2's tall tiles have 128 output features.
inline constexpr int kNativeNarrowBlockRows = 64;
inline constexpr int kNativeNarrowBlocksPerSm = 2;
inline constexpr int kNativeWgmmaBlockRows = 256;
inline constexpr int kNativeW2TallBlockRows = 128;

// The launch waves (W13, W2) of the native forward of `activated` local experts sharing
// `assignments` rows as the stimuli share them (counts differing by at most one) on `sms` SMs:
// each GEMM's block tiles run ceil(units / slots) at a time, one per SM (one per pair of SMs for
// paired tiles, two per SM for the narrow tile), so its time steps where that count changes
// (docs/native-backend.md#launch-waves-set-the-time-off-balanced-routing). The narrow tile's grid
// is the bound's, not the routes' own (its empty blocks leave at once), so there the waves are the
// working blocks'. The one-token path is not modelled (N = 1 has one point per row), nor the
// mma.sync fallback of GPUs without wgmma (sm_90 is what the native kernels are tuned for); a
// wrong count only costs refinement a few columns that bracket no step.
[[nodiscard]] std::array<std::int64_t, 2> native_launch_waves(const ModelGeometry& g, int sms,
                                                              std::int64_t activated,
                                                              std::int64_t assignments);

// The steps a backend declares (docs/measurement.md#grid): `native`'s tile rule; none for the
// others (their steps, if any, are for refinement to find).
[[nodiscard]] std::vector<std::int64_t> expert_time_steps(std::string_view backend,
                                                          std::int64_t max_rows);
// The same, up to the most rows per active expert of any grid point of `job` (the largest
// gathered row count of any target, all on one expert's share): what make_plan takes.
[[nodiscard]] std::vector<std::int64_t> expert_time_steps(std::string_view backend,
                                                          const JobSpec& job);

// The launch waves a backend declares for refinement (core's ExpertWaves): `native`'s on
// `sm_count` SMs, the staircase model's; none for the others.
[[nodiscard]] ExpertWaves expert_launch_waves(std::string_view backend, const ModelGeometry& g,
                                              int sm_count);

}  // namespace moe
