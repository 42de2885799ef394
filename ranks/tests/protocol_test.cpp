#include "ranks/protocol.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/planner.h"
#include "kernels/staircase_backend.h"
#include "kernels/workload.h"

namespace moe {
namespace {

TEST(Protocol, MedianAndMedianOfMedians) {
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 2.0, 3.0}), 2.5);
  EXPECT_TRUE(std::isnan(median({})));
  const std::vector<double> rounds{10.0, 12.0, 11.0};
  EXPECT_EQ(median_of_medians(rounds), 11.0);
  EXPECT_FALSE(median_of_medians({}).has_value());
}

TEST(Protocol, SpreadIsTheSmallestTheMedianAndTheLargest) {
  const auto s = spread({1800.0, 1700.0, 1950.0, 1750.0});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->min, 1700.0);
  EXPECT_EQ(s->median, 1775.0);
  EXPECT_EQ(s->max, 1950.0);
  EXPECT_FALSE(spread({}).has_value());
}

TEST(Protocol, MixSeedIsDeterministicAndSensitive) {
  EXPECT_EQ(mix_seed({1, 2, 3}), mix_seed({1, 2, 3}));
  EXPECT_NE(mix_seed({1, 2, 3}), mix_seed({1, 3, 2}));
}

// A cell round of the tiny model: `component` of `target` at `points`, `iterations` forwards.
CellRoundSpec tiny_round(const Target& target, Component component, std::vector<GridPoint> points,
                         int iterations) {
  CellRoundSpec spec;
  spec.base.geometry = *find_preset("tiny");
  spec.base.target = target;
  spec.base.component = component;
  spec.points = std::move(points);
  spec.iterations = iterations;
  return spec;
}

// Runs one cell round on the CPU backend and checks the protocol's bookkeeping.
TEST(Protocol, CpuCellRoundHasEveryPointArmAndCompleteCycles) {
  auto backend = make_cpu_backend();
  auto timer = make_host_clock_timer();
  auto spec =
      tiny_round({1, 2, 2, 0, false}, Component::experts, {{1, 1, 1}, {8, 3, 9}, {8, 0, 0}}, 5);
  spec.round = 2;
  spec.weight_banks = 2;
  spec.seed = 42;
  int progress = 0;
  const auto r = measure_cell_round(*backend, *timer, spec, [&] { ++progress; });
  EXPECT_EQ(progress, 3);
  ASSERT_EQ(r.medians.size(), 3u);
  const int per_arm = forwards_per_arm(5, 2);  // 8: complete cycles of 2B = 4
  EXPECT_EQ(r.samples.size(), 3u * 2 * per_arm);
  EXPECT_EQ(r.checks.size(), 3u * 4);  // every one of the 2B banks checked
  for (const auto& s : r.samples) {
    EXPECT_EQ(s.round, 2);
    EXPECT_GT(s.value_us, 0.0);
    EXPECT_LT(s.bank, s.arm == static_cast<std::int8_t>(Arm::banks) ? 2 : 4);
  }
  for (const auto& c : r.checks) EXPECT_EQ(c.pass, 1);
  // Same seed, same point order.
  const auto again = measure_cell_round(*backend, *timer, spec);
  for (std::size_t i = 0; i < r.medians.size(); ++i)
    EXPECT_EQ(r.medians[i].point, again.medians[i].point);
}

TEST(Protocol, LocalComponentTakesIterationsForwards) {
  auto backend = make_cpu_backend();
  auto timer = make_host_clock_timer();
  const auto spec =
      tiny_round({1, 1, 1, 0, false}, Component::gate_routing, {{1, 0, 0}, {4, 0, 0}}, 3);
  const auto r = measure_cell_round(*backend, *timer, spec);
  EXPECT_EQ(r.samples.size(), 6u);
  for (const auto& s : r.samples) EXPECT_EQ(s.arm, static_cast<std::int8_t>(Arm::single));
}

