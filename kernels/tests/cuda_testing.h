// Device entry points used by the GPU tests to drive kernels with hand-made inputs
// (route-validation cases), outside the Workload protocol.
#pragma once

#include <string>
#include <vector>

#include "kernels/reference.h"

namespace moe {

struct DeviceExpertsResult {
  std::vector<float> out;  // [rows][H]
  bool route_error = false;
};

// Runs the `experts` component of CUDA backend `backend` (cublas_grouped | native) once on
// device `device` with the given routes (which may contain invalid lanes) and weights. With
// `via_graph`, one direct forward runs first, then the forward is captured into a CUDA graph and
// the result is the graph's launch (`native` only: cublas_grouped synchronizes with the host).
[[nodiscard]] DeviceExpertsResult run_experts_on_device(const std::string& backend, int device,
                                                        const ModelGeometry& g, const Target& t,
                                                        const std::vector<float>& x,
                                                        const Routes& routes, const MlpWeights& w,
                                                        bool via_graph = false);

struct DeviceGateResult {
  Routes routes;  // [rows][k]
  bool route_error = false;
};

// Runs the `gate_routing` component of CUDA backend `backend` once on device `device` with
// x [rows][H] (rounded to bf16) and router [E][H] (rounded to g.router_dtype). Outputs are
// poisoned first. With `via_graph`, a direct forward runs first, then the forward is captured
// into a CUDA graph and the result is the graph's launch.
[[nodiscard]] DeviceGateResult run_gate_on_device(const std::string& backend, int device,
                                                  const ModelGeometry& g,
                                                  const std::vector<float>& x,
                                                  const std::vector<float>& router,
                                                  bool via_graph = false);

// The independent GPU reference (kernels/gpu_reference.cuh) on device `device`, on host inputs
// rounded to bf16 (router: to g.router_dtype), for comparison with the CPU reference.
// experts: out [rows][H] for `routes` (invalid lanes allowed) over the target's local experts.
[[nodiscard]] std::vector<float> gpu_reference_experts(int device, const ModelGeometry& g,
                                                       const Target& t, const std::vector<float>& x,
                                                       const Routes& routes, const MlpWeights& w);
// wrapper: routed + the shared experts of `shared`, [rows][H].
[[nodiscard]] std::vector<float> gpu_reference_wrapper(int device, const ModelGeometry& g,
                                                       const std::vector<float>& x,
                                                       const std::vector<float>& routed,
                                                       const MlpWeights& shared);
struct GpuGateReference {
  std::vector<float> dense;    // [rows][E] routed weight per expert (0 where not chosen)
  std::vector<int> ambiguous;  // [rows] 1: the k-th and (k+1)-th expert are a near-tie
};
[[nodiscard]] GpuGateReference gpu_reference_gate(int device, const ModelGeometry& g,
                                                  const std::vector<float>& x,
                                                  const std::vector<float>& router);
// The device comparison: `got` rounded to bf16 against `want` (fp32).
[[nodiscard]] double gpu_relative_error(int device, const std::vector<float>& got,
                                        const std::vector<float>& want);

}  // namespace moe
