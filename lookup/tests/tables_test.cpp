#include "lookup/tables.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace moe {
namespace {

// tiny at EP2: E = 8, k = 2, L = 4.
constexpr ExpertPolytope kTiny{8, 2, 4};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const LookupError& e) {
    return e.what();
  }
  return "";
}

TEST(ComponentTables, ExactRowsInterpolationAndRefusals) {
  const ComponentTables t({{Component::gate_routing, {{{1, 0, 0}, 10.0}, {{9, 0, 0}, 30.0}}},
                           {Component::experts,
                            {{{4, 0, 0}, 5.0},
                             {{8, 0, 0}, 7.0},
                             {{4, 1, 4}, 20.0},
                             {{4, 4, 8}, 40.0},
                             {{8, 1, 8}, 30.0},
                             {{8, 4, 16}, 60.0},
                             {{4, 2, 8}, 32.0},
                             {{8, 2, 16}, 50.0}}}},
                          kTiny);
  const auto gate = t.query(Component::gate_routing, 3);
  EXPECT_DOUBLE_EQ(gate.time_us, 15.0);
  EXPECT_FALSE(gate.exact);
  const auto exact = t.query(Component::experts, 4, 4, 8);
  EXPECT_TRUE(exact.exact);
  EXPECT_DOUBLE_EQ(exact.time_us, 40.0);
  EXPECT_DOUBLE_EQ(t.query(Component::experts, 6, 0, 0).time_us, 6.0);  // all-remote over N
  // On an edge of the triangulation: only vertices with weight, which sum to 1.
  const auto edge = t.query(Component::experts, 6, 1, 6);
  double sum = 0;
  for (const auto& v : edge.vertices) {
    EXPECT_GT(v.weight, 1e-12);
    sum += v.weight;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_NEAR(edge.time_us, 25.0, 1e-9);
  EXPECT_NE(error_of([&] {
              (void)t.query(Component::experts, 4, 2, 9);
            }).find("impossible for this deployment: it violates M <= N*min(k, A) = 8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)t.query(Component::experts, 4, 5, 8); }).find("A <= L"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              (void)t.query(Component::experts, 16, 1, 16);
            }).find("outside the measured support"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { (void)t.query(Component::wrapper, 4); }).find("wrapper: no measured rows"),
      std::string::npos);
}

TEST(ComponentTables, DuplicateRowsAreRefused) {
  EXPECT_NE(
      error_of([] {
        ComponentTables({{Component::gate_routing, {{{2, 0, 0}, 1.0}, {{2, 0, 0}, 2.0}}}}, kTiny);
      }).find("gate_routing: two rows at tokens=2"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              ComponentTables({{Component::experts, {{{4, 1, 4}, 1.0}, {{4, 1, 4}, 2.0}}}}, kTiny);
            }).find("experts: two rows at (N=4, A=1, M=4)"),
            std::string::npos);
}

}  // namespace
}  // namespace moe
