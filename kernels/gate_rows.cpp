#include "kernels/gate_rows.h"

#include <set>
#include <stdexcept>
#include <string>

#include "core/job_spec.h"

namespace moe {

namespace {

std::int64_t round_up(std::int64_t n, std::int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace

std::int64_t gate_band_rows(int sm_count) {
  if (sm_count < 1)
    throw std::invalid_argument("gate rows need the device's SM count, got " +
                                std::to_string(sm_count));
  return std::int64_t{sm_count} * kGateRowsPerBlock;
}

std::int64_t gate_gemm_rows(std::int64_t rows, int sm_count) {
  const std::int64_t band = gate_band_rows(sm_count);
  if (rows < kGateRowAlignment) return rows;
  if (rows <= kGateFineRows) return round_up(rows, kGateRowAlignment);
  if (rows <= kGateBandsFromRows) return round_up(rows, kGateCoarseAlignment);
  return round_up(rows, band);
}

std::vector<std::int64_t> gate_time_steps(std::string_view backend, int sm_count,
                                          std::int64_t max_rows) {
  if (host_backend(backend)) return {};
  std::set<std::int64_t> steps;
  const std::int64_t band = gate_band_rows(sm_count);
  for (std::int64_t b = band; b < max_rows; b += band) steps.insert(b);
  for (std::int64_t b = kGateFineRows; b <= kGateBandsFromRows && b < max_rows;
       b += kGateCoarseAlignment)
    steps.insert(b);  // the multiples of 64, up to where the first band starts
  return {steps.begin(), steps.end()};
}

}  // namespace moe
