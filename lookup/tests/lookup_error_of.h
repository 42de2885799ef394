// The lookup tests' probe of a refusal: the LookupError message of `f`, or "" when it returned.
#pragma once

#include <functional>
#include <string>

#include "lookup/tables.h"

namespace moe {

inline std::string lookup_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const LookupError& e) {
    return e.what();
  }
  return "";
}

}  // namespace moe
