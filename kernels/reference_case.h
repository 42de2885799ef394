// The host-side stimuli of one workload and their CPU reference outputs per bank. The CPU backend
// times the reference itself; GPU backends upload the same stimuli and compare against it.
#pragma once

#include <vector>

#include "kernels/reference.h"
#include "kernels/stimulus.h"
#include "kernels/workload.h"

namespace moe {

struct ReferenceCase {
  WorkloadSpec spec;
  int rows = 0;                 // rows the component reads/writes
  std::vector<float> x;         // [rows][H] input (hidden states; reduced rows for finalize_copy)
  std::vector<float> routed;    // [rows][H] routed output (wrapper input)
  std::vector<float> router;    // [E][H] (gate_routing)
  Routes routes;                // experts input routes (global ids)
  std::vector<MlpWeights> banks;  // routed experts: one per bank; wrapper: shared experts (1)

  explicit ReferenceCase(const WorkloadSpec& s);
  // Runs the reference for `bank` into `out` (and `routes_out` for gate_routing).
  void run(int bank, std::vector<float>& out, Routes* routes_out) const;
  [[nodiscard]] std::size_t output_size() const;
};

}  // namespace moe
