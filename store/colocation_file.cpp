#include "store/colocation_file.h"

#include <filesystem>

#include "store/hdf5_handle.h"

namespace moe {

void write_colocation_file(const std::string& dir, const nlohmann::json& verdict,
                           const std::string& family_table_sha256) {
  std::filesystem::create_directories(dir);
  const auto path = (std::filesystem::path(dir) / "colocation.h5").string();
  const auto tmp = path + ".tmp";
  auto f = H5_OPEN(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  write_string_attr(f, "schema", "colocation/1");
  write_string_attr(f, "verdict", verdict.dump());
  write_string_attr(f, "family_table_sha256", family_table_sha256);
  write_string_attr(f, "units",
                    "throughput: reference forwards per second; shares: fraction of kernel time");
  f.close();
  std::filesystem::rename(tmp, path);
}

}  // namespace moe