// Counts forwards and the banks they used; a forward takes about 1 ms of wall time.
class CountingWorkload : public Workload {
 public:
  std::vector<double> verify() override { return {0.0}; }
  void forward(int bank) override {
    banks.push_back(bank);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  void synchronize() override { ++synchronizations; }
  bool take_route_error() override { return false; }
  std::vector<int> banks;
  int synchronizations = 0;
};

TEST(Protocol, SettleRunsUntimedForwardsForTheRequestedTime) {
  auto timer = make_host_clock_timer();
  CountingWorkload w;
  const auto start = std::chrono::steady_clock::now();
  const auto run = settle_forwards(w, *timer, 3, {25.0, 0.0}, {}, "settle");
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(ms, 25.0);
  EXPECT_GE(run.ms, 25.0);  // the settle's own count of its wall time
  EXPECT_LE(run.ms, ms);
  EXPECT_FALSE(run.extended);
  EXPECT_EQ(run.route_errors, 0u);
  ASSERT_GE(w.banks.size(), 3u);
  EXPECT_LE(w.banks.size(), 3u * 40);  // batches of one bank cycle, not an open loop
  EXPECT_EQ(w.banks.size() % 3, 0u);   // whole cycles over the banks
  for (std::size_t i = 0; i < w.banks.size(); ++i) EXPECT_EQ(w.banks[i], static_cast<int>(i % 3));
  EXPECT_GE(w.synchronizations, 1);  // the time is the device's, not the queue's
  EXPECT_TRUE(timer->collect().empty());

  CountingWorkload idle;
  (void)settle_forwards(idle, *timer, 3, {0.0, 0.0}, {}, "settle");
  EXPECT_TRUE(idle.banks.empty());
}

// The settle runs on to capped_ms exactly when the held-down counter advanced during its first
// `ms`; a device that does not report the counter, or a capped_ms no longer than ms, never
// extends it.
TEST(Protocol, SettleRunsOnWhileTheClocksWereHeldDown) {
  auto timer = make_host_clock_timer();
  const auto settle_for = [&](const Settle& settle, const HeldDownClock& held_down) {
    CountingWorkload w;
    const auto start = std::chrono::steady_clock::now();
    const auto run = settle_forwards(w, *timer, 2, settle, held_down, "settle");
    return std::pair{run.extended, std::chrono::duration<double, std::milli>(
                                       std::chrono::steady_clock::now() - start)
                                       .count()};
  };
  std::uint64_t counter = 0;
  const HeldDownClock advancing = [&]() -> std::optional<std::uint64_t> { return counter += 7; };
  const HeldDownClock still = []() -> std::optional<std::uint64_t> { return 42; };
  const HeldDownClock unreported = []() -> std::optional<std::uint64_t> { return std::nullopt; };

  const auto [extended, ms] = settle_for({5.0, 60.0}, advancing);
  EXPECT_TRUE(extended);
  EXPECT_GE(ms, 60.0);
  for (const auto& probe : {still, unreported, HeldDownClock{}}) {
    const auto [not_extended, short_ms] = settle_for({5.0, 60.0}, probe);
    EXPECT_FALSE(not_extended);
    EXPECT_GE(short_ms, 5.0);
  }
  EXPECT_FALSE(settle_for({5.0, 5.0}, advancing).first);
  counter = 0;
  EXPECT_FALSE(settle_for({0.0, 0.0}, advancing).first);
  EXPECT_FALSE(settle_for({0.0, 60.0}, advancing).first);  // only a settle is extended
  EXPECT_EQ(counter, 0u);  // no settle asked for: the device is not even asked
}

// Each point's median carries the mean SM clock over its forwards: the staircase model's clock of
// that point (it differs from point to point); NaN where the backend has no device clock.
TEST(Protocol, EachPointRecordsTheMeanSmClockOfItsForwards) {
  auto spec = tiny_round({1, 1, 1, 0, false}, Component::experts,
                         {{2, 2, 4}, {40, 4, 80}, {60, 8, 120}}, 4);
  spec.seed = 7;
  auto staircase = make_backend("staircase_model", 0);
  auto modeled = make_modeled_clock_timer();
  const auto r = measure_cell_round(*staircase, *modeled, spec);
  ASSERT_EQ(r.medians.size(), 3u);
  for (const auto& m : r.medians)
    EXPECT_NEAR(m.sm_clock_mean_mhz,
                staircase_sm_clock_mhz(spec.points.at(static_cast<std::size_t>(m.point))), 0.5);
  auto cpu = make_cpu_backend();
  auto host = make_host_clock_timer();
  for (const auto& m : measure_cell_round(*cpu, *host, spec).medians)
    EXPECT_TRUE(std::isnan(m.sm_clock_mean_mhz));
}

// The order of what one run does, as a log: the workload's calls, the timer's flush, the stamps.
class LoggingWorkload : public Workload {
 public:
  explicit LoggingWorkload(std::vector<std::string>& log) : log_(log) {}
  std::vector<double> verify() override { return {0.0}; }
  void forward(int) override { log_.push_back("forward"); }
  void synchronize() override { log_.push_back("synchronize"); }
  bool take_route_error() override {
    log_.push_back("route");
    return false;
  }

