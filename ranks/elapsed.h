#pragma once
// Wall time on the monotonic clock: the phases, waves and time limits of a run.
#include <chrono>

namespace moe {

using SteadyClock = std::chrono::steady_clock;

// Seconds from `t` to now.
inline double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

}  // namespace moe
