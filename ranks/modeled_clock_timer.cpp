#include <functional>
#include <utility>

#include "kernels/staircase_backend.h"
#include "ranks/forward_timer.h"

namespace moe {

namespace {

// Reads the modeled clock that staircase_model forwards advance: their exact modeled time.
class ModeledClockTimer final : public ForwardTimer {
 public:
  std::string method() const override { return "modeled_clock"; }
  void begin(std::string_view label) override {
    label_ = label;
    start_ = modeled_clock_us();
  }
  void end() override {
    const double us = modeled_clock_us() - start_;
    done_.push_back({us, 1, std::hash<std::string>{}(label_), {{label_, us}}});
  }
  std::vector<ForwardRecord> collect() override { return std::exchange(done_, {}); }
  std::uint64_t dropped() const override { return 0; }

 private:
  double start_ = 0;
  std::string label_;
  std::vector<ForwardRecord> done_;
};

}  // namespace

std::unique_ptr<ForwardTimer> make_modeled_clock_timer() {
  return std::make_unique<ModeledClockTimer>();
}

std::unique_ptr<ForwardTimer> make_forward_timer(const std::string& timing) {
  if (timing == "host_clock") return make_host_clock_timer();
  if (timing == "modeled_clock") return make_modeled_clock_timer();
  return make_cupti_timer();
}

}  // namespace moe
