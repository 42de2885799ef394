#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_workloads.cuh"
#include "kernels/experts_engine.cuh"
#include "kernels/gate_engine.cuh"
#include "kernels/gpu_reference.cuh"
#include "kernels/stimulus.h"

namespace moe::cuda {

namespace {

// What every CUDA workload shares: the input rows x [rows][H] (random, seeded from the spec;
// x_rows of them, all random, for a kernel that also reads padding rows past the routed ones),
// the stream and cuBLAS handle, and verification: for each bank, poison the outputs, run one
// forward and compare every row with the independent GPU reference (gpu_reference.cuh).
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
               cublasHandle_t blas, std::optional<int> x_rows = {})
      : spec_(spec),
        g_(spec.geometry),
        weights_(std::move(weights)),
        s_(s),
        blas_(blas),
        rows_(static_cast<int>(spec.point.tokens)) {
    if (g_.weight_dtype != Dtype::bf16)
      throw std::invalid_argument("the CUDA backends measure bf16 weights only");
    x_ = DeviceBuffer<bf16>(static_cast<std::size_t>(x_rows.value_or(rows_)) * g_.hidden);
    fill(x_, spec.seed * 3 + 1, 1.0f, s_);
  }

  [[nodiscard]] virtual int verified_banks() const { return 1; }
  // Outputs to 0xff bytes (NaN in bf16/fp32, -1 in ids) before a verified forward.
  virtual void poison() = 0;
  // Relative error of the last forward's output against the GPU reference of `bank`, all rows.
  [[nodiscard]] virtual double compare(int bank) = 0;

  [[nodiscard]] std::size_t row_elements() const {
    return static_cast<std::size_t>(rows_) * g_.hidden;
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
      : CudaWorkload(spec, std::move(weights), s, blas,
                     GateEngine::input_rows(static_cast<int>(spec.point.tokens))),
        flag_(1) {
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

  std::string configuration() const override {
    if (gate_->gemm_rows() == rows_) return {};
    return "router GEMM on " + std::to_string(gate_->gemm_rows()) + " rows";
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
    const std::size_t n = static_cast<std::size_t>(rows_) * g_.experts;
    DeviceBuffer<float> want(n), got(n);
    DeviceBuffer<int> ambiguous(static_cast<std::size_t>(rows_)), invalid(ambiguous.size());
    reference_gate(x_.get(), rows_, router(), g_.router_dtype, g_, want.get(), ambiguous.get(), s_);
    dense_routes(ids_.get(), route_weights_.get(), rows_, g_, got.get(), invalid.get(), s_);
    DeviceComparison cmp(s_);
    cmp.fail_if_any(invalid.get(), rows_);
    cmp.add(got.get(), want.get(), n, g_.experts, ambiguous.get());
    const double error = cmp.relative_error();
    // Rows whose top-k set the math does not decide (near-ties) are left out; a point with more
    // than a few of them is not verified.
    std::vector<int> flags(ambiguous.size());
    if (!flags.empty())
      HARNESS_CHECK(cudaMemcpy(flags.data(), ambiguous.get(), flags.size() * sizeof(int),
                               cudaMemcpyDeviceToHost));
    const auto ties = std::count(flags.begin(), flags.end(), 1);
    return ties > 1 + rows_ / 100 ? INFINITY : error;
  }

  [[nodiscard]] const void* router() const {
    return g_.router_dtype == Dtype::fp32 ? static_cast<const void*>(router_f32_.get())
                                          : static_cast<const void*>(router_.get());
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
    engine_ = std::make_unique<ExpertsEngine>(g_, own_, routes_, s_, blas_, native);
    engine_->upload_routes(routes_);
    lanes_ = routed_lanes(routes_, own_);
    HARNESS_CHECK(cudaStreamSynchronize(s_));
  }

  void forward(int b) override { engine_->forward(x_.get(), bank(b), out_.get()); }
  bool take_route_error() override { return engine_->take_flag(); }
  std::string configuration() const override { return engine_->configuration(); }

 private:
  int verified_banks() const override { return static_cast<int>(weights_->banks.size()); }
  void poison() override { poison_buffer(out_.get(), out_.size() * sizeof(bf16)); }

  double compare(int b) override {
    DeviceBuffer<float> want(row_elements());
    HARNESS_CHECK(cudaMemsetAsync(want.get(), 0, want.size() * sizeof(float), s_));
    reference_mlp(x_.get(), lanes_, bank(b).w13.get(), bank(b).w2.get(), g_.hidden, g_.intermediate,
                  true, want.get(), s_);
    DeviceComparison cmp(s_);
    cmp.add(out_.get(), want.get(), want.size());
    return cmp.relative_error();
  }

  ExpertOwnership own_;
  Rng rng_;
  Routes routes_;
  ReferenceLanes lanes_;  // the routes as the GPU reference reads them
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
    DeviceComparison cmp(s_);
    cmp.add(out_.get(), x_.get(), out_.size());
    return cmp.relative_error();
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
    DeviceBuffer<float> want(row_elements());
    widen_to_f32(routed_.get(), want.get(), want.size(), s_);
    const auto lanes = shared_lanes(rows_, g_.shared.count);
    reference_mlp(x_.get(), lanes, bank(0).w13.get(), bank(0).w2.get(), g_.hidden,
                  g_.shared.intermediate, false, want.get(), s_);
    DeviceComparison cmp(s_);
    cmp.add(out_.get(), want.get(), want.size());
    return cmp.relative_error();
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
