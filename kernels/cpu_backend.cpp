// The cpu_reference backend: the CPU reference kernels timed with the host clock.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "kernels/reference_case.h"

namespace moe {

namespace {

class CpuWorkload final : public Workload {
 public:
  explicit CpuWorkload(const WorkloadSpec& s) : case_(s) {}

  std::vector<double> verify() override {
    std::vector<double> errors;
    std::vector<float> want;
    for (int b = 0; b < bank_count(); ++b) {
      out_.assign(case_.output_size(), std::nanf(""));  // poison
      forward(b);
      case_.run(b, want, nullptr);
      errors.push_back(relative_error(out_, want));
    }
    return errors;
  }

  void forward(int bank) override { case_.run(bank % bank_count(), out_, nullptr); }
  void synchronize() override {}
  bool take_route_error() override { return false; }

 private:
  int bank_count() const { return case_.banks.empty() ? 1 : static_cast<int>(case_.banks.size()); }
  ReferenceCase case_;
  std::vector<float> out_;
};

// Last-level cache of CPU 0 from sysfs; 32 MiB when unknown.
std::int64_t host_cache_bytes() {
  std::int64_t best = 0;
  for (int idx = 0; idx < 8; ++idx) {
    std::FILE* f = std::fopen(("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/size").c_str(), "r");
    if (!f) break;
    long v = 0;
    char unit = 0;
    if (std::fscanf(f, "%ld%c", &v, &unit) >= 1) {
      std::int64_t bytes = v;
      if (unit == 'K') bytes <<= 10;
      if (unit == 'M') bytes <<= 20;
      best = std::max(best, bytes);
    }
    std::fclose(f);
  }
  return best > 0 ? best : (32LL << 20);
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu_reference"; }
  std::string timing() const override { return "host_clock"; }
  std::int64_t cache_bytes() const override { return host_cache_bytes(); }
  double tolerance() const override { return 1e-6; }
  std::unique_ptr<Workload> make(const WorkloadSpec& s) override {
    return std::make_unique<CpuWorkload>(s);
  }
  std::map<std::string, std::string> device_properties() const override {
    return {{"device", "host CPU"}, {"cache_bytes", std::to_string(cache_bytes())}};
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace moe
