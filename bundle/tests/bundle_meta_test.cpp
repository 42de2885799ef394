#include "bundle/bundle_meta.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/files.h"

namespace moe {
namespace {

TEST(BundleMeta, RoundTripsAndDetectsTampering) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("meta_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  BundleMeta m;
  m.variant = dir.filename().string();
  const Target target{2, 1, 2, 1, true};
  const nlohmann::json contract = {
      {"backend", "cublas_grouped"}, {"tolerance", 0.03}, {"names", {"a", "123"}}};
  m.add({target, "moe_components/x/components.csv", contract, "", {{"table_sha256", "abc"}}, {}});
  save_bundle_meta(dir, m);
  const auto back = load_bundle_meta(dir);
  ASSERT_NE(back.find(target), nullptr);
  EXPECT_EQ(back.find(target)->contract, contract);
  EXPECT_EQ(back.find(target)->contract_sha256, contract_sha256(contract));
  EXPECT_EQ(back.to_yaml(), m.to_yaml());
  auto text = read_file(dir / "meta.yaml");
  text.replace(text.find("cublas_grouped"), 14, "cublas_groupee");
  write_file_atomic(dir / "meta.yaml", text);
  EXPECT_THROW((void)load_bundle_meta(dir), BundleError);
  write_file_atomic(dir / "meta.yaml", text.substr(0, text.size() / 2) + "\n  - [unclosed");
  EXPECT_THROW((void)load_bundle_meta(dir), BundleError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moe
