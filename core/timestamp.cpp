#include "core/timestamp.h"

#include <ctime>

namespace moe {

std::string utc_now() {
  const auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace moe
