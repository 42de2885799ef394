// An owner of one C-library handle (a CUDA stream or event, an NCCL communicator, device memory):
// move-only, released once by `Release`, whose failure is reported without throwing. Include the
// library's header before this one so that its status type is known to core/checked_call.h.
#pragma once

#include <utility>

#include "core/checked_call.h"

namespace moe {

template <class Handle, auto Release>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  explicit UniqueHandle(Handle h) : h_(h), owned_(true) {}
  UniqueHandle(UniqueHandle&& o) noexcept
      : h_(std::exchange(o.h_, Handle{})), owned_(std::exchange(o.owned_, false)) {}
  UniqueHandle& operator=(UniqueHandle&& o) noexcept {
    reset();
    h_ = std::exchange(o.h_, Handle{});
    owned_ = std::exchange(o.owned_, false);
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;
  ~UniqueHandle() { reset(); }

  void reset() noexcept {
    if (owned_ && h_ != Handle{}) HARNESS_CHECK_NOTHROW(Release(h_));
    h_ = Handle{};
    owned_ = false;
  }
  // Fills a fresh handle through a C API's out-parameter: HARNESS_CHECK(create(h.replace())).
  Handle* replace() noexcept {
    reset();
    owned_ = true;
    return &h_;
  }
  [[nodiscard]] Handle get() const { return h_; }
  [[nodiscard]] explicit operator bool() const { return owned_; }

 private:
  Handle h_{};
  bool owned_ = false;
};

}  // namespace moe
