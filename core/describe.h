// Self-descriptions shared by every file the harness writes (HDF5 attributes, contracts, plans,
// verdicts): the geometry and target as JSON, and UTC timestamps.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/geometry.h"

namespace moe {

[[nodiscard]] nlohmann::json geometry_json(const ModelGeometry& g);
[[nodiscard]] std::string utc_now();  // 2026-11-29T13:55:23Z

}  // namespace moe
