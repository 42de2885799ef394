// The cpu_reference backend: the CPU reference kernels timed with the host clock.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>
#include <string>

#include "kernels/reference.h"
#include "kernels/stimulus.h"
#include "kernels/workload.h"

namespace moe {

namespace {

struct CpuWeights final : WeightSet {
  std::vector<MlpWeights> banks;  // routed experts: one per bank; wrapper: the shared experts
  std::vector<MlpView> views;     // views of `banks`
};

class CpuWorkload final : public Workload {
 public:
  CpuWorkload(const WorkloadSpec& s, std::shared_ptr<const CpuWeights> w)
      : spec_(s), weights_(std::move(w)) {
    const auto& g = s.geometry;
    Rng rng(s.seed);
    rows_ = static_cast<int>(s.point.tokens);
    if (rows_ < 1) throw std::invalid_argument("a workload needs at least one row");
    x_ = random_values(static_cast<std::size_t>(rows_) * g.hidden, 1.0f, g.weight_dtype, rng);
    switch (s.component) {
      case Component::gate_routing:
        router_ =
            random_values(static_cast<std::size_t>(g.experts) * g.hidden,
                          1.0f / std::sqrt(static_cast<float>(g.hidden)), g.router_dtype, rng);
        break;
      case Component::experts:
        routes_ = make_expert_routes(s.point.tokens, s.point.activated, s.point.assignments, g,
                                     ExpertOwnership::of(g, s.target), rng);
        break;
      case Component::finalize_copy:
        break;
      case Component::wrapper:
        routed_ = random_values(x_.size(), 1.0f, g.weight_dtype, rng);
        break;
    }
  }

  std::vector<double> verify() override {
    std::vector<double> errors;
    for (int b = 0; b < bank_count(); ++b) {
      out_.assign(output_size(), std::nanf(""));  // poison
      forward(b);
      std::vector<float> want;
      run(b, want);
      errors.push_back(relative_error(out_, want));
    }
    return errors;
  }

  void forward(int bank) override { run(bank % bank_count(), out_); }
  void synchronize() override {}
  bool take_route_error() override { return false; }

 private:
  int bank_count() const {
    return spec_.component == Component::experts ? static_cast<int>(weights_->banks.size()) : 1;
  }
  std::size_t output_size() const {
    return spec_.component == Component::gate_routing
               ? static_cast<std::size_t>(rows_) * spec_.geometry.top_k
               : x_.size();
  }

  void run(int bank, std::vector<float>& out) {
    const auto& g = spec_.geometry;
    out.resize(output_size());
    switch (spec_.component) {
      case Component::gate_routing: {
        gate_routing_ref(x_, rows_, router_, g, routes_);
        std::copy(routes_.weights.begin(), routes_.weights.end(), out.begin());
        break;
      }
      case Component::experts:
        experts_ref(x_, routes_, weights_->views.at(static_cast<std::size_t>(bank)),
                    ExpertOwnership::of(g, spec_.target).first_expert, out);
        break;
      case Component::finalize_copy:
        finalize_copy_ref(x_, out);
        break;
      case Component::wrapper:
        wrapper_ref(x_, rows_, routed_, weights_->views.front(), out);
        break;
    }
  }

  WorkloadSpec spec_;
  std::shared_ptr<const CpuWeights> weights_;
  int rows_ = 0;
  std::vector<float> x_, router_, routed_, out_;
  Routes routes_;
};

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu_reference"; }
  std::string timing() const override { return "host_clock"; }
  // Host caches are not conditioned: the CPU backend exercises the protocol (B = 2 banks), its
  // host-clock times are not simulator data.
  std::int64_t cache_bytes() const override { return 0; }
  int sm_count() const override { return 0; }
  double tolerance() const override { return 1e-6; }

  std::shared_ptr<const WeightSet> make_weights(const WorkloadSpec& s) override {
    const auto& g = s.geometry;
    auto w = std::make_shared<CpuWeights>();
    Rng rng(s.seed);
    if (s.component == Component::experts) {
      const auto own = ExpertOwnership::of(g, s.target);
      for (int b = 0; b < s.banks; ++b)
        w->banks.push_back(
            random_mlp(own.local_experts, g.hidden, g.intermediate, g.weight_dtype, rng));
    } else if (s.component == Component::wrapper) {
      w->banks.push_back(
          random_mlp(g.shared.count, g.hidden, g.shared.intermediate, g.weight_dtype, rng));
    }
    for (const auto& b : w->banks) w->views.push_back(b.view());
    return w;
  }

  std::unique_ptr<Workload> make(const WorkloadSpec& s,
                                 std::shared_ptr<const WeightSet> w) override {
    auto cpu = std::dynamic_pointer_cast<const CpuWeights>(w);
    if (!cpu)
      throw std::invalid_argument("cpu_reference workload given weights of another backend");
    return std::make_unique<CpuWorkload>(s, std::move(cpu));
  }

  std::map<std::string, std::string> live_state() const override {
    std::map<std::string, std::string> out;
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);)
      if (line.rfind("cpu MHz", 0) == 0) {
        out["cpu0_mhz"] = line.substr(line.find(':') + 2);
        break;
      }
    std::ifstream loadavg("/proc/loadavg");
    std::string a, b, c, procs;
    if (loadavg >> a >> b >> c >> procs) out["running_processes"] = procs;
    return out;
  }

  std::map<std::string, std::string> device_properties() const override {
    std::map<std::string, std::string> out{{"device", "host CPU"}};
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);)
      if (line.rfind("model name", 0) == 0) {
        out["cpu_model"] = line.substr(line.find(':') + 2);
        break;
      }
    return out;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace moe
