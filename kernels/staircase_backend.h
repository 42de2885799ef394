// The staircase_model backend: a test double for adaptive refinement
// (docs/measurement.md#fidelity). It computes and verifies every forward with the CPU reference,
// but a forward's time is a known model read from a process-wide modeled clock instead of a clock:
// for `experts` a staircase in rows per expert (each active expert pays per started tile of
// kStaircaseTileRows rows) and in waves (the tiles run kStaircaseWaveTiles at a time, as a GPU's
// blocks run one wave per SM), for the other components a straight line in N (the gate with a
// 1% step where its modeled kernel changes). Its tables are exact, so a refinement test can say
// which steps a table must resolve; they describe no hardware. It also models a device clock
// (clock_stamp) that runs slower as N grows, so each point's recorded mean SM clock is known.
#pragma once

#include <memory>

#include "core/component.h"
#include "kernels/workload.h"

namespace moe {

inline constexpr std::int64_t kStaircaseTileRows = 4;
inline constexpr std::int64_t kStaircaseWaveTiles = 6;
// Above this many rows the modeled gate runs another "kernel" (its configuration says which)
// that takes 1% longer: a step below the tolerance, visible only in the kernel list.
inline constexpr std::int64_t kStaircaseGateSwitchRows = 44;

// The modeled waves of an `experts` forward of A active experts sharing M rows: its started
// tiles, kStaircaseWaveTiles at a time. Declared to refinement (kernels' expert_launch_waves), as
// the native kernel's launch waves are; its tile steps are not, refinement finds them.
[[nodiscard]] std::int64_t staircase_waves(std::int64_t activated, std::int64_t assignments);

// Modeled µs of one forward of `c` at `p`. Experts rows are spread over the A active experts as
// the stimulus spreads them (counts differing by at most one).
[[nodiscard]] double staircase_time_us(Component c, const GridPoint& p);

// A weight-bank effect on demand, for the B/2B control's tests (docs/measurement.md, Protocol 6):
// with HARNESS_STAIRCASE_BANK_EFFECT_TOKENS=N, every `experts` forward at N tokens on a bank of
// kStaircaseBankEffectFirstBank or more (banks only the 2B arm uses while B = 2) takes
// kStaircaseBankEffect longer. Unset: none. A value that is not a positive integer is refused.
inline constexpr std::int32_t kStaircaseBankEffectFirstBank = 2;
inline constexpr double kStaircaseBankEffect = 0.10;
// A clock that steps down mid-run on demand, for the tests of unsteady runs (the same Protocol 6):
// with HARNESS_STAIRCASE_CLOCK_STEP_TOKENS=N, every `experts` forward at N tokens after the
// workload's first kStaircaseClockStepAfter takes kStaircaseClockStep longer, in both arms.
inline constexpr int kStaircaseClockStepAfter = 16;
inline constexpr double kStaircaseClockStep = 0.10;

// The modeled SM clock (MHz) while a forward at `p` runs: 1980 less 5 per token, at least 1000
// (a heavier load runs at a lower clock, as under a GPU's power cap).
[[nodiscard]] double staircase_sm_clock_mhz(const GridPoint& p);

// Microseconds of modeled time the staircase_model forwards of this process have taken so far.
[[nodiscard]] double modeled_clock_us();

[[nodiscard]] std::unique_ptr<Backend> make_staircase_backend();

}  // namespace moe
