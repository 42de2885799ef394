#include "core/lru_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace moe {
namespace {

TEST(LruCache, EvictsTheLeastRecentlyUsedAndKeepsTheNewest) {
  LruCache<int, std::string> cache(2);
  cache.insert(1, "one");
  cache.insert(2, "two");
  ASSERT_NE(cache.find(1), nullptr);  // 1 is now the most recent
  cache.insert(3, "three");           // evicts 2
  EXPECT_EQ(cache.find(2), nullptr);
  ASSERT_NE(cache.find(1), nullptr);
  EXPECT_EQ(*cache.find(1), "one");
  EXPECT_EQ(*cache.find(3), "three");
  EXPECT_EQ(cache.size(), 2u);
  cache.insert(3, "drei");  // replacing keeps the size
  EXPECT_EQ(*cache.find(3), "drei");
  EXPECT_EQ(cache.size(), 2u);
}

TEST(LruCache, KeepProtectsTheEntriesOfTheCurrentRequest) {
  LruCache<int, int> cache(1);
  cache.insert(1, 10);
  auto& second = cache.insert(2, 20, /*keep=*/2);  // over capacity, but both are kept
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(second, 20);
  EXPECT_EQ(*cache.find(1), 10);
  cache.insert(3, 30);  // no keep: back to the capacity
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.find(1), nullptr);
}

}  // namespace
}  // namespace moe
