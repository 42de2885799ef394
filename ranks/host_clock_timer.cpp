// The timers that read a clock around each forward: the host's monotonic clock (cpu_reference)
// and the modeled clock that staircase_model forwards advance.
#include <chrono>
#include <functional>
#include <utility>

#include "kernels/staircase_backend.h"
#include "ranks/forward_timer.h"

namespace moe {

namespace {

class ClockTimer final : public ForwardTimer {
 public:
  ClockTimer(std::string method, std::function<double()> now_us)
      : method_(std::move(method)), now_us_(std::move(now_us)) {}
  std::string method() const override { return method_; }
  void begin(std::string_view label) override {
    label_ = label;
    start_us_ = now_us_();
  }
  void end() override {
    const double us = now_us_() - start_us_;
    done_.push_back({us, 1, std::hash<std::string>{}(label_), {{label_, us}}});
  }
  std::vector<ForwardRecord> collect() override { return std::exchange(done_, {}); }
  std::uint64_t dropped() const override { return 0; }

 private:
  std::string method_;
  std::function<double()> now_us_;
  double start_us_ = 0;
  std::string label_;
  std::vector<ForwardRecord> done_;
};

}  // namespace

std::unique_ptr<ForwardTimer> make_host_clock_timer() {
  return std::make_unique<ClockTimer>("host_clock", [] {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  });
}

std::unique_ptr<ForwardTimer> make_modeled_clock_timer() {
  return std::make_unique<ClockTimer>("modeled_clock", modeled_clock_us);
}

std::unique_ptr<ForwardTimer> make_forward_timer(const std::string& timing) {
  if (timing == "host_clock") return make_host_clock_timer();
  if (timing == "modeled_clock") return make_modeled_clock_timer();
  return make_cupti_timer();
}

}  // namespace moe
