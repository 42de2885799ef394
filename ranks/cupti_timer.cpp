// CUPTI activity tracing: every forward is bracketed by an external correlation id; the value of
// a forward is the sum of durations of the unique kernel/memcpy/memset records whose launch
// correlates with that id (docs/measurement.md).
#include <cupti.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>

#include "core/checked_call.h"
#include "ranks/forward_timer.h"

namespace moe {

namespace {

// The record-struct versions, chosen in one place.
using KernelRecord = CUpti_ActivityKernel10;
using MemcpyRecord = CUpti_ActivityMemcpy6;
using MemsetRecord = CUpti_ActivityMemset4;
using ExternalRecord = CUpti_ActivityExternalCorrelation;
constexpr auto kCorrelationKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
constexpr std::size_t kBufferBytes = 8u << 20;

struct Activity {
  std::uint32_t correlation;
  std::uint64_t start, end;
  std::string name;
  bool operator<(const Activity& o) const {
    return std::tie(correlation, start, end, name) <
           std::tie(o.correlation, o.start, o.end, o.name);
  }
};

// Buffers completed by CUPTI's thread, parsed under a lock.
struct Collected {
  std::mutex mu;
  std::vector<Activity> activities;
  std::map<std::uint32_t, std::uint64_t> external;  // CUPTI correlation -> forward id
  std::uint64_t dropped = 0;
};

Collected& collected() {
  static Collected c;
  return c;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t,
                               size_t valid) {
  auto& c = collected();
  std::lock_guard lock(c.mu);
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const KernelRecord*>(rec);
        c.activities.push_back({k->correlationId, k->start, k->end, k->name ? k->name : "kernel"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const MemcpyRecord*>(rec);
        c.activities.push_back(
            {m->correlationId, m->start, m->end, "memcpy" + std::to_string(m->copyKind)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const MemsetRecord*>(rec);
        c.activities.push_back({m->correlationId, m->start, m->end, "memset"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const ExternalRecord*>(rec);
        if (e->externalKind == kCorrelationKind) c.external[e->correlationId] = e->externalId;
        break;
      }
      default:
        break;
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
    c.dropped += dropped;
  std::free(buffer);
}

class CuptiTimer final : public ForwardTimer {
 public:
  CuptiTimer() {
    HARNESS_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    for (auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                      CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                      CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER})
      HARNESS_CHECK(cuptiActivityEnable(kind));
  }
  CuptiTimer(const CuptiTimer&) = delete;
  CuptiTimer& operator=(const CuptiTimer&) = delete;
  ~CuptiTimer() override {
    cuptiActivityFlushAll(1);
    for (auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                      CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                      CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER})
      cuptiActivityDisable(kind);
  }

  std::string method() const override { return "cupti_activity"; }

  void begin(std::string_view) override {
    HARNESS_CHECK(cuptiActivityPushExternalCorrelationId(kCorrelationKind, ++next_id_));
    pending_.push_back(next_id_);
  }

  void end() override {
    std::uint64_t id = 0;
    HARNESS_CHECK(cuptiActivityPopExternalCorrelationId(kCorrelationKind, &id));
    if (id != pending_.back()) throw std::runtime_error("CUPTI correlation bracket mismatch");
  }

  std::vector<ForwardRecord> collect() override {
    HARNESS_CHECK(cuptiActivityFlushAll(1));
    auto& c = collected();
    std::lock_guard lock(c.mu);
    // Unique activities per forward, ordered by start time.
    std::map<std::uint64_t, std::set<Activity>> by_forward;
    for (auto& a : c.activities) {
      auto it = c.external.find(a.correlation);
      if (it != c.external.end()) by_forward[it->second].insert(a);
    }
    std::vector<ForwardRecord> out;
    for (auto id : pending_) {
      ForwardRecord r;
      std::vector<const Activity*> ordered;
      for (const auto& a : by_forward[id]) ordered.push_back(&a);
      std::sort(ordered.begin(), ordered.end(),
                [](auto* x, auto* y) { return x->start < y->start; });
      std::string names;
      for (const auto* a : ordered) {
        const double us = static_cast<double>(a->end - a->start) / 1000.0;
        r.value_us += us;
        r.activities.emplace_back(a->name, us);
        names += a->name + ";";
      }
      r.activity_count = static_cast<std::int32_t>(ordered.size());
      r.name_hash = std::hash<std::string>{}(names);
      out.push_back(r);
    }
    // The device was synchronized and every buffer flushed: whatever is left is unbracketed work
    // (warm-up, verification, flag reads) and is not part of any forward.
    c.activities.clear();
    c.external.clear();
    pending_.clear();
    dropped_ = c.dropped;
    return out;
  }

  std::uint64_t dropped() const override { return dropped_; }

 private:
  std::uint64_t next_id_ = 0;
  std::vector<std::uint64_t> pending_;
  std::uint64_t dropped_ = 0;
};

}  // namespace

std::unique_ptr<ForwardTimer> make_cupti_timer() {
  return std::make_unique<CuptiTimer>();
}

}  // namespace moe
