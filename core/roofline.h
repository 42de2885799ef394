// Roofline floors of the measured components: the least time the bytes they must move and the
// flops they must do allow on a device with a given bandwidth and tensor rate. `harness bench`
// reports measured times against these.
#pragma once

#include <cstdint>
#include <string>

#include "core/component.h"
#include "core/geometry.h"

namespace moe {

struct Roofline {
  double bytes_per_s = 0;  // e.g. measured device-to-device copy bandwidth (read + write)
  double flops_per_s = 0;  // e.g. measured bf16 GEMM rate
};

struct Floor {
  double bytes = 0, flops = 0, us = 0;
  std::string bound;  // bytes | flops
};

// experts: A experts' weights plus the input and output rows; 6·M·H·I flops (gate, up, down).
// gate_routing: input rows, router weights (its dtype), routes out; 2·N·E·H flops.
// finalize_copy: input and output rows. wrapper: the shared experts' weights, the input, routed
// and output rows; 6·N·H·I_shared·count flops.
[[nodiscard]] Floor floor_of(const ModelGeometry& g, Component c, const GridPoint& p,
                             const Roofline& device);

// Expected number of distinct experts of a pool of `pool` (of E) hit when N tokens each choose k of
// E uniformly: pool * (1 - (1 - k/E)^N).
[[nodiscard]] double expected_distinct_experts(const ModelGeometry& g, int pool,
                                               std::int64_t tokens);

// The A of balanced routing over all E experts: expected_distinct_experts rounded, at least k, at
// most min(E, N·k).
[[nodiscard]] std::int64_t balanced_activated(const ModelGeometry& g, std::int64_t tokens);

}  // namespace moe
