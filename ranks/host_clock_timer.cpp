#include <chrono>
#include <functional>
#include <utility>

#include "ranks/forward_timer.h"

namespace moe {

namespace {

class HostClockTimer final : public ForwardTimer {
 public:
  std::string method() const override { return "host_clock"; }
  void begin(std::string_view label) override {
    label_ = label;
    start_ = std::chrono::steady_clock::now();
  }
  void end() override {
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_)
            .count();
    done_.push_back({us, 1, std::hash<std::string>{}(label_), {{label_, us}}});
  }
  std::vector<ForwardRecord> collect() override { return std::exchange(done_, {}); }
  std::uint64_t dropped() const override { return 0; }

 private:
  std::chrono::steady_clock::time_point start_;
  std::string label_;
  std::vector<ForwardRecord> done_;
};

}  // namespace

std::unique_ptr<ForwardTimer> make_host_clock_timer() {
  return std::make_unique<HostClockTimer>();
}

}  // namespace moe
