#include "kernels/staircase_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/files.h"

namespace moe {

namespace {

std::atomic<double> g_modeled_clock_us{0.0};
std::atomic<double> g_modeled_sm_cycles{0.0};  // the modeled device clock's cycle counter

std::int64_t tiles(std::int64_t rows) {
  return (rows + kStaircaseTileRows - 1) / kStaircaseTileRows;
}

// The tiles A experts sharing M rows (counts differing by at most one) start.
std::int64_t started_tiles(std::int64_t activated, std::int64_t assignments) {
  const auto per = assignments / activated, extra = assignments % activated;
  return (activated - extra) * tiles(per) + extra * tiles(per + 1);
}

// The CPU reference computes and verifies; only the forward's time is modeled.
class StaircaseWorkload final : public Workload {
 public:
  StaircaseWorkload(std::unique_ptr<Workload> inner, double forward_us, double sm_clock_mhz,
                    std::string configuration, bool bank_effect, bool clock_step)
      : inner_(std::move(inner)),
        forward_us_(forward_us),
        sm_clock_mhz_(sm_clock_mhz),
        configuration_(std::move(configuration)),
        bank_effect_(bank_effect),
        clock_step_(clock_step) {}
  std::vector<double> verify() override { return inner_->verify(); }
  void forward(int bank) override {
    inner_->forward(bank);
    const bool slower_bank = bank_effect_ && bank >= kStaircaseBankEffectFirstBank;
    const bool stepped = clock_step_ && ++forwards_ > kStaircaseClockStepAfter;
    const double us = forward_us_ * (slower_bank ? 1.0 + kStaircaseBankEffect : 1.0) *
                      (stepped ? 1.0 + kStaircaseClockStep : 1.0);
    g_modeled_clock_us.fetch_add(us);
    g_modeled_sm_cycles.fetch_add(us * sm_clock_mhz_);
  }
  void synchronize() override { inner_->synchronize(); }
  bool take_route_error() override { return inner_->take_route_error(); }
  std::string configuration() const override { return configuration_; }

 private:
  std::unique_ptr<Workload> inner_;
  double forward_us_;
  double sm_clock_mhz_;
  std::string configuration_;
  bool bank_effect_;
  bool clock_step_;
  int forwards_ = 0;
};

// The token count a HARNESS_STAIRCASE_* variable names (staircase_backend.h), or 0 when unset.
std::int64_t tokens_from_environment(const char* variable) {
  const char* text = std::getenv(variable);
  if (text == nullptr) return 0;
  std::int64_t n = 0;
  try {
    n = csv_integer(text);
  } catch (const std::invalid_argument&) {  // named below, with the variable
  }
  if (n <= 0)
    throw std::invalid_argument(std::string(variable) + " must be a positive token count, not \"" +
                                text + "\"");
  return n;
}

class StaircaseBackend final : public Backend {
 public:
  std::string name() const override { return "staircase_model"; }
  std::string timing() const override { return "modeled_clock"; }
  std::int64_t cache_bytes() const override { return 0; }
  int sm_count() const override { return 0; }
  double tolerance() const override { return cpu_->tolerance(); }
  std::shared_ptr<const WeightSet> make_weights(const WorkloadSpec& s) override {
    return cpu_->make_weights(s);
  }
  std::unique_ptr<Workload> make(const WorkloadSpec& s,
                                 std::shared_ptr<const WeightSet> w) override {
    std::string configuration;
    if (s.component == Component::gate_routing)
      configuration = s.point.tokens > kStaircaseGateSwitchRows ? "gate_wide" : "gate_narrow";
    return std::make_unique<StaircaseWorkload>(
        cpu_->make(s, std::move(w)), staircase_time_us(s.component, s.point),
        staircase_sm_clock_mhz(s.point), std::move(configuration),
        s.component == Component::experts && s.point.tokens == bank_effect_tokens_,
        s.component == Component::experts && s.point.tokens == clock_step_tokens_);
  }
  std::map<std::string, std::string> device_properties() const override {
    return {{"device", "staircase model (no hardware)"}};
  }
  std::map<std::string, std::string> live_state() const override { return {}; }
  std::optional<ClockStamp> clock_stamp() override {
    return ClockStamp{static_cast<std::uint64_t>(std::llround(g_modeled_sm_cycles.load())),
                      static_cast<std::uint64_t>(std::llround(1e3 * g_modeled_clock_us.load()))};
  }

 private:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
  std::int64_t bank_effect_tokens_ =
      tokens_from_environment("HARNESS_STAIRCASE_BANK_EFFECT_TOKENS");
  std::int64_t clock_step_tokens_ = tokens_from_environment("HARNESS_STAIRCASE_CLOCK_STEP_TOKENS");
};

}  // namespace

std::int64_t staircase_waves(std::int64_t activated, std::int64_t assignments) {
  return (started_tiles(activated, assignments) + kStaircaseWaveTiles - 1) / kStaircaseWaveTiles;
}

double staircase_time_us(Component c, const GridPoint& p) {
  const auto n = static_cast<double>(p.tokens);
  switch (c) {
    case Component::gate_routing:
      return (3.0 + 0.02 * n) * (p.tokens > kStaircaseGateSwitchRows ? 1.01 : 1.0);
    case Component::finalize_copy:
      return 1.0 + 0.01 * n;
    case Component::wrapper:
      return 5.0 + 0.05 * n;
    case Component::experts: {
      if (p.activated == 0) return 2.0;
      return 4.0 + 0.5 * static_cast<double>(p.activated) +
             3.0 * static_cast<double>(started_tiles(p.activated, p.assignments)) +
             8.0 * static_cast<double>(staircase_waves(p.activated, p.assignments)) +
             0.01 * static_cast<double>(p.assignments);
    }
  }
  return 0.0;
}

double staircase_sm_clock_mhz(const GridPoint& p) {
  return std::max(1000.0, 1980.0 - 5.0 * static_cast<double>(p.tokens));
}

double modeled_clock_us() {
  return g_modeled_clock_us.load();
}

std::unique_ptr<Backend> make_staircase_backend() {
  return std::make_unique<StaircaseBackend>();
}

std::unique_ptr<Backend> make_backend(const std::string& name, int device) {
  if (name == "cpu_reference") return make_cpu_backend();
  if (name == "staircase_model") return make_staircase_backend();
  return make_cuda_backend(name, device);
}

}  // namespace moe
