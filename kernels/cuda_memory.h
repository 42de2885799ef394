// RAII owners for CUDA runtime and cuBLAS handles, shared by the CUDA backends' translation
// units. Internal to kernels/: include only from .cu files.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "core/checked_call.h"

namespace moe::cuda {

using bf16 = __nv_bfloat16;

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    if (n) HARNESS_CHECK(cudaMalloc(&p_, n * sizeof(T)));
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    release();
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }
  [[nodiscard]] T* get() const { return p_; }
  [[nodiscard]] std::size_t size() const { return n_; }

 private:
  void release() {
    if (p_) HARNESS_CHECK_NOTHROW(cudaFree(p_));
    p_ = nullptr;
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

template <class T>
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t n) {
    if (n) HARNESS_CHECK(cudaMallocHost(&p_, n * sizeof(T)));
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (p_) HARNESS_CHECK_NOTHROW(cudaFreeHost(p_));
  }
  [[nodiscard]] T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

class Stream {
 public:
  Stream() { HARNESS_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { HARNESS_CHECK_NOTHROW(cudaStreamDestroy(s_)); }
  [[nodiscard]] cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_{};
};

class Cublas {
 public:
  explicit Cublas(cudaStream_t s) {
    HARNESS_CHECK(cublasCreate(&h_));
    HARNESS_CHECK(cublasSetStream(h_, s));
    HARNESS_CHECK(cublasSetPointerMode(h_, CUBLAS_POINTER_MODE_HOST));
  }
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
  ~Cublas() { HARNESS_CHECK_NOTHROW(cublasDestroy(h_)); }
  [[nodiscard]] cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_{};
};

}  // namespace moe::cuda
