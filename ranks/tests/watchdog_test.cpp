#include "ranks/watchdog.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

namespace moe {
namespace {

using namespace std::chrono_literals;

TEST(Watchdog, AbortsAnOperationPastItsLimitNamingRankAndOperation) {
  std::atomic<int> fired{0};
  std::string message;
  std::mutex m;
  Watchdog w(3, {2.0, 0.05, 0.01}, [&](const std::string& text) {
    std::lock_guard lock(m);
    message = text;
    ++fired;
  });
  EXPECT_DOUBLE_EQ(w.limit_s(0.01), 0.05) << "the floor";
  EXPECT_DOUBLE_EQ(w.limit_s(1.0), 2.0) << "factor x expected";
  w.expect("wave", "wave of round 2", 10.0);  // 20 s: not reached here
  w.expect("operation", "cell experts/tp1 point 7", 0.0);
  for (int i = 0; i < 200 && fired == 0; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(fired, 1);
  std::lock_guard lock(m);
  EXPECT_NE(message.find("rank 3"), std::string::npos) << message;
  EXPECT_NE(message.find("cell experts/tp1 point 7"), std::string::npos) << message;
}

TEST(Watchdog, AnOperationDoneInTimeNeverFires) {
  std::atomic<int> fired{0};
  {
    Watchdog w(0, {1.0, 0.2, 0.01}, [&](const std::string&) { ++fired; });
    for (int i = 0; i < 20; ++i) {
      WatchdogScope scope(&w, "operation", "point " + std::to_string(i), 0.0);
      std::this_thread::sleep_for(5ms);
    }
    std::this_thread::sleep_for(300ms);  // nothing in progress: nothing to abort
  }
  EXPECT_EQ(fired, 0);
}

TEST(Watchdog, RankZeroKeepsTheHeartbeatFresh) {
  const auto path =
      std::filesystem::temp_directory_path() / ("harness-heartbeat-" + std::to_string(::getpid()));
  std::filesystem::remove(path);
  {
    Watchdog w(0, {10, 10, 0.02}, [](const std::string&) {});
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(std::filesystem::exists(path)) << "no heartbeat before beat_into";
    w.beat_into(path);
    for (int i = 0; i < 100 && !std::filesystem::exists(path); ++i)
      std::this_thread::sleep_for(5ms);
    ASSERT_TRUE(std::filesystem::exists(path));
    const auto first = std::filesystem::last_write_time(path);
    std::this_thread::sleep_for(100ms);
    EXPECT_GT(std::filesystem::last_write_time(path), first);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moe
