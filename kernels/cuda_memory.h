// RAII owners for CUDA runtime and cuBLAS handles, shared by the CUDA backends' translation
// units. Internal to kernels/: include only from .cu files.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda_check.h"

namespace moe::cuda {

using bf16 = __nv_bfloat16;

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    if (n) CUDA_CHECK(cudaMalloc(&p_, n * sizeof(T)));
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
    if (p_) cudaFree(p_);  // no throw from a destructor; errors surface on the next checked call
    p_ = nullptr;
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

template <class T>
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t n) {
    if (n) CUDA_CHECK(cudaMallocHost(&p_, n * sizeof(T)));
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (p_) cudaFreeHost(p_);
  }
  [[nodiscard]] T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

class Stream {
 public:
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { cudaStreamDestroy(s_); }
  [[nodiscard]] cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_{};
};

class Cublas {
 public:
  explicit Cublas(cudaStream_t s) {
    CUBLAS_CHECK(cublasCreate(&h_));
    CUBLAS_CHECK(cublasSetStream(h_, s));
    CUBLAS_CHECK(cublasSetPointerMode(h_, CUBLAS_POINTER_MODE_HOST));
  }
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
  ~Cublas() { cublasDestroy(h_); }
  [[nodiscard]] cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_{};
};

}  // namespace moe::cuda
