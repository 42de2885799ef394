// The mean SM clock between two device clock stamps (Backend::clock_stamp): the CPU backend has
// none, the staircase_model test backend models one. The CUDA backend's stamps are checked on the
// GPU (gpu_backend_test.cpp).
#include <gtest/gtest.h>

#include "core/geometry.h"
#include "kernels/staircase_backend.h"
#include "kernels/workload.h"

namespace moe {
namespace {

TEST(MeanSmClock, IsCyclesPerNanosecondInMegahertz) {
  const ClockStamp from{1'000'000, 5'000'000}, to{1'000'000 + 1'742'000, 5'000'000 + 1'000'000};
  const auto mhz = mean_sm_clock_mhz(from, to);
  ASSERT_TRUE(mhz.has_value());
  EXPECT_DOUBLE_EQ(*mhz, 1742.0);
  // Half the cycles over twice the time: a quarter of the clock.
  EXPECT_DOUBLE_EQ(*mean_sm_clock_mhz(from, {from.sm_cycles + 871'000, from.ns + 2'000'000}),
                   435.5);
}

TEST(MeanSmClock, RefusesStampsThatSpanNoTimeOrCountBackwards) {
  const ClockStamp from{10'000, 20'000};
  EXPECT_FALSE(mean_sm_clock_mhz(from, from).has_value());
  EXPECT_FALSE(mean_sm_clock_mhz(from, {30'000, 19'999}).has_value());  // timer went back
  EXPECT_FALSE(mean_sm_clock_mhz(from, {9'999, 30'000}).has_value());   // another SM's counter
}

TEST(MeanSmClock, HasNoneWhereAStampIsMissing) {
  const std::optional<ClockStamp> from = ClockStamp{0, 1'000}, to = ClockStamp{1'500, 2'000};
  EXPECT_DOUBLE_EQ(*mean_sm_clock_mhz(from, to), 1500.0);
  EXPECT_FALSE(mean_sm_clock_mhz(std::nullopt, to).has_value());
  EXPECT_FALSE(mean_sm_clock_mhz(from, std::nullopt).has_value());
}

// The CPU backend has no device clock; the staircase_model test backend models one, slower at
// larger N, so stamps around one point's forwards give that point's clock.
TEST(MeanSmClock, TheCpuHasNoDeviceClockTheStaircaseModelsOne) {
  EXPECT_FALSE(make_cpu_backend()->clock_stamp().has_value());
  auto backend = make_backend("staircase_model", 0);
  for (const GridPoint point : {GridPoint{2, 2, 4}, GridPoint{40, 4, 80}}) {
    const WorkloadSpec spec{
        *find_preset("tiny"), Target{1, 1, 1, 0, false}, Component::experts, point, 2, 5};
    auto w = backend->make(spec, backend->make_weights(spec));
    const auto from = backend->clock_stamp();
    for (int f = 0; f < 4; ++f) w->forward(f % 2);
    const auto mhz = mean_sm_clock_mhz(from, backend->clock_stamp());
    ASSERT_TRUE(mhz.has_value());
    EXPECT_NEAR(*mhz, staircase_sm_clock_mhz(point), 0.5) << point.tokens;  // stamps in whole ns
  }
  EXPECT_DOUBLE_EQ(staircase_sm_clock_mhz({40, 4, 80}), 1780.0);
}

}  // namespace
}  // namespace moe
