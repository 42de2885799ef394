// Entry points of the CUDA backends in a build without CUDA (HARNESS_WITH_CUDA=OFF).
#include <stdexcept>

#include "kernels/device_peaks.h"
#include "kernels/workload.h"

namespace moe {

std::unique_ptr<Backend> make_cuda_backend(const std::string& name, int) {
  throw std::runtime_error("backend '" + name +
                           "' needs CUDA, but this harness was built with "
                           "HARNESS_WITH_CUDA=OFF; use --backend cpu_reference");
}

int cuda_device_count() {
  return 0;
}

DevicePeaks measure_device_peaks(int, int) {
  throw std::runtime_error(
      "measuring device peaks needs a harness built with HARNESS_WITH_CUDA=ON");
}

}  // namespace moe
