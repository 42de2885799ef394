// UTC timestamps for every file the harness writes (HDF5 attributes, verdicts, bundles).
#pragma once

#include <string>

namespace moe {

[[nodiscard]] std::string utc_now();  // 2026-11-29T13:55:23Z

}  // namespace moe
