// The CUDA gate's row rule (docs/native-backend.md#the-router-gemm-on-rows-padded-to-bands),
// host code that builds without CUDA: how many rows the router GEMM runs for a forward's rows,
// and the rows where the gate's time steps, which the planner places grid rows around.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace moe {

// Rows of one softmax_topk block (one warp per row): its time steps each time every SM gets one
// more block, every gate_band_rows(SMs) rows.
inline constexpr int kGateRowsPerBlock = 4;
// The GEMM's rows: from kGateRowAlignment rows up to kGateFineRows rounded up to a multiple of
// kGateRowAlignment, up to kGateBandsFromRows to a multiple of kGateCoarseAlignment (cuBLAS picks
// other kernels, up to 40 % apart, between nearby multiples of 8 there), above it padded to the
// band's end.
inline constexpr std::int64_t kGateRowAlignment = 8;
inline constexpr std::int64_t kGateFineRows = 256;
inline constexpr std::int64_t kGateCoarseAlignment = 64;
inline constexpr std::int64_t kGateBandsFromRows = 2048;

// Rows of one band on a device with `sm_count` SMs: one softmax_topk block per SM.
[[nodiscard]] std::int64_t gate_band_rows(int sm_count);
// The router GEMM's rows for `rows` routed rows: 1-7 as they are, up to kGateFineRows rounded up
// to a multiple of 8, up to kGateBandsFromRows to a multiple of 64, above it to a multiple of
// gate_band_rows.
[[nodiscard]] std::int64_t gate_gemm_rows(std::int64_t rows, int sm_count);
// Rows b, up to `max_rows`, where the CUDA gate's time changes between b and b + 1 rows: from
// kGateFineRows every row count where the GEMM's rows change (multiples of 64, then the band
// edges) and, everywhere, the softmax_topk's block steps. None for
// the host backends (their steps, if any, are for refinement to find). Ascending.
[[nodiscard]] std::vector<std::int64_t> gate_time_steps(std::string_view backend, int sm_count,
                                                        std::int64_t max_rows);

}  // namespace moe
