// The GPU tests' entry points in a build without CUDA: the tests skip before calling them.
#include <stdexcept>

#include "kernels/tests/cuda_testing.h"

namespace moe {

DeviceExpertsResult run_experts_on_device(const std::string&, int, const ModelGeometry&,
                                          const Target&, const std::vector<float>&, const Routes&,
                                          const MlpWeights&, bool) {
  throw std::runtime_error("run_experts_on_device needs a harness built with HARNESS_WITH_CUDA=ON");
}

DeviceGateResult run_gate_on_device(const std::string&, int, const ModelGeometry&,
                                    const std::vector<float>&, const std::vector<float>&, bool) {
  throw std::runtime_error("run_gate_on_device needs a harness built with HARNESS_WITH_CUDA=ON");
}

std::vector<float> gpu_reference_experts(int, const ModelGeometry&, const Target&,
                                         const std::vector<float>&, const Routes&,
                                         const MlpWeights&) {
  throw std::runtime_error("the GPU reference needs a harness built with HARNESS_WITH_CUDA=ON");
}

std::vector<float> gpu_reference_wrapper(int, const ModelGeometry&, const std::vector<float>&,
                                         const std::vector<float>&, const MlpWeights&) {
  throw std::runtime_error("the GPU reference needs a harness built with HARNESS_WITH_CUDA=ON");
}

GpuGateReference gpu_reference_gate(int, const ModelGeometry&, const std::vector<float>&,
                                    const std::vector<float>&) {
  throw std::runtime_error("the GPU reference needs a harness built with HARNESS_WITH_CUDA=ON");
}

double gpu_relative_error(int, const std::vector<float>&, const std::vector<float>&) {
  throw std::runtime_error("the GPU reference needs a harness built with HARNESS_WITH_CUDA=ON");
}

}  // namespace moe
