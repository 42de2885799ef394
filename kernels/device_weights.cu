#include <cmath>

#include "kernels/bf16.h"
#include "kernels/cuda_common.cuh"
#include "kernels/device_weights.cuh"

namespace moe::cuda {

DeviceMlp::DeviceMlp(int e, int h, int i, std::uint64_t seed, cudaStream_t s)
    : experts(e),
      hidden(h),
      inter(i),
      w13(static_cast<std::size_t>(e) * 2 * i * h),
      w2(static_cast<std::size_t>(e) * h * i) {
  fill(w13, seed, 1.0f / std::sqrt(static_cast<float>(h)), s);
  fill(w2, seed ^ 0x5bd1e995ULL, 1.0f / std::sqrt(static_cast<float>(i)), s);
  const std::size_t expert_bytes = (static_cast<std::size_t>(3) * inter * hidden) * sizeof(float);
  host_cache_.set_capacity(std::max<std::size_t>(1, kCacheBytes / expert_bytes));
}

MlpView DeviceMlp::download(const std::vector<int>& which) const {
  MlpView v{hidden, inter, {}};
  const std::size_t s13 = static_cast<std::size_t>(2) * inter * hidden,
                    s2 = static_cast<std::size_t>(hidden) * inter;
  for (int e : which) {
    const HostExpert* h = host_cache_.find(e);
    // Never evicts an expert of this request: the view points into it.
    if (!h)
      h = &host_cache_.insert(e, {fetch(w13.get() + e * s13, s13), fetch(w2.get() + e * s2, s2)},
                              which.size());
    v.experts.push_back({h->w13.data(), h->w2.data()});
  }
  return v;
}

std::vector<float> DeviceMlp::fetch(const bf16* p, std::size_t n) const {
  if (staging_size_ < n) {
    staging_ = std::make_unique<PinnedBuffer<std::uint16_t>>(n);
    staging_size_ = n;
  }
  HARNESS_CHECK(cudaMemcpy(staging_->get(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  const std::uint16_t* raw = staging_->get();
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(raw[i]);
  return out;
}

}  // namespace moe::cuda
