// colocation.h5: the co-location verdict as a self-describing HDF5 file beside the acquisition
// (docs/colocation.md). Written to a temporary name and renamed.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace moe {

void write_colocation_file(const std::string& dir, const nlohmann::json& verdict,
                           const std::string& family_table_sha256);

}  // namespace moe
