#include "kernels/native_tile_rule.h"

#include <algorithm>
#include <cmath>

#include "core/planner.h"
#include "kernels/staircase_backend.h"

namespace moe {

const char* to_string(NativeTile t) {
  switch (t) {
    case NativeTile::narrow:
      return "narrow";
    case NativeTile::medium:
      return "medium";
    case NativeTile::wide80:
      return "wide80";
    case NativeTile::wide96:
      return "wide96";
    case NativeTile::wide112:
      return "wide112";
    case NativeTile::wide:
      return "wide";
    case NativeTile::wide160:
      return "wide160";
    case NativeTile::split160:
      return "split160";
  }
  return "?";
}

namespace {

// Each tile streams its expert's whole weight block for its token rows, so a forward costs about
// (tiles per expert) x (cost of one tile); a wider tile costs more (its token rows' loads and
// flops) but needs fewer tiles. Tile costs relative to a full medium tile, from the H200 bench
// (docs/native-backend.md#tile-choice), Qwen3-30B-A3B EP1: the narrow tile 309 / 376 µs; the
// wgmma tiles on the line from the medium tile (1) to the wide one (476 / 376), on which the
// 96-token tile measured (1.13), so each 16 tokens more cost the same.
double tile_cost(NativeTile t) {
  if (t == NativeTile::narrow) return 309.0 / 376.0;
  constexpr double kWide = 476.0 / 376.0;
  const int medium = native_tile_tokens(NativeTile::medium),
            wide = native_tile_tokens(NativeTile::wide);
  return 1.0 + (kWide - 1.0) * (native_tile_tokens(t) - medium) / (wide - medium);
}

// Tiles an expert with `rows` rows takes (at least one).
double tiles_per_expert(NativeTile t, double rows) {
  return std::max(1.0, std::ceil(rows / native_tile_tokens(t)));
}

}  // namespace

double native_rows_per_expert(std::span<const int> expert_rows) {
  if (expert_rows.empty()) return 0.0;
  std::int64_t rows = 0;
  for (const int r : expert_rows) rows += r;
  return static_cast<double>(rows) / static_cast<double>(expert_rows.size());
}

int native_tile_count(std::span<const int> expert_rows, int tokens) {
  int tiles = 0;
  for (const int r : expert_rows) tiles += (r + tokens - 1) / tokens;
  return std::max(1, tiles);
}

int native_max_tile_count(int lanes, int local_experts, int tokens) {
  return (lanes + tokens - 1) / tokens + std::min(local_experts, lanes);
}

double native_tile_cost(NativeTile t, double rows_per_expert) {
  return tiles_per_expert(t, rows_per_expert) * tile_cost(t);
}

bool native_pairs_tiles(NativeTile t, double rows_per_expert) {
  return t != NativeTile::narrow && rows_per_expert > native_tile_tokens(t);
}

int native_w2_tall_tokens(NativeTile t, double rows_per_expert) {
  if (!native_pairs_tiles(t, rows_per_expert)) return 0;
  for (const int tokens : kNativeW2TallTokens)
    if (std::ceil(rows_per_expert) <= tokens) return tokens;
  return 0;
}

NativeTile native_tile_for(double rows_per_expert) {
  NativeTile best = NativeTile::narrow;
  for (const auto t : kNativeRuleTiles)
    if (native_tile_cost(t, rows_per_expert) < native_tile_cost(best, rows_per_expert)) best = t;
  return best;
}

std::vector<std::int64_t> native_time_steps(std::int64_t max_rows) {
  std::vector<std::int64_t> steps;
  for (std::int64_t b = 1; b < max_rows; ++b) {
    // At a mean of exactly b every expert has b rows; just above it some have b + 1.
    const auto rows = static_cast<double>(b);
    const auto at = native_tile_for(rows), above = native_tile_for(rows + 0.5);
    if (at != above || tiles_per_expert(at, rows) != tiles_per_expert(above, rows + 1))
      steps.push_back(b);
  }
  return steps;
}

std::array<std::int64_t, 2> native_launch_waves(const ModelGeometry& g, int sms,
                                                std::int64_t activated, std::int64_t assignments) {
  if (activated < 1 || assignments < 1 || sms < 1) return {0, 0};
  const std::int64_t share = assignments / activated, more = assignments % activated;
  // Tiles of `tokens` rows the experts take, each padded to whole tiles.
  const auto tiles_of = [&](std::int64_t tokens) {
    return more * ((share + 1 + tokens - 1) / tokens) +
           (activated - more) * ((share + tokens - 1) / tokens);
  };
  const auto blocks = [](std::int64_t weight_rows, std::int64_t block_rows) {
    return (weight_rows + block_rows - 1) / block_rows;
  };
  const auto waves = [](std::int64_t units, std::int64_t slots) {
    return (units + slots - 1) / slots;
  };
  const double rows = static_cast<double>(assignments) / static_cast<double>(activated);
  const auto tile = native_tile_for(rows);
  const std::int64_t tiles = tiles_of(native_tile_tokens(tile));
  const std::int64_t gated = 2LL * g.intermediate, hidden = g.hidden;
  if (tile == NativeTile::narrow) {
    const std::int64_t slots = static_cast<std::int64_t>(sms) * kNativeNarrowBlocksPerSm;
    return {waves(tiles * blocks(gated, kNativeNarrowBlockRows), slots),
            waves(tiles * blocks(hidden, kNativeNarrowBlockRows), slots)};
  }
  // Paired tiles run as clusters of two CTAs: a unit is a pair of tiles' feature block.
  const bool paired = native_pairs_tiles(tile, rows);
  const std::int64_t ctas = paired ? 2 : 1, slots = std::max<std::int64_t>(1, sms / ctas);
  const std::int64_t tile_units = (tiles + ctas - 1) / ctas;  // tiles, or pairs of them
  const std::int64_t w13 = waves(tile_units * blocks(gated, kNativeWgmmaBlockRows), slots);
  if (const int tall = native_w2_tall_tokens(tile, rows); tall > 0)
    return {w13, waves(tiles_of(tall) * blocks(hidden, kNativeW2TallBlockRows), sms)};
  return {w13, waves(tile_units * blocks(hidden, kNativeWgmmaBlockRows), slots)};
}

ExpertWaves expert_launch_waves(std::string_view backend, const ModelGeometry& g, int sm_count) {
  if (backend == "native" && sm_count > 0)
    return [g, sm_count](std::int64_t activated, std::int64_t assignments) {
      return native_launch_waves(g, sm_count, activated, assignments);
    };
  if (backend == "staircase_model")
    return [](std::int64_t activated, std::int64_t assignments) {
      return std::array<std::int64_t, 2>{staircase_waves(activated, assignments), 0};
    };
  return {};
}

std::vector<std::int64_t> expert_time_steps(std::string_view backend, std::int64_t max_rows) {
  if (backend == "native") return native_time_steps(max_rows);
  return {};
}

std::vector<std::int64_t> expert_time_steps(std::string_view backend, const JobSpec& job) {
  // The most rows per active expert of any grid point: all N rows on one expert's share.
  std::int64_t max_rows = 1;
  for (const auto& t : job.targets()) {
    const auto axis = expert_token_axis(job, t);
    if (!axis.empty()) max_rows = std::max(max_rows, axis.back());
  }
  return expert_time_steps(backend, max_rows);
}

}  // namespace moe
