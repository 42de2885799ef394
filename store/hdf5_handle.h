// HDF5 handles and attributes for the files store/ writes (the shared acquisition file and the
// co-location verdict file): every handle has an owner, every return code is checked.
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>

#include "core/checked_call.h"

namespace moe {

// Owner of one hid_t; copy deleted; closed by `close` (errors reported, never thrown).
class H5Id {
 public:
  H5Id() = default;
  H5Id(hid_t id, herr_t (*closer)(hid_t)) : id_(id), close_(closer) {}
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  H5Id& operator=(H5Id&& o) noexcept {
    reset();
    id_ = std::exchange(o.id_, -1);
    close_ = o.close_;
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  ~H5Id() { reset(); }
  void reset() noexcept {
    if (id_ >= 0 && close_) HARNESS_CHECK_NOTHROW(H5Call{close_(id_)});
    id_ = -1;
  }
  // Closes now and reports a failure (a file's last write happens at close).
  void close() {
    const hid_t id = std::exchange(id_, -1);
    if (id >= 0 && close_) HARNESS_CHECK_H5(close_(id));
  }
  [[nodiscard]] hid_t get() const { return id_; }
  // Forgets the handle without closing it (closing a parallel file is collective).
  void abandon() { id_ = -1; }
  operator hid_t() const { return id_; }  // NOLINT: handle passes straight to the C API

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// Opens (creates) an HDF5 object through a checked call and takes ownership of it.
#define H5_OPEN(expr, close) ::moe::H5Id(HARNESS_CHECK_H5(expr), (close))

// A scalar, null-padded string attribute (replaced when it exists).
void write_string_attr(hid_t obj, const std::string& name, const std::string& value);

}  // namespace moe
