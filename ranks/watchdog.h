// The per-rank watchdog (docs/cli.md#watchdog): while a forward point, a collective or a wave is in
// progress it holds that operation's deadline, a multiple of its expected time; a thread aborts
// the job when a deadline passes, naming the rank and the operation (a hung GPU, a lost peer).
// On rank 0 the same thread keeps the campaign's heartbeat file fresh: the time an interrupted
// wave held the devices is charged from it on resume (store/campaign.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace moe {

struct WatchdogLimits {
  double factor = 10;      // deadline = max(floor, factor x expected)
  double floor_s = 300;    // no operation is aborted sooner
  double heartbeat_s = 1;  // how often rank 0 touches the heartbeat file
};

inline constexpr int kWatchdogExit = 5;  // the job's exit status after a watchdog abort

class Watchdog {
 public:
  // Called once with the message when a deadline passes; the default prints it and aborts the
  // MPI job with kWatchdogExit.
  using Expiry = std::function<void(const std::string& message)>;
  Watchdog(int rank, WatchdogLimits limits, Expiry on_expiry = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // From now on the thread also rewrites `path` every heartbeat (rank 0, once the campaign state
  // has read the previous run's heartbeat).
  void beat_into(const std::filesystem::path& path);
  // `level` ("wave", "operation") now watches `operation`, expected to take `expected_s`.
  void expect(const std::string& level, const std::string& operation, double expected_s);
  void done(const std::string& level);
  [[nodiscard]] double limit_s(double expected_s) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Watch {
    std::string operation;
    double limit_s = 0;
    Clock::time_point deadline;
  };
  void loop();
  void beat() const;  // with mutex_ held

  int rank_;
  WatchdogLimits limits_;
  std::filesystem::path heartbeat_;
  Expiry on_expiry_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, Watch> watches_;
  bool stop_ = false;
  std::thread thread_;
};

// Watches one operation for the scope's lifetime.
class WatchdogScope {
 public:
  WatchdogScope(Watchdog* w, std::string level, const std::string& operation, double expected_s)
      : w_(w), level_(std::move(level)) {
    if (w_) w_->expect(level_, operation, expected_s);
  }
  ~WatchdogScope() {
    if (w_) w_->done(level_);
  }
  WatchdogScope(const WatchdogScope&) = delete;
  WatchdogScope& operator=(const WatchdogScope&) = delete;

 private:
  Watchdog* w_;
  std::string level_;
};

}  // namespace moe