 private:
  std::vector<std::string>& log_;
};

class LoggingTimer : public ForwardTimer {
 public:
  explicit LoggingTimer(std::vector<std::string>& log) : log_(log) {}
  std::string method() const override { return "host_clock"; }
  void begin(std::string_view) override {}
  void end() override {}
  std::vector<ForwardRecord> collect() override {
    log_.push_back("collect");
    return {};
  }
  std::uint64_t dropped() const override { return 0; }

 private:
  std::vector<std::string>& log_;
};

// The clock covers the forwards and not the timer's flush after them: one stamp before the first
// forward, one after the last forward's route flag (which waits for the device), both before the
// flush; the run's span is theirs. Without stamps nothing is stamped.
TEST(Protocol, TheClockIsStampedAroundTheForwardsNotTheFlush) {
  std::vector<std::string> log;
  LoggingWorkload w(log);
  LoggingTimer timer(log);
  std::uint64_t calls = 0;
  const ClockStamps stamps = [&]() -> std::optional<ClockStamp> {
    log.push_back("stamp");
    ++calls;
    return ClockStamp{calls * 1'800'000, calls * 1'000'000};  // 1800 MHz between the two
  };
  const auto run = run_forwards(w, timer, 2, 2, true, "x", stamps);
  EXPECT_EQ(log, (std::vector<std::string>{"stamp", "forward", "route", "forward", "route", "stamp",
                                           "synchronize", "collect"}));
  EXPECT_DOUBLE_EQ(run.sm_clock_mhz.value(), 1800.0);
  log.clear();
  const auto unstamped = run_forwards(w, timer, 1, 1, true, "x");
  EXPECT_EQ(log, (std::vector<std::string>{"forward", "route", "synchronize", "collect"}));
  EXPECT_FALSE(unstamped.sm_clock_mhz.has_value());
}

// Segments run back to back: untimed forwards are not bracketed, and one synchronize and one
// flush end the run, after the last stamp.
TEST(Protocol, SegmentsRunBackToBackWithOneFlush) {
  std::vector<std::string> log;
  LoggingWorkload w(log);
  LoggingTimer timer(log);
  const ClockStamps stamps = [&]() -> std::optional<ClockStamp> {
    log.push_back("stamp");
    return ClockStamp{};
  };
  const ForwardSegment segments[] = {{1, 1, false}, {1, 1, true}, {1, 1, false}, {1, 1, true}};
  (void)run_forwards(w, timer, segments, "x", stamps);
  EXPECT_EQ(log, (std::vector<std::string>{"stamp", "forward", "route", "forward", "route",
                                           "forward", "route", "forward", "route", "stamp",
                                           "synchronize", "collect"}));
}

// The host clock timer, counting its flushes.
class FlushCountingTimer : public ForwardTimer {
 public:
  std::string method() const override { return inner_->method(); }
  void begin(std::string_view label) override { inner_->begin(label); }
  void end() override { inner_->end(); }
  std::vector<ForwardRecord> collect() override {
    ++flushes;
    return inner_->collect();
  }
  std::uint64_t dropped() const override { return inner_->dropped(); }
  int flushes = 0;

