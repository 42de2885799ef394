// The mean SM clock between two device clock stamps (Backend::clock_stamp), and the host backends'
// lack of one. The CUDA backend's stamps are checked on the GPU (gpu_backend_test.cpp).
#include <gtest/gtest.h>

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

TEST(MeanSmClock, HostBackendsHaveNoDeviceClock) {
  EXPECT_FALSE(make_cpu_backend()->clock_stamp().has_value());
  EXPECT_FALSE(make_backend("staircase_model", 0)->clock_stamp().has_value());
}

}  // namespace
}  // namespace moe
