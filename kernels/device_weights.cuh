// Expert MLP weights on the device, one bank per DeviceMlp, and their host views for verification.
// Internal to kernels/: include only from .cu files.
#pragma once

#include <memory>
#include <vector>

#include "core/lru_cache.h"
#include "kernels/cuda_memory.h"
#include "kernels/reference.h"
#include "kernels/workload.h"

namespace moe::cuda {

// Expert MLP weights on the device (one bank): w13 [L][2I][H], w2 [L][H][I].
struct DeviceMlp {
  int experts, hidden, inter;
  DeviceBuffer<bf16> w13, w2;
  DeviceMlp(int e, int h, int i, std::uint64_t seed, cudaStream_t s);
  // Host views of the listed experts, in list order. Each expert is downloaded (through a pinned
  // staging buffer) and converted once, then kept in a least-recently-used cache of at most
  // kCacheBytes, so the verification of later points reuses what earlier points fetched. (A
  // count cap that emptied the cache when full made a 128-expert bank miss on most requests.)
  [[nodiscard]] MlpView download(const std::vector<int>& which) const;

 private:
  static constexpr std::size_t kCacheBytes = std::size_t{2} << 30;  // per bank
  struct HostExpert {
    std::vector<float> w13, w2;
  };
  [[nodiscard]] std::vector<float> fetch(const bf16* p, std::size_t n) const;
  mutable LruCache<int, HostExpert> host_cache_;
  mutable std::unique_ptr<PinnedBuffer<std::uint16_t>> staging_;
  mutable std::size_t staging_size_ = 0;
};

struct CudaWeights final : WeightSet {
  std::vector<std::unique_ptr<DeviceMlp>> banks;
};

}  // namespace moe::cuda
