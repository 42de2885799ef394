#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_workloads.cuh"
#include "kernels/experts_engine.cuh"
#include "kernels/gate_engine.cuh"
#include "kernels/stimulus.h"

namespace moe::cuda {

namespace {

// What every CUDA workload shares: the input rows x [rows][H] (random, seeded from the spec),
// the stream and cuBLAS handle, and verification: for each bank, poison the outputs, run one
// forward and compare sampled rows with the CPU reference.
class CudaWorkload : public Workload {
 public:
  void synchronize() override { HARNESS_CHECK(cudaStreamSynchronize(s_)); }
  bool take_route_error() override { return false; }

  std::vector<double> verify() override {
    std::vector<double> errors;
    for (int b = 0; b < verified_banks(); ++b) {
      poison();
      forward(b);
      synchronize();
      errors.push_back(compare(b));
    }
    return errors;
  }

 protected:
  CudaWorkload(const WorkloadSpec& spec, std::shared_ptr<const CudaWeights> weights, cudaStream_t s,
               cublasHandle_t blas)
      : spec_(spec),
        g_(spec.geometry),
        weights_(std::move(weights)),
        s_(s),
        blas_(blas),
        rows_(static_cast<int>(spec.point.tokens)) {
    if (g_.weight_dtype != Dtype::bf16)
      throw std::invalid_argument("the CUDA backends measure bf16 weights only");
    x_ = DeviceBuffer<bf16>(row_elements());
    fill(x_, spec.seed * 3 + 1, 1.0f, s_);
  }

  [[nodiscard]] virtual int verified_banks() const { return 1; }
  // Outputs to 0xff bytes (NaN in bf16/fp32, -1 in ids) before a verified forward.
  virtual void poison() = 0;
  // Relative error of the last forward's output against the CPU reference of `bank`.
  [[nodiscard]] virtual double compare(int bank) = 0;

