#include "bundle/bundle_meta.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "bundle/format.h"
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
  const nlohmann::json contract = {{"backend", "cublas_grouped"},
                                   {"tolerance", 0.03},
                                   {"names", {"a", "123"}},
                                   {"target", target.to_json()}};
  m.add({target,
         bundle_format::components_path(target),
         contract,
         "",
         {{"table_sha256", "abc"}},
         {}});
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

// coverage.fidelity and its components as the readers see them: what the entry has, and empty
// objects where it has none or something other than an object (older or hand-edited entries).
TEST(BundleMeta, FidelityOfAnEntryIsItsCoverageOrEmpty) {
  BundleEntry e;
  const nlohmann::json components = {{"experts", {{"held_out", {{"count", 3}}}}}};
  e.coverage = {{"fidelity", {{"status", "passed"}, {"components", components}}}};
  EXPECT_EQ(e.fidelity().value("status", ""), "passed");
  EXPECT_EQ(e.fidelity_components(), components);
  for (const nlohmann::json& coverage :
       {nlohmann::json(), nlohmann::json("text"), nlohmann::json{{"completion", 1.0}},
        nlohmann::json{{"fidelity", 7}}, nlohmann::json{{"fidelity", {{"components", "x"}}}}}) {
    e.coverage = coverage;
    EXPECT_TRUE(e.fidelity_components().is_object()) << coverage;
    EXPECT_TRUE(e.fidelity_components().empty()) << coverage;
    EXPECT_TRUE(e.fidelity().is_object()) << coverage;
  }
  e.coverage = {{"fidelity", {{"components", "x"}, {"status", "passed"}}}};
  EXPECT_EQ(e.fidelity().value("status", ""), "passed");
}

// Loads a one-entry meta.yaml whose entry is `entry` and returns the load error ("" if none).
std::string load_error(const BundleEntry& entry) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("meta_ident_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  BundleMeta m;
  m.variant = dir.filename().string();
  m.add(entry);
  save_bundle_meta(dir, m);
  std::string error;
  try {
    (void)load_bundle_meta(dir);
  } catch (const BundleError& e) {
    error = e.what();
  }
  std::filesystem::remove_all(dir);
  return error;
}

TEST(BundleMeta, TargetAndPathAreUnderTheContract) {
  const Target target{1, 2, 2, 0, false};
  const nlohmann::json contract = {{"target", target.to_json()}};
  const auto path = bundle_format::components_path(target);
  EXPECT_EQ(load_error({target, path, contract, "", {}, {}}), "");
  // An entry relabelled to another target (dp2 -> dp4) no longer matches its contract.
  const Target other{1, 4, 4, 0, false};
  EXPECT_NE(load_error({other, path, contract, "", {}, {}}).find("does not match its contract"),
            std::string::npos);
  // A path that leaves the bundle, or names another target's table, is refused.
  for (const std::string& bad : std::vector<std::string>{"../../../../outside.csv", "/etc/passwd",
                                                         bundle_format::components_path(other)})
    EXPECT_NE(load_error({target, bad, contract, "", {}, {}}).find("expected '" + path + "'"),
              std::string::npos)
        << bad;
}

