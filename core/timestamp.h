// UTC timestamps for every file the harness writes (HDF5 attributes, verdicts, bundles).
#pragma once

#include <ctime>
#include <optional>
#include <string>

namespace moe {

[[nodiscard]] std::string utc_now();  // 2026-11-29T13:55:23Z
[[nodiscard]] std::string utc_string(std::time_t t);
// The instant of a utc_now() string; nullopt for anything else.
[[nodiscard]] std::optional<std::time_t> parse_utc(const std::string& text);

}  // namespace moe
