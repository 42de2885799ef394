// Checked calls for the CUDA runtime and cuBLAS: one macro per API, each in do { } while (false).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace moe {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

#define CUDA_CHECK(expr)                                                                          \
  do {                                                                                            \
    const cudaError_t moe_status_ = (expr);                                                       \
    if (moe_status_ != cudaSuccess)                                                               \
      throw ::moe::CudaError(std::string(#expr) + ": " + cudaGetErrorString(moe_status_) + " (" + \
                             __FILE__ + ":" + std::to_string(__LINE__) + ")");                    \
  } while (false)

#define CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                         \
    const cublasStatus_t moe_status_ = (expr);                                                 \
    if (moe_status_ != CUBLAS_STATUS_SUCCESS)                                                  \
      throw ::moe::CudaError(std::string(#expr) + ": cuBLAS status " +                         \
                             std::to_string(static_cast<int>(moe_status_)) + " (" + __FILE__ + \
                             ":" + std::to_string(__LINE__) + ")");                            \
  } while (false)

}  // namespace moe
