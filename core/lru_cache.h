// A bounded least-recently-used map: the lookup library's answer cache and the host copy of
// expert weights used by verification both keep one.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <utility>

namespace moe {

template <class Key, class Value>
class LruCache {
 public:
  explicit LruCache(std::size_t capacity = 0) : capacity_(capacity) {}

  // The cached value, now the most recently used; nullptr when absent.
  Value* find(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  // Stores `value` as the most recently used and evicts down to the capacity, but never below
  // `keep` entries (the most recent ones, which callers may still point into). Returns the
  // stored value.
  Value& insert(const Key& key, Value value, std::size_t keep = 0) {
    if (auto* existing = find(key)) {
      *existing = std::move(value);
      return *existing;
    }
    order_.emplace_front(key, std::move(value));
    index_[key] = order_.begin();
    while (order_.size() > capacity_ && order_.size() > keep) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return order_.front().second;
  }

  [[nodiscard]] std::size_t size() const { return order_.size(); }
  [[nodiscard]] std::size_t capacity() const { return capacity_; }
  void set_capacity(std::size_t capacity) { capacity_ = capacity; }

 private:
  std::size_t capacity_;
  std::list<std::pair<Key, Value>> order_;  // most recent first
  std::map<Key, typename std::list<std::pair<Key, Value>>::iterator> index_;
};

}  // namespace moe
