#include "bundle/fidelity.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(SameDevice, OnlyWhereThePointAndEveryRowItWeighsShareOneDevice) {
  const std::vector<int> a{0}, b{1}, both{0, 1}, unknown{};
  EXPECT_EQ(same_device(a, {&a, &a}), std::optional<bool>(true));
  EXPECT_EQ(same_device(a, {&a, &b}), std::optional<bool>(false));  // a row of another device
  EXPECT_EQ(same_device(a, {&a, &both}), std::optional<bool>(false));
  EXPECT_EQ(same_device(both, {&both}), std::optional<bool>(false));  // the point's rounds mix
  EXPECT_EQ(same_device(b, {&b}), std::optional<bool>(true));
  // Unrecorded on either side, or nothing weighed: cannot be told.
  EXPECT_EQ(same_device(unknown, {&a}), std::nullopt);
  EXPECT_EQ(same_device(a, {&a, &unknown}), std::nullopt);
  EXPECT_EQ(same_device(a, {}), std::nullopt);
}

}  // namespace
}  // namespace moe
