#include "core/statistics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

namespace moe {
namespace {

// The arms' pooled medians over one round, 2B over B less 1: what the control compared before it
// went chunk by chunk.
double pooled_change(const ArmChunks& r) {
  return median(r.b2) / median(r.b) - 1;
}

// One round of forwards as they ran, in chunks of four per arm.
ArmChunks forwards(std::vector<double> b, std::vector<double> b2) {
  return {std::move(b), std::move(b2), 4};
}

// One round of three chunks of four forwards per arm, every forward of a chunk at its chunk's
// value: b[c] and b2[c] in the order they ran (B0, 2B0, B1, 2B1, B2, 2B2).
ArmChunks three_chunks(const std::vector<double>& b, const std::vector<double>& b2) {
  ArmChunks r = forwards({}, {});
  for (const double v : b) r.b.insert(r.b.end(), 4, v);
  for (const double v : b2) r.b2.insert(r.b2.end(), 4, v);
  return r;
}

TEST(BankControl, AConsistentSlowerDoubleBankArmFailsBeyondThreePercent) {
  const std::vector<ArmChunks> at{three_chunks({100, 100, 100}, {103, 103, 103})};
  const std::vector<ArmChunks> above{three_chunks({100, 100, 100}, {103.01, 103.01, 103.01})};
  const std::vector<ArmChunks> faster{three_chunks({100, 100, 100}, {96.5, 96.5, 96.5})};
  EXPECT_TRUE(bank_control(at).pass) << "exactly 3% passes";
  EXPECT_FALSE(bank_control(above).pass);
  const auto c = bank_control(faster);
  EXPECT_FALSE(c.pass) << "a faster 2B arm is as suspect as a slower one";
  EXPECT_NEAR(c.relative_change, 0.035, 1e-12);
}

// The clock steps down once mid-run: every later chunk of both arms is slower. The pooled medians
// then differ by the step (B's middle value is before it, 2B's after), chunk by chunk they do not.
TEST(BankControl, AStepOfTheClockMidRunPasses) {
  for (const auto& r : {three_chunks({100, 100, 110}, {100, 110, 110}),     // between B1 and 2B1
                        three_chunks({100, 110, 110}, {100, 110, 110})}) {  // between 2B0 and B1
    const std::vector<ArmChunks> rounds{r};
    const auto c = bank_control(rounds);
    EXPECT_TRUE(c.pass) << c.relative_change;
    EXPECT_LT(c.relative_change, 0.001);
  }
  const std::vector<ArmChunks> between_b1_and_2b1{three_chunks({100, 100, 110}, {100, 110, 110})};
  const auto c = bank_control(between_b1_and_2b1);
  EXPECT_NEAR(pooled_change(between_b1_and_2b1[0]), 0.10, 1e-12) << "the pooled medians differ";
  EXPECT_NEAR(c.run_spread, 0.10, 1e-12) << "but the run moved, which is said";
}

// A point of Qwen3-30B-A3B's `experts` on an H100 at its power cap, (N, A, M) = (8192, 35, 65536):
// its forwards as they ran (µs), the clock stepping down in the second 2B chunk. The pooled
// medians differ by 4.3 % (it failed the control that compared them); chunk by chunk 0.4 %.
TEST(BankControl, AMeasuredStepInsideAChunkPasses) {
  const std::vector<ArmChunks> rounds{forwards({1205.4, 1208.0, 1209.1, 1208.1, 1208.1, 1204.1,
                                                1205.9, 1202.6, 1331.8, 1319.5, 1330.4, 1330.7},
                                               {1209.4, 1203.8, 1203.6, 1206.9, 1207.8, 1205.8,
                                                1311.6, 1323.1, 1332.4, 1323.4, 1323.1, 1329.0})};
  const auto c = bank_control(rounds);
  EXPECT_GT(pooled_change(rounds[0]), 0.03);
  EXPECT_TRUE(c.pass);
  EXPECT_LT(c.relative_change, 0.005);
}

// Slow drift: the B chunks on both sides of a 2B chunk average out its own drift.
TEST(BankControl, LinearDriftPasses) {
  const std::vector<ArmChunks> rounds{three_chunks({100, 104, 108}, {102, 106, 110})};
  const auto c = bank_control(rounds);
  EXPECT_TRUE(c.pass);
  EXPECT_NEAR(c.relative_change, 0.0, 1e-12);
  EXPECT_NEAR(c.run_spread, 0.08, 1e-12);
}

// The verdict is the median of every round's chunk changes: one round's step does not sway it,
// an effect in every round does.
TEST(BankControl, RoundsArePooledChunkByChunk) {
  const std::vector<ArmChunks> one_step{three_chunks({100, 100, 100}, {100, 100, 100}),
                                        three_chunks({100, 100, 120}, {100, 120, 120})};
  EXPECT_TRUE(bank_control(one_step).pass);
  const std::vector<ArmChunks> every_round{three_chunks({100, 100, 100}, {105, 105, 105}),
                                           three_chunks({200, 200, 200}, {210, 210, 210})};
  const auto c = bank_control(every_round);
  EXPECT_FALSE(c.pass);
  EXPECT_NEAR(c.relative_change, 0.05, 1e-12);
  EXPECT_EQ(c.run_spread, 0.0) << "each arm steady within each round, whatever the rounds' levels";
  EXPECT_NEAR(bank_control(one_step).run_spread, 0.2, 1e-12) << "the largest of any round";
}

// One chunk per arm (iterations within one 2B cycle): 2B against the one B chunk before it.
TEST(BankControl, OneChunkComparesTheTwoArms) {
  const std::vector<ArmChunks> rounds{forwards({100, 100, 100, 100}, {104, 104, 104, 104})};
  const auto c = bank_control(rounds);
  EXPECT_FALSE(c.pass);
  EXPECT_NEAR(c.relative_change, 0.04, 1e-12);
}

TEST(BankControl, NoForwardsOfBothArmsIsAnError) {
  const std::vector<ArmChunks> rounds{forwards({100, 100}, {})};
  EXPECT_THROW((void)bank_control(rounds), std::invalid_argument);
  EXPECT_THROW((void)bank_control(std::vector<ArmChunks>{}), std::invalid_argument);
}

}  // namespace
}  // namespace moe