 private:
  std::unique_ptr<ForwardTimer> inner_ = make_host_clock_timer();
};

// A point's warm-ups and its B and 2B chunks run as one run: one flush of the timer per point (a
// flush after every chunk left the device idle between chunks), and every sample still in its arm.
TEST(Protocol, APointsChunksRunWithOneFlush) {
  auto backend = make_cpu_backend();
  FlushCountingTimer timer;
  auto spec =
      tiny_round({1, 2, 2, 0, false}, Component::experts, {{1, 1, 1}, {8, 3, 9}, {8, 0, 0}}, 9);
  spec.weight_banks = 2;
  const auto r = measure_cell_round(*backend, timer, spec);
  EXPECT_EQ(timer.flushes, 3);
  const int per_arm = forwards_per_arm(9, 2);
  ASSERT_GT(per_arm / 4, 1);  // more than one chunk per arm
  EXPECT_EQ(r.samples.size(), 3u * 2 * per_arm);
  for (const auto& s : r.samples)
    EXPECT_LT(s.bank, s.arm == static_cast<std::int8_t>(Arm::banks) ? 2 : 4);
}

TEST(Protocol, SettleAddsNoSamples) {
  auto backend = make_cpu_backend();
  auto timer = make_host_clock_timer();
  auto spec = tiny_round({1, 1, 1, 0, false}, Component::experts, {{4, 2, 8}}, 4);
  const auto plain = measure_cell_round(*backend, *timer, spec);
  spec.settle = {20.0, 0.0};
  const auto settled = measure_cell_round(*backend, *timer, spec);
  EXPECT_EQ(settled.samples.size(), plain.samples.size());
  EXPECT_GE(settled.phases.timing, 0.020);  // the settle is charged to the timing phase
  EXPECT_EQ(settled.settles_extended, 0);   // the host reports no held-down clocks
}

// The host clock timer with one fault a broken tracer could have; the protocol must refuse the
// point, never time it from what is left (docs/measurement.md#protocol).
enum class TracerFault { missing_record, other_kernels, zero_time, dropped_records };
class FaultyTimer : public ForwardTimer {
 public:
  explicit FaultyTimer(TracerFault fault) : fault_(fault) {}
  std::string method() const override { return inner_->method(); }
  void begin(std::string_view label) override { inner_->begin(label); }
  void end() override { inner_->end(); }
  std::vector<ForwardRecord> collect() override {
    auto records = inner_->collect();
    if (records.size() < 2) return records;  // an untimed settle's flush
    switch (fault_) {
      case TracerFault::missing_record:
        records.pop_back();
        break;
      case TracerFault::other_kernels:
        records.back().activity_count += 1;
        break;
      case TracerFault::zero_time:
        records.back().value_us = 0;
        break;
      case TracerFault::dropped_records:
        dropped_ = 3;
        break;
    }
    return records;
  }
  std::uint64_t dropped() const override { return inner_->dropped() + dropped_; }