  [[nodiscard]] std::size_t row_elements() const {
    return static_cast<std::size_t>(rows_) * g_.hidden;
  }
  [[nodiscard]] std::vector<float> rows_of(const bf16* p, const std::vector<int>& rows,
                                           int width) const {
    std::vector<float> out;
    for (int r : rows) {
      auto v = download_bf16(p + static_cast<std::size_t>(r) * width, width);
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
  [[nodiscard]] const DeviceMlp& bank(int b) const {
    return *weights_->banks.at(static_cast<std::size_t>(b) % weights_->banks.size());
  }
  void poison_buffer(void* p, std::size_t bytes) {
    if (bytes) HARNESS_CHECK(cudaMemsetAsync(p, 0xff, bytes, s_));
  }

  WorkloadSpec spec_;
  const ModelGeometry& g_;
  std::shared_ptr<const CudaWeights> weights_;
  cudaStream_t s_;
  cublasHandle_t blas_;
  int rows_;
  DeviceBuffer<bf16> x_;
};

class GateWorkload final : public CudaWorkload {
 public:
  GateWorkload(const WorkloadSpec& spec, std::shared_ptr<const CudaWeights> weights, cudaStream_t s,
               cublasHandle_t blas)
      : CudaWorkload(spec, std::move(weights), s, blas), flag_(1) {
    HARNESS_CHECK(cudaMemsetAsync(flag_.get(), 0, sizeof(int), s_));
    const std::size_t eh = static_cast<std::size_t>(g_.experts) * g_.hidden;
    const float scale = 1.0f / std::sqrt(static_cast<float>(g_.hidden));
    const void* router = nullptr;
    if (g_.router_dtype == Dtype::fp32) {
      router_f32_ = DeviceBuffer<float>(eh);
      fill(router_f32_, spec.seed * 3 + 2, scale, s_);
      router = router_f32_.get();
    } else {
      router_ = DeviceBuffer<bf16>(eh);
      fill(router_, spec.seed * 3 + 2, scale, s_);
      router = router_.get();
    }
    gate_ = std::make_unique<GateEngine>(g_, rows_, router, s_, blas_);
    ids_ = DeviceBuffer<int>(static_cast<std::size_t>(rows_) * g_.top_k);
    route_weights_ = DeviceBuffer<float>(static_cast<std::size_t>(rows_) * g_.top_k);
    HARNESS_CHECK(cudaStreamSynchronize(s_));
  }

  void forward(int) override {
    gate_->forward(x_.get(), ids_.get(), route_weights_.get(), flag_.get());
  }

  bool take_route_error() override {
    int v = 0;
    HARNESS_CHECK(cudaMemcpyAsync(&v, flag_.get(), sizeof(int), cudaMemcpyDeviceToHost, s_));
    HARNESS_CHECK(cudaMemsetAsync(flag_.get(), 0, sizeof(int), s_));
    HARNESS_CHECK(cudaStreamSynchronize(s_));
    return v != 0;
  }

 private:
  void poison() override {
    poison_buffer(route_weights_.get(), route_weights_.size() * 4);
    poison_buffer(ids_.get(), ids_.size() * 4);
  }

  double compare(int) override {
    const auto rows = sample_rows(rows_, 16, {});
    const auto x = rows_of(x_.get(), rows, g_.hidden);
    const auto router = g_.router_dtype == Dtype::fp32
                            ? download_f32(router_f32_.get(), router_f32_.size())
                            : download_bf16(router_.get(), router_.size());
    Routes want;
    gate_routing_ref(x, static_cast<int>(rows.size()), router, g_, want);
    std::vector<int> ids(ids_.size());
    HARNESS_CHECK(cudaMemcpy(ids.data(), ids_.get(), ids.size() * 4, cudaMemcpyDeviceToHost));
    const auto weights = download_f32(route_weights_.get(), route_weights_.size());
    // Dense [row][E] weight maps: an order-insensitive comparison of the routes.
    std::vector<float> got_dense(rows.size() * g_.experts, 0.0f),
        want_dense(got_dense.size(), 0.0f);
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (int j = 0; j < g_.top_k; ++j) {
        const int gid = ids[static_cast<std::size_t>(rows[i]) * g_.top_k + j];
        if (gid < 0 || gid >= g_.experts) return INFINITY;
        got_dense[i * g_.experts + gid] +=
            weights[static_cast<std::size_t>(rows[i]) * g_.top_k + j];
        want_dense[i * g_.experts + want.ids[i * g_.top_k + j]] += want.weights[i * g_.top_k + j];
      }
    return relative_error(got_dense, want_dense);
  }

  DeviceBuffer<bf16> router_;
  DeviceBuffer<float> router_f32_, route_weights_;
  DeviceBuffer<int> ids_, flag_;
  std::unique_ptr<GateEngine> gate_;
};

class ExpertsWorkload final : public CudaWorkload {
 public:
  ExpertsWorkload(const WorkloadSpec& spec, std::shared_ptr<const CudaWeights> weights,
                  cudaStream_t s, cublasHandle_t blas, bool native)
      : CudaWorkload(spec, std::move(weights), s, blas),
        own_(ExpertOwnership::of(g_, spec.target)),
        rng_(spec.seed),
        out_(row_elements()) {
    routes_ = make_expert_routes(spec.point.tokens, spec.point.activated, spec.point.assignments,
                                 g_, own_, rng_);
    engine_ = std::make_unique<ExpertsEngine>(g_, own_, rows_, s_, blas_, native);
    engine_->upload_routes(routes_);
    HARNESS_CHECK(cudaStreamSynchronize(s_));
  }

  void forward(int b) override { engine_->forward(x_.get(), bank(b), out_.get()); }
  bool take_route_error() override { return engine_->take_flag(); }

 private:
  int verified_banks() const override { return static_cast<int>(weights_->banks.size()); }
  void poison() override { poison_buffer(out_.get(), out_.size() * sizeof(bf16)); }

  double compare(int b) override {
    const int k = g_.top_k;
    std::vector<int> preferred;
    for (int r = 0; r < rows_; ++r)
      for (int j = 0; j < k; ++j)
        if (own_.owns(routes_.ids[static_cast<std::size_t>(r) * k + j])) {
          preferred.push_back(r);
          break;
        }
    // Two rows against bank 0, one row against every other bank.
    const auto rows = sample_rows(rows_, b == 0 ? 2 : 1, preferred);
    // Sub-problem over the sampled rows, local experts compacted in first-use order.
    Routes sub{static_cast<int>(rows.size()), k, {}, {}};
    std::vector<int> experts_used;
    for (int r : rows)
      for (int j = 0; j < k; ++j) {
        const int id = routes_.ids[static_cast<std::size_t>(r) * k + j];
        int mapped = -1;
        if (own_.owns(id)) {
          const int e = id - own_.first_expert;
          auto it = std::find(experts_used.begin(), experts_used.end(), e);
          if (it == experts_used.end()) experts_used.push_back(e), it = experts_used.end() - 1;
          mapped = static_cast<int>(it - experts_used.begin());
        }
        sub.ids.push_back(mapped);
        sub.weights.push_back(routes_.weights[static_cast<std::size_t>(r) * k + j]);
      }
    const auto w = bank(b).download(experts_used);
    const auto x = rows_of(x_.get(), rows, g_.hidden);
    std::vector<float> want(rows.size() * g_.hidden);
    experts_ref(x, sub, w, 0, want, Intermediates::bf16);
    return relative_error(rows_of(out_.get(), rows, g_.hidden), want);
  }

  ExpertOwnership own_;
  Rng rng_;
  Routes routes_;
  DeviceBuffer<bf16> out_;
  std::unique_ptr<ExpertsEngine> engine_;
};

class FinalizeCopyWorkload final : public CudaWorkload {
 public:
  FinalizeCopyWorkload(const WorkloadSpec& spec, std::shared_ptr<const CudaWeights> weights,
                       cudaStream_t s, cublasHandle_t blas)
      : CudaWorkload(spec, std::move(weights), s, blas), out_(row_elements()) {
    HARNESS_CHECK(cudaStreamSynchronize(s_));
  }

  void forward(int) override {
    HARNESS_CHECK(cudaMemcpyAsync(out_.get(), x_.get(), x_.size() * sizeof(bf16),
                                  cudaMemcpyDeviceToDevice, s_));
  }

 private:
  void poison() override { poison_buffer(out_.get(), out_.size() * sizeof(bf16)); }
  double compare(int) override {
    const auto rows = sample_rows(rows_, 64, {});
    return relative_error(rows_of(out_.get(), rows, g_.hidden), rows_of(x_.get(), rows, g_.hidden));
  }

  DeviceBuffer<bf16> out_;
};

class WrapperWorkload final : public CudaWorkload {
 public:
  WrapperWorkload(const WorkloadSpec& spec, std::shared_ptr<const CudaWeights> weights,
                  cudaStream_t s, cublasHandle_t blas)
      : CudaWorkload(spec, std::move(weights), s, blas),
        routed_(row_elements()),
        y1_(static_cast<std::size_t>(rows_) * 2 * g_.shared.intermediate),
        act_(static_cast<std::size_t>(rows_) * g_.shared.intermediate),
        out_(row_elements()) {
    fill(routed_, spec.seed * 3 + 5, 1.0f, s_);
    HARNESS_CHECK(cudaStreamSynchronize(s_));
  }

  void forward(int) override {
    const auto& w = bank(0);
    const int si = g_.shared.intermediate, h = g_.hidden;
    const float one = 1.0f, zero = 0.0f;
    HARNESS_CHECK(cudaMemcpyAsync(out_.get(), routed_.get(), out_.size() * sizeof(bf16),
                                  cudaMemcpyDeviceToDevice, s_));
    for (int e = 0; e < g_.shared.count; ++e) {
      const bf16* w13 = w.w13.get() + static_cast<std::size_t>(e) * 2 * si * h;
      const bf16* w2 = w.w2.get() + static_cast<std::size_t>(e) * h * si;
      HARNESS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, 2 * si, rows_, h, &one, w13,
                                 CUDA_R_16BF, h, x_.get(), CUDA_R_16BF, h, &zero, y1_.get(),
                                 CUDA_R_16BF, 2 * si, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      silu_and_mul<<<blocks_for(static_cast<std::size_t>(rows_) * si), 256, 0, s_>>>(
          y1_.get(), rows_, si, act_.get());
      HARNESS_CHECK(cudaGetLastError());
      // out = act * W2^T + out: the combine with the routed output rides on beta = 1.
      HARNESS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, h, rows_, si, &one, w2,
                                 CUDA_R_16BF, si, act_.get(), CUDA_R_16BF, si, &one, out_.get(),
                                 CUDA_R_16BF, h, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }

 private:
  void poison() override { poison_buffer(out_.get(), out_.size() * sizeof(bf16)); }
  double compare(int) override {
    const auto rows = sample_rows(rows_, 4, {});
    std::vector<int> all(static_cast<std::size_t>(g_.shared.count));
    std::iota(all.begin(), all.end(), 0);
    const auto w = bank(0).download(all);
    std::vector<float> want(rows.size() * g_.hidden);
    wrapper_ref(rows_of(x_.get(), rows, g_.hidden), static_cast<int>(rows.size()),
                rows_of(routed_.get(), rows, g_.hidden), w, want, Intermediates::bf16);
    return relative_error(rows_of(out_.get(), rows, g_.hidden), want);
  }

  DeviceBuffer<bf16> routed_, y1_, act_, out_;
};

}  // namespace

bool known_cuda_backend(const std::string& name) {
  return name == "cublas_grouped" || name == "native";
}

std::unique_ptr<Workload> make_cuda_workload(const WorkloadSpec& spec,
                                             std::shared_ptr<const CudaWeights> weights,
                                             cudaStream_t s, cublasHandle_t blas, bool native) {
  switch (spec.component) {
    case Component::gate_routing:
      return std::make_unique<GateWorkload>(spec, std::move(weights), s, blas);
    case Component::experts:
      return std::make_unique<ExpertsWorkload>(spec, std::move(weights), s, blas, native);
    case Component::finalize_copy:
      return std::make_unique<FinalizeCopyWorkload>(spec, std::move(weights), s, blas);
    case Component::wrapper:
      return std::make_unique<WrapperWorkload>(spec, std::move(weights), s, blas);
  }
  throw std::invalid_argument("unknown component");
}

}  // namespace moe::cuda
