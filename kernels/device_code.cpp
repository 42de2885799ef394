#include "kernels/device_code.h"

#include <algorithm>

namespace moe {

std::string cuda_architecture_for(int major, int minor) {
  return std::to_string(major * 10 + minor) + (major == 9 && minor == 0 ? "a" : "");
}

std::string no_device_code_message(int device, std::string_view gpu_name, int major, int minor,
                                   std::string_view built) {
  std::string both(built);
  std::replace(both.begin(), both.end(), ',', ';');
  const auto own = cuda_architecture_for(major, minor);
  both += ";" + own;
  return "GPU " + std::to_string(device) + " (" + std::string(gpu_name) + ", compute capability " +
         std::to_string(major) + "." + std::to_string(minor) +
         ") has no code in this build of the CUDA kernels (CMAKE_CUDA_ARCHITECTURES=" +
         std::string(built) + "): configure with -DCMAKE_CUDA_ARCHITECTURES=\"" + both + "\" (or " +
         own + " alone) and rebuild";
}

}  // namespace moe
