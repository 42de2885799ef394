// Device entry points used by the GPU tests to drive kernels with hand-made inputs
// (route-validation cases), outside the Workload protocol.
#pragma once

#include <vector>

#include "kernels/reference.h"

namespace moe {

struct DeviceExpertsResult {
  std::vector<float> out;  // [rows][H]
  bool route_error = false;
};

// Runs the cublas_grouped `experts` component once on device `device` with the given routes
// (which may contain invalid lanes) and weights.
[[nodiscard]] DeviceExpertsResult run_experts_on_device(int device, const ModelGeometry& g,
                                                        const Target& t,
                                                        const std::vector<float>& x,
                                                        const Routes& routes, const MlpWeights& w);

}  // namespace moe
