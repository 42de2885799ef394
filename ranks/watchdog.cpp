#include "ranks/watchdog.h"

#include <mpi.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <system_error>

namespace moe {

Watchdog::Watchdog(int rank, WatchdogLimits limits, Expiry on_expiry)
    : rank_(rank), limits_(limits), on_expiry_(std::move(on_expiry)) {
  if (!on_expiry_)
    on_expiry_ = [](const std::string& message) {
      std::cerr << message << std::endl;
      MPI_Abort(MPI_COMM_WORLD, kWatchdogExit);
    };
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::beat_into(const std::filesystem::path& path) {
  std::lock_guard lock(mutex_);
  heartbeat_ = path;
  beat();  // now: a kill before the first tick is still charged from here
}

void Watchdog::beat() const {
  // Rewriting the file moves its modification time: the last instant this run was alive.
  if (!heartbeat_.empty()) std::ofstream(heartbeat_, std::ios::trunc) << rank_ << "\n";
}

double Watchdog::limit_s(double expected_s) const {
  return std::max(limits_.floor_s, limits_.factor * expected_s);
}

void Watchdog::expect(const std::string& level, const std::string& operation, double expected_s) {
  const double limit = limit_s(expected_s);
  {
    std::lock_guard lock(mutex_);
    watches_[level] = {operation, limit,
                       Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(limit))};
  }
  wake_.notify_all();
}

void Watchdog::done(const std::string& level) {
  std::lock_guard lock(mutex_);
  watches_.erase(level);
}

void Watchdog::loop() {
  const auto tick = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(limits_.heartbeat_s));
  std::unique_lock lock(mutex_);
  while (!stop_) {
    auto next = Clock::now() + tick;
    for (const auto& [level, w] : watches_) next = std::min(next, w.deadline);
    wake_.wait_until(lock, next);
    if (stop_) break;
    beat();
    for (const auto& [level, w] : watches_)
      if (Clock::now() >= w.deadline) {
        std::ostringstream message;
        message << "harness: watchdog: rank " << rank_ << ": " << w.operation
                << " is still running after " << w.limit_s
                << " s (its limit: max(--watchdog-floor, --watchdog-factor x expected)); aborting "
                   "the job (the time is charged when the campaign resumes)";
        const auto expiry = on_expiry_;
        watches_.clear();
        lock.unlock();
        expiry(message.str());
        lock.lock();
        break;
      }
  }
}

}  // namespace moe