 private:
  TracerFault fault_;
  std::uint64_t dropped_ = 0;
  std::unique_ptr<ForwardTimer> inner_ = make_host_clock_timer();
};

std::string measurement_error(Backend& backend, ForwardTimer& timer, const CellRoundSpec& spec) {
  try {
    (void)measure_cell_round(backend, timer, spec);
  } catch (const MeasurementError& e) {
    return e.what();
  }
  return "";
}

TEST(Protocol, APointTheTracerDidNotRecordWholeIsRefused) {
  auto backend = make_cpu_backend();
  const auto spec = tiny_round({1, 1, 1, 0, false}, Component::gate_routing, {{4, 0, 0}}, 4);
  const std::string point = "gate_routing tp1/dp1_ep1_rank0_sp0 at (N=4, A=0, M=0) round 0";
  const std::vector<std::pair<TracerFault, std::string>> cases = {
      {TracerFault::missing_record, "timer returned 3 records for 4 forwards of " + point},
      {TracerFault::other_kernels,
       "forward 3 of " + point + " ran 2 activities, the first ran 1 (activity lists differ)"},
      {TracerFault::zero_time, "non-positive forward time for " + point},
      {TracerFault::dropped_records,
       "the tracer dropped 3 activity records; zero dropped is required"},
  };
  for (const auto& [fault, message] : cases) {
    FaultyTimer timer(fault);
    EXPECT_EQ(measurement_error(*backend, timer, spec), message);
  }
  auto host = make_host_clock_timer();
  EXPECT_EQ(measurement_error(*backend, *host, spec), "");
}

// The CPU reference backend whose workloads raise the route flag on one forward: a kernel that
// found an invalid lane in a valid stimulus.
class RouteFlagBackend : public Backend {
 public:
  explicit RouteFlagBackend(int raise_on) : raise_on_(raise_on) {}
  std::string name() const override { return inner_->name(); }
  std::string timing() const override { return inner_->timing(); }
  std::int64_t cache_bytes() const override { return inner_->cache_bytes(); }
  int sm_count() const override { return inner_->sm_count(); }
  double tolerance() const override { return inner_->tolerance(); }
  std::shared_ptr<const WeightSet> make_weights(const WorkloadSpec& round) override {
    return inner_->make_weights(round);
  }
  std::unique_ptr<Workload> make(const WorkloadSpec& point,
                                 std::shared_ptr<const WeightSet> weights) override {
    return std::make_unique<Flagging>(inner_->make(point, std::move(weights)), raise_on_);
  }
  std::map<std::string, std::string> device_properties() const override {
    return inner_->device_properties();
  }
  std::map<std::string, std::string> live_state() const override { return inner_->live_state(); }

 private:
  class Flagging : public Workload {
   public:
    Flagging(std::unique_ptr<Workload> inner, int raise_on)
        : inner_(std::move(inner)), raise_on_(raise_on) {}
    std::vector<double> verify() override { return inner_->verify(); }
    void forward(int bank) override { inner_->forward(bank); }
    void synchronize() override { inner_->synchronize(); }
    bool take_route_error() override { return taken_++ == raise_on_; }

   private:
    std::unique_ptr<Workload> inner_;
    int raise_on_, taken_ = 0;
  };
  int raise_on_;
  std::unique_ptr<Backend> inner_ = make_cpu_backend();
};

TEST(Protocol, ARouteFlagRaisedOnAValidStimulusRefusesThePoint) {
  auto timer = make_host_clock_timer();
  auto spec = tiny_round({1, 1, 1, 0, false}, Component::gate_routing, {{4, 0, 0}}, 4);
  RouteFlagBackend timed(2);  // a timed forward
  EXPECT_EQ(measurement_error(timed, *timer, spec),
            "route validation flag raised 1 times on valid stimuli for gate_routing "
            "tp1/dp1_ep1_rank0_sp0 at (N=4, A=0, M=0) round 0");
  spec.settle = {5.0, 0.0};
  RouteFlagBackend settling(0);  // the settle's first forward
  EXPECT_NE(measurement_error(settling, *timer, spec).find("route validation flag raised 1 times"),
            std::string::npos);
  RouteFlagBackend never(-1);
  EXPECT_EQ(measurement_error(never, *timer, spec), "");
}

}  // namespace
}  // namespace moe
