// The CUPTI timer in a build without CUDA (HARNESS_WITH_CUDA=OFF).
#include <stdexcept>

#include "ranks/forward_timer.h"

namespace moe {

std::unique_ptr<ForwardTimer> make_cupti_timer() {
  throw std::runtime_error("CUPTI timing needs a harness built with HARNESS_WITH_CUDA=ON");
}

}  // namespace moe
