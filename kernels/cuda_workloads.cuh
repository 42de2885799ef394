// One Workload type per component of the CUDA backends; make_cuda_workload is the only place
// that chooses by component. Internal to kernels/: include only from .cu files.
#pragma once

#include <cublas_v2.h>

#include <memory>
#include <string>

#include "kernels/device_weights.cuh"
#include "kernels/workload.h"

namespace moe::cuda {

// The experts implementations of the CUDA backends (the other components are shared).
[[nodiscard]] bool known_cuda_backend(const std::string& name);

// `native` selects NativeExperts for the experts component (the others are shared).
[[nodiscard]] std::unique_ptr<Workload> make_cuda_workload(
    const WorkloadSpec& spec, std::shared_ptr<const CudaWeights> weights, cudaStream_t s,
    cublasHandle_t blas, bool native);

}  // namespace moe::cuda
