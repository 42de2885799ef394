// Whether a build of the CUDA kernels has code a GPU can run, and the error when it has not: host
// code that builds without CUDA (its test runs everywhere).
#pragma once

#include <string>
#include <string_view>

namespace moe {

// The CMAKE_CUDA_ARCHITECTURES entry that gives a GPU of compute capability major.minor code of
// its own: 90a on 9.0 (the wgmma kernels need it), else the number (80, 86, 100, ...).
[[nodiscard]] std::string cuda_architecture_for(int major, int minor);

// The one error for a GPU that this build has no code for: the GPU, its compute capability, the
// architectures the build was configured with (`built`, comma-separated) and the configure option
// that adds the GPU's to them.
[[nodiscard]] std::string no_device_code_message(int device, std::string_view gpu_name, int major,
                                                 int minor, std::string_view built);

}  // namespace moe