// The co-location verdict of a variant: none when absent, what was published, and a file that is
// not YAML is an error naming it (never "no verdict").
TEST(BundleMeta, TheColocationVerdictIsReadBackOrRefusedWhenCorrupt) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("colocation_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  EXPECT_EQ(load_colocation(dir), std::nullopt);
  const nlohmann::json verdict = {{"status", "passed"}, {"regime", 2}};
  publish_colocation(dir, verdict);
  EXPECT_EQ(load_colocation(dir), verdict);
  write_file_atomic(dir / bundle_format::kColocationFile, "status: [passed\n");
  try {
    (void)load_colocation(dir);
    ADD_FAILURE() << "a corrupt verdict was read";
  } catch (const BundleError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / bundle_format::kColocationFile).string() +
                                         ": corrupt co-location verdict"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(BundleMeta, RowRecordsAreReadUnderTheirChecksum) {
  const auto tp_dir =
      std::filesystem::temp_directory_path() / ("row_clocks_" + std::to_string(::getpid()));
  const Target target{1, 1, 1, 0, false};
  BundleEntry e{target, bundle_format::components_path(target), {}, "", {}, {}};
  const auto dir = tp_dir / std::filesystem::path(e.path).parent_path();
  std::filesystem::create_directories(dir);
  // Published before the file existed: no records, no error.
  EXPECT_TRUE(read_row_records(tp_dir, e).empty());
  const auto sign = [&](const std::string& text) {
    write_file_atomic(dir / bundle_format::kRowClocksFile, text);
    e.coverage["fidelity"]["row_clocks_table"] = {{"file", bundle_format::kRowClocksFile},
                                                  {"sha256", sha256_hex(text)}};
  };
  const std::string header = std::string(bundle_format::kRowClocksHeader) + "\n";
  sign(header +
       "gate_routing,16,0,0,1974.5,0,,\nexperts,16,8,128,,,,\nexperts,16,128,128,1884.0,0;3,0.0412,"
       "3;4\n");
  const auto records = read_row_records(tp_dir, e);
  ASSERT_EQ(records.size(), 3u);
  const auto& gate = records.at({Component::gate_routing, GridPoint{16, 0, 0}});
  EXPECT_DOUBLE_EQ(gate.sm_clock_mean_mhz.value(), 1974.5);
  EXPECT_EQ(gate.devices, std::vector<int>{0});
  const auto& unrecorded = records.at({Component::experts, GridPoint{16, 8, 128}});
  EXPECT_FALSE(unrecorded.sm_clock_mean_mhz);
  EXPECT_TRUE(unrecorded.devices.empty());
  const auto& two = records.at({Component::experts, GridPoint{16, 128, 128}});
  EXPECT_DOUBLE_EQ(two.sm_clock_mean_mhz.value(), 1884.0);
  EXPECT_EQ(two.devices, (std::vector<int>{0, 3}));
  EXPECT_DOUBLE_EQ(two.run_spread.value(), 0.0412);
  EXPECT_EQ(two.launch_waves, (std::vector<std::int64_t>{3, 4}));
  EXPECT_FALSE(gate.run_spread);
  EXPECT_TRUE(gate.launch_waves.empty());
  EXPECT_TRUE(unrecorded.launch_waves.empty());
  // Published before the launch_waves column: the spread, no waves.
  sign(
      "component,tokens,activated_experts,local_assignments,sm_clock_mean_mhz,devices,run_spread\n"
      "experts,16,128,128,1884.0,2,0.01\n");
  const auto before_waves = read_row_records(tp_dir, e).at({Component::experts, {16, 128, 128}});
  EXPECT_DOUBLE_EQ(before_waves.run_spread.value(), 0.01);
  EXPECT_TRUE(before_waves.launch_waves.empty());
  // Published before the run_spread column: clocks and devices, no spread.
  sign(
      "component,tokens,activated_experts,local_assignments,sm_clock_mean_mhz,devices\n"
      "experts,16,128,128,1884.0,2\n");
  const auto before_spread = read_row_records(tp_dir, e).at({Component::experts, {16, 128, 128}});
  EXPECT_EQ(before_spread.devices, std::vector<int>{2});
  EXPECT_FALSE(before_spread.run_spread);
  // Published before the devices column: clocks, no devices.
  sign(
      "component,tokens,activated_experts,local_assignments,sm_clock_mean_mhz\n"
      "experts,16,128,128,1884.0\n");
  const auto old = read_row_records(tp_dir, e);
  EXPECT_DOUBLE_EQ(old.at({Component::experts, GridPoint{16, 128, 128}}).sm_clock_mean_mhz.value(),
                   1884.0);
  EXPECT_TRUE(old.at({Component::experts, GridPoint{16, 128, 128}}).devices.empty());
  const auto error_of = [&] {
    try {
      (void)read_row_records(tp_dir, e);
    } catch (const BundleError& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  write_file_atomic(dir / bundle_format::kRowClocksFile, header + "experts,16,8,128,1900.0,0,\n");
  EXPECT_NE(error_of().find("checksum mismatch (row_clocks_table.sha256 in meta.yaml)"),
            std::string::npos);
  for (const char* line :
       {"shared,1,0,0,1900.0,0", "experts,16,8,1900.0", "experts,16,x,128,1,0",
        "experts,16,8,128,1900.0,0;x", "experts,16,8,128,1900.0,-1", "experts,16,8,128,1,0,x",
        "experts,16,8,128,1,0,-0.1", "experts,16,8,128,1,0,0.1,x", "experts,16,8,128,1,0,0.1,3;-1",
        "experts,16,8,128,1,0,0.1,2,3"}) {
    sign(header + "experts,1,1,1,1960.0,0,0.01,1;1\n" + line + "\n");
    EXPECT_NE(error_of().find(std::string(bundle_format::kRowClocksFile) + ":3: expected " +
                              bundle_format::kRowClocksHeader),
              std::string::npos)
        << line << ": " << error_of();
  }
  std::filesystem::remove(dir / bundle_format::kRowClocksFile);
  EXPECT_NE(error_of().find("(named by row_clocks_table in meta.yaml)"), std::string::npos);
  std::filesystem::remove_all(tp_dir);
}

}  // namespace
}  // namespace moe
