// What the lookup library does with a bundle it cannot trust: every way a table, its
// triangulation or its meta.yaml entry can be wrong is one LookupError naming the file (and the
// line), never an answer from a half-read number or a row the deployment could not have measured.
// Each case signs the damaged file as a publisher would, so that the reader gets past the
// checksums to the check under test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "bundle/bundle_meta.h"
#include "bundle/format.h"
#include "core/files.h"
#include "lookup/lookup.h"
#include "lookup/tests/lookup_error_of.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// A one-entry bundle of Qwen3-like routing at toy size (EP1: E = L = 8, k = 2, so M = N k).
class BundleReader : public ::testing::Test {
 protected:
  void SetUp() override {
    variant = fs::temp_directory_path() /
              ("bundle_reader_" + std::to_string(::getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(variant);
    contract = {{"target", target.to_json()},
                {"geometry", {{"num_experts", 8}, {"top_k", 2}}},
                {"expert_ownership", {{"local_experts", 8}}},
                {"components", {"gate_routing", "experts"}}};
    header = bundle_format::kComponentsHeader;
    rows = {"gate_routing,eager,1,0,0,6.0", "gate_routing,eager,16,0,0,7.0",
            "experts,eager,4,2,8,20.0",     "experts,eager,4,8,8,40.0",
            "experts,eager,16,2,32,30.0",   "experts,eager,16,8,32,90.0"};
  }
  void TearDown() override { fs::remove_all(variant); }

  [[nodiscard]] std::string csv() const {
    std::string text = header + "\n";
    for (const auto& r : rows) text += r + "\n";
    return text;
  }
  [[nodiscard]] fs::path table_dir() const {
    return bundle_format::target_dir(variant, target, bundle_format::kComponentsDir);
  }

  // Publishes the bundle as it stands: the table and the triangulation of its experts rows (or
  // `triangulation` when set), each signed in the entry's coverage, then `edit` applied to the
  // entry before meta.yaml is written.
  void publish(const std::function<void(BundleEntry&)>& edit = {}) {
    fs::create_directories(table_dir());
    const std::string table = csv();
    write_file_atomic(table_dir() / bundle_format::kComponentsFile, table);
    BundleEntry e{target, bundle_format::components_path(target), contract,
                  "",     {{"table_sha256", sha256_hex(table)}},  {}};
    std::string mesh = triangulation.value_or("");
    if (!triangulation) {
      std::map<Component, std::vector<TableRow>> parsed;
      parsed[Component::experts] = {
          {{4, 2, 8}, 20.0}, {{4, 8, 8}, 40.0}, {{16, 2, 32}, 30.0}, {{16, 8, 32}, 90.0}};
      mesh = triangulation_json(*ComponentTables(parsed, {8, 2, 8}).experts_mesh());
    }
    write_file_atomic(table_dir() / bundle_format::kTriangulationFile, mesh);
    e.coverage["triangulation"] = {{"file", bundle_format::kTriangulationFile},
                                   {"sha256", sha256_hex(mesh)}};
    if (edit) edit(e);
    BundleMeta meta;
    meta.variant = variant.filename().string();
    meta.add(e);
    for (const auto& extra : extra_entries) meta.add(extra);
    save_bundle_meta(variant, meta);
  }
  // The load's error after publishing ("" if it loaded).
  std::string load_error(const DeploymentKey& key = {}) {
    publish();
    return lookup_error_of([&] { (void)Deployment::load(variant, key); });
  }

  fs::path variant;
  Target target{1, 1, 1, 0, false};
  nlohmann::json contract;
  std::string header;
  std::vector<std::string> rows;
  std::optional<std::string> triangulation;
  std::vector<BundleEntry> extra_entries;
};

// The case every other one damages: it loads and answers, so a test that expects an error
// fails for the damage only.
TEST_F(BundleReader, AWellFormedBundleLoadsAndAnswers) {
  publish();
  auto d = Deployment::load(variant, {});
  EXPECT_DOUBLE_EQ(d.query(Component::gate_routing, 16).time_us, 7.0);
  EXPECT_NEAR(d.query(Component::gate_routing, 4).time_us, 6.2, 1e-12);
  const auto exact = d.query(Component::experts, 16, 8, 32);
  EXPECT_TRUE(exact.exact);
  EXPECT_DOUBLE_EQ(exact.time_us, 90.0);
  EXPECT_FALSE(d.query(Component::experts, 8, 4, 16).exact);
}

TEST_F(BundleReader, ATableWithAnotherHeaderIsRefused) {
  header = "component,mode,tokens,activated_experts,local_assignments,time_ms";
  const auto error = load_error();
  EXPECT_NE(error.find("components.csv: unexpected header "
                       "'component,mode,tokens,activated_experts,local_assignments,time_ms'"),
            std::string::npos)
      << error;
}

TEST_F(BundleReader, ARowWithoutSixFieldsNamesItsLine) {
  rows[1] = "gate_routing,eager,16,0,7.0";
  EXPECT_NE(load_error().find("components.csv:3: expected 6 fields"), std::string::npos);
}

TEST_F(BundleReader, ARowOfAnUnknownOrUnlistedComponentIsRefused) {
  rows[0] = "gate,eager,1,0,0,6.0";
  EXPECT_NE(load_error().find("components.csv:2: unknown component 'gate'"), std::string::npos);
  SetUp();
  contract["components"] = {"experts"};
  const auto error = load_error();
  EXPECT_NE(error.find("components.csv:2: a row of gate_routing, which the entry's "
                       "contract.components does not list"),
            std::string::npos)
      << error;
}

// std::stoll("16abc") is 16 and std::stod("inf") a time: the table reads whole, finite numbers.
TEST_F(BundleReader, ANumberItCannotReadWholeNamesItsLineAndField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"gate_routing,eager,16abc,0,0,7.0", "'16abc' is not a whole number"},
      {"gate_routing,eager,16,0,0,7.0us", "'7.0us' is not a number"},
      {"gate_routing,eager,16,0,0,inf", "'inf' is not a finite number"},
      {"gate_routing,eager,16,0,0,nan", "'nan' is not a finite number"},
      {"gate_routing,eager, 16,0,0,7.0", "' 16' is not a whole number"},
      {"gate_routing,eager,16,0,0,", "'' is not a number"},
      {"gate_routing,eager,1e1,0,0,7.0", "'1e1' is not a whole number"},
  };
  for (const auto& [row, why] : cases) {
    SetUp();
    rows[1] = row;
    const auto error = load_error();
    EXPECT_NE(error.find("components.csv:3: malformed number: " + why), std::string::npos)
        << row << ": " << error;
  }
}

TEST_F(BundleReader, ANonPositiveTimeOrTokenCountIsRefused) {
  for (const std::string row : {"gate_routing,eager,16,0,0,0", "gate_routing,eager,16,0,0,-7.0",
                                "gate_routing,eager,0,0,0,7.0"}) {
    SetUp();
    rows[1] = row;
    EXPECT_NE(load_error().find("components.csv:3: non-positive tokens or time"), std::string::npos)
        << row;
  }
}

// The polytope that refuses impossible queries also refuses impossible rows (and ComponentTables
// itself, so that a publisher cannot write one: ComponentTables.ImpossibleRowsAreRefused).
TEST_F(BundleReader, ARowTheDeploymentCouldNotHaveMeasuredNamesTheConstraint) {
  const std::vector<std::tuple<std::size_t, std::string, std::string>> cases = {
      {2, "experts,eager,4,2,9,20.0",
       "components.csv:4: experts: the row at (N=4, A=2, M=9) is impossible for this deployment: "
       "it violates M <= N*min(k, A) = 8"},
      {2, "experts,eager,4,9,8,20.0",
       "components.csv:4: experts: the row at (N=4, A=9, M=8) is impossible for this deployment: "
       "it violates A <= L (local experts) = 8"},
      {0, "gate_routing,eager,1,1,2,6.0",
       "components.csv:2: gate_routing: the row at (N=1, A=1, M=2) is impossible: a local "
       "component's rows have N >= 1 and A = M = 0"},
  };
  for (const auto& [index, row, why] : cases) {
    SetUp();
    rows[index] = row;
    const auto error = load_error();
    EXPECT_NE(error.find(why), std::string::npos) << row << ": " << error;
  }
}

TEST_F(BundleReader, DuplicateRowsNameTheTable) {
  rows.push_back("gate_routing,eager,16,0,0,7.5");
  const auto error = load_error();
  EXPECT_NE(error.find("components.csv: gate_routing: two rows at tokens=16"), std::string::npos)
      << error;
}

TEST_F(BundleReader, AContractWithoutItsComponentsOrGeometryIsRefused) {
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](auto& c) { c.erase("components"); },
       "the entry's contract has no list of components (contract.components)"},
      {[](auto& c) { c["components"] = "experts"; },
       "the entry's contract has no list of components (contract.components)"},
      {[](auto& c) {
         c["components"] = {"gate_routing", 7};
       },
       "the entry's contract names an unknown component 7"},
      {[](auto& c) {
         c["components"] = {"gate_routing", "expert"};
       },
       "the entry's contract names an unknown component \"expert\""},
      {[](auto& c) { c["geometry"].erase("top_k"); },
       "the entry's contract lacks geometry.num_experts, geometry.top_k or "
       "expert_ownership.local_experts"},
      {[](auto& c) { c["geometry"]["num_experts"] = 8.5; },
       "the entry's contract: geometry.num_experts is 8.5, not a count from 1 to 1048576"},
      {[](auto& c) { c["expert_ownership"]["local_experts"] = 0; },
       "the entry's contract: expert_ownership.local_experts is 0, not a count from 1 to 1048576"},
      {[](auto& c) { c["geometry"]["top_k"] = 9; },
       "the entry's contract: geometry.top_k or expert_ownership.local_experts exceeds "
       "geometry.num_experts"},
  };
  for (const auto& [edit, why] : cases) {
    SetUp();
    edit(contract);
    const auto error = load_error();
    EXPECT_NE(error.find(variant.string() + ": " + why), std::string::npos) << error;
  }
}

// Held-out errors by routing need the point's balanced routing, from the contract's full
// geometry and target: this toy contract has only the counts, so asking is refused by name.
TEST_F(BundleReader, HeldOutErrorsByRoutingWithoutTheContractsGeometryAreRefused) {
  const nlohmann::json stats = {{"count", 3},
                                {"median_abs_relative_error", 0.01},
                                {"p95_abs_relative_error", 0.02},
                                {"max_abs_relative_error", 0.03}};
  nlohmann::json held_out = stats;
  held_out["by_routing"] = {{"balanced", stats}, {"off_balance", stats}};
  publish([&](BundleEntry& e) {
    e.coverage["fidelity"] = {{"components", {{"experts", {{"held_out", held_out}}}}}};
  });
  const auto d = Deployment::load(variant, {});
  const auto error =
      lookup_error_of([&] { (void)d.held_out_errors(Component::experts, 16, 8, 32); });
  EXPECT_EQ(error.rfind("the entry's contract names no geometry and target: ", 0), 0u) << error;
  // Without routing statistics nothing needs the geometry: the table's own figures come back.
  held_out.erase("by_routing");
  publish([&](BundleEntry& e) {
    e.coverage["fidelity"] = {{"components", {{"experts", {{"held_out", held_out}}}}}};
  });
  const auto plain = Deployment::load(variant, {}).held_out_errors(Component::experts, 16, 8, 32);
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->count, 3);
  EXPECT_DOUBLE_EQ(plain->max, 0.03);
}

// The errors across launch-wave steps come from held_out.by_waves alone (no geometry needed).
TEST_F(BundleReader, HeldOutErrorsAcrossWaveStepsAreTheSplitsWhereTheEntryRecordsIt) {
  const auto stats = [](int count, double max) {
    return nlohmann::json{{"count", count},
                          {"median_abs_relative_error", max / 4},
                          {"p95_abs_relative_error", max / 2},
                          {"max_abs_relative_error", max}};
  };
  nlohmann::json held_out = stats(5, 0.08);
  const auto with = [&](const nlohmann::json& held) {
    publish([&](BundleEntry& e) {
      e.coverage["fidelity"] = {{"components", {{"experts", {{"held_out", held}}}}}};
    });
    return Deployment::load(variant, {});
  };
  EXPECT_FALSE(with(held_out).held_out_errors_across_wave_steps(Component::experts));
  held_out["by_waves"] = {{"same_waves", stats(3, 0.01)}, {"across_waves", stats(2, 0.08)}};
  const auto across = with(held_out).held_out_errors_across_wave_steps(Component::experts);
  ASSERT_TRUE(across.has_value());
  EXPECT_EQ(across->count, 2);
  EXPECT_DOUBLE_EQ(across->max, 0.08);
  EXPECT_DOUBLE_EQ(across->p95, 0.04);
  EXPECT_EQ(across->to_json().at("waves"), "across_waves");
  EXPECT_FALSE(with(held_out).held_out_errors_across_wave_steps(Component::gate_routing));
  held_out["by_waves"].erase("across_waves");
  const auto d = with(held_out);
  const auto error =
      lookup_error_of([&] { (void)d.held_out_errors_across_wave_steps(Component::experts); });
  EXPECT_EQ(error.rfind("the entry's coverage.fidelity of experts is malformed: ", 0), 0u) << error;
}

// The spread between devices comes from repeatability.by_device and device_anchors: none recorded,
// none measured (one device), the largest offset among pairs of enough points, and malformed.
TEST_F(BundleReader, DeviceSpreadIsTheRepeatabilityAcrossDevices) {
  const auto with = [&](const nlohmann::json& repeatability) {
    publish([&](BundleEntry& e) {
      e.coverage["fidelity"] = {{"components", {{"experts", {{"repeatability", repeatability}}}}}};
    });
    return Deployment::load(variant, {});
  };
  nlohmann::json repeatability = {{"count", 3}};
  EXPECT_FALSE(with(repeatability).device_spread(Component::experts));  // before the split
  repeatability["by_device"] = {{"same_device",
                                 {{"count", 3},
                                  {"median_abs_relative_difference", 0.001},
                                  {"max_abs_relative_difference", 0.002}}},
                                {"across_devices", {{"count", 0}}},
                                {"device_pairs", nlohmann::json::array()}};
  const auto one_device = with(repeatability).device_spread(Component::experts);
  ASSERT_TRUE(one_device.has_value());
  EXPECT_EQ(one_device->count, 0);
  EXPECT_EQ(one_device->pairs, 0);
  EXPECT_DOUBLE_EQ(one_device->largest_offset, 0);
  repeatability["by_device"]["across_devices"] = {{"count", 12},
                                                  {"median_abs_relative_difference", 0.02},
                                                  {"max_abs_relative_difference", 0.05}};
  const auto pair = [](int grid, int held, int count, double offset) {
    return nlohmann::json{{"grid_device", grid},
                          {"held_out_device", held},
                          {"count", count},
                          {"median_signed_relative_difference", offset}};
  };
  repeatability["by_device"]["device_pairs"] = {pair(1, 0, 5, 0.01), pair(2, 0, 6, -0.03),
                                                pair(2, 1, 1, 0.2)};  // one point: left out
  const auto spread = with(repeatability).device_spread(Component::experts);
  ASSERT_TRUE(spread.has_value());
  EXPECT_EQ(spread->count, 12);
  EXPECT_DOUBLE_EQ(spread->median, 0.02);
  EXPECT_DOUBLE_EQ(spread->max, 0.05);
  EXPECT_DOUBLE_EQ(spread->largest_offset, -0.03);
  EXPECT_EQ(spread->pairs, 2);
  EXPECT_EQ(spread->to_json().at("largest_offset"), -0.03);
  EXPECT_FALSE(with(repeatability).device_spread(Component::gate_routing));
  // Anchors (rows a new device measured again) are pairs too, with or without the held-out split;
  // a device against itself (rows whose later rounds the new device measured) is not.
  const auto anchor_pair = [](int row, int anchor, int count, double offset) {
    return nlohmann::json{{"row_device", row},
                          {"anchor_device", anchor},
                          {"count", count},
                          {"median_signed_relative_difference", offset}};
  };
  const nlohmann::json anchors = {
      {"count", 15},
      {"device_pairs",
       {anchor_pair(0, 3, 5, 0.04), anchor_pair(1, 3, 4, -0.3), anchor_pair(3, 3, 6, 0.5)}}};
  const auto with_anchors = [&](const nlohmann::json& r) {
    publish([&](BundleEntry& e) {
      e.coverage["fidelity"] = {
          {"components", {{"experts", {{"repeatability", r}, {"device_anchors", anchors}}}}}};
    });
    return Deployment::load(variant, {});
  };
  const auto both = with_anchors(repeatability).device_spread(Component::experts);
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->count, 12);
  EXPECT_EQ(both->pairs, 3);
  EXPECT_DOUBLE_EQ(both->largest_offset, 0.04);
  const auto anchors_only = with_anchors({{"count", 0}}).device_spread(Component::experts);
  ASSERT_TRUE(anchors_only.has_value());
  EXPECT_EQ(anchors_only->count, 0);
  EXPECT_EQ(anchors_only->pairs, 1);
  EXPECT_DOUBLE_EQ(anchors_only->largest_offset, 0.04);
  repeatability["by_device"].erase("device_pairs");
  const auto d = with(repeatability);
  const auto error = lookup_error_of([&] { (void)d.device_spread(Component::experts); });
  EXPECT_EQ(error.rfind("the entry's coverage.fidelity of experts is malformed: ", 0), 0u) << error;
}

// Whether an answer spans a launch-wave step comes from its vertices' rows in row_clocks.csv.
TEST_F(BundleReader, AnAnswerSpansAWaveStepWhereItsVerticesRecordDifferentWaves) {
  const auto with_clocks = [&](const std::string& waves_4_8, const std::string& others = "1;1") {
    const std::string clocks = std::string(bundle_format::kRowClocksHeader) +
                               "\ngate_routing,1,0,0,,0,,\ngate_routing,16,0,0,,0,,\n"
                               "experts,4,2,8,,0,0," +
                               others + "\nexperts,4,8,8,,0,0," + waves_4_8 +
                               "\nexperts,16,2,32,,0,0," + others + "\nexperts,16,8,32,,0,0," +
                               others + "\n";
    publish([&](BundleEntry& e) {
      write_file_atomic(table_dir() / bundle_format::kRowClocksFile, clocks);
      e.coverage["fidelity"] = {
          {"row_clocks_table",
           {{"file", bundle_format::kRowClocksFile}, {"sha256", sha256_hex(clocks)}}}};
    });
    return Deployment::load(variant, {});
  };
  auto same = with_clocks("1;1");
  const auto inside = same.query(Component::experts, 8, 4, 16);
  ASSERT_FALSE(inside.exact);
  EXPECT_EQ(same.spans_launch_wave_step(Component::experts, inside), false);
  auto stepped = with_clocks("2;1");  // the row at (4, 8, 8) runs another W13 wave count
  const auto answer = stepped.query(Component::experts, 8, 8, 16);
  const bool uses_it =
      std::any_of(answer.vertices.begin(), answer.vertices.end(), [](const auto& v) {
        return v.point == GridPoint{4, 8, 8};
      });
  ASSERT_TRUE(uses_it);
  EXPECT_EQ(stepped.spans_launch_wave_step(Component::experts, answer), true);
  // The records themselves (what --explain prints beside each vertex), read once and kept.
  const auto& records = stepped.row_records();
  ASSERT_EQ(records.size(), 6u);
  EXPECT_EQ(records.at({Component::experts, GridPoint{4, 8, 8}}).launch_waves,
            (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(&stepped.row_records(), &records);
  EXPECT_EQ(
      same.spans_launch_wave_step(Component::experts, same.query(Component::experts, 8, 8, 16)),
      false);
  // An exact row, another component, or rows without recorded waves: nothing to say.
  EXPECT_FALSE(stepped.spans_launch_wave_step(Component::experts,
                                              stepped.query(Component::experts, 4, 8, 8)));
  EXPECT_FALSE(stepped.spans_launch_wave_step(Component::gate_routing,
                                              stepped.query(Component::gate_routing, 8)));
  auto unrecorded = with_clocks("", "");
  EXPECT_FALSE(unrecorded.spans_launch_wave_step(Component::experts,
                                                 unrecorded.query(Component::experts, 8, 4, 16)));
  // A row_clocks.csv that does not match its checksum is refused when first read (loading the
  // table alone does not read it).
  write_file_atomic(table_dir() / bundle_format::kRowClocksFile, "tampered\n");
  auto tampered = Deployment::load(variant, {});
  const auto spanning = tampered.query(Component::experts, 8, 8, 16);
  EXPECT_NE(lookup_error_of([&] {
              (void)tampered.spans_launch_wave_step(Component::experts, spanning);
            }).find("checksum mismatch"),
            std::string::npos);
  EXPECT_NE(lookup_error_of([&] { (void)tampered.row_records(); }).find("checksum mismatch"),
            std::string::npos);
  // A deployment that read them before keeps what it read.
  EXPECT_EQ(stepped.row_records().size(), 6u);
}

TEST_F(BundleReader, TheTriangulationMustBeRecordedPresentSignedAndWellFormed) {
  publish([](BundleEntry& e) { e.coverage.erase("triangulation"); });
  EXPECT_NE(lookup_error_of([&] { (void)Deployment::load(variant, {}); })
                .find("components.csv: the entry records no triangulation "
                      "(coverage.triangulation; published by an older harness)"),
            std::string::npos);
  publish();
  fs::remove(table_dir() / bundle_format::kTriangulationFile);
  EXPECT_NE(lookup_error_of([&] {
              (void)Deployment::load(variant, {});
            }).find("triangulation.json: triangulation missing"),
            std::string::npos);
  publish();
  write_file_atomic(table_dir() / bundle_format::kTriangulationFile, "{}");
  EXPECT_NE(lookup_error_of([&] { (void)Deployment::load(variant, {}); })
                .find("triangulation.json: checksum mismatch (SHA-256 differs from "
                      "coverage.triangulation)"),
            std::string::npos);
  // Signed, but not a triangulation a publisher writes.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"schema": "triangulation/2"})", "triangulation: schema is not triangulation/1"},
      {R"({"schema": "triangulation/1", "dimension": 5})",
       "triangulation: dimension must be 0 to 3"},
      {R"({"schema": "triangulation/1", "dimension": 2, "scale": [1, 1]})",
       "triangulation: scale must have 3 numbers"},
      {R"({"schema": "triangulation/1", "dimension": 2})", "triangulation: malformed ("},
      {R"({"schema": )", "triangulation: malformed ("},
  };
  for (const auto& [text, why] : cases) {
    triangulation = text;
    const auto error = load_error();
    EXPECT_NE(error.find("triangulation.json: " + why), std::string::npos) << text << ": " << error;
  }
}

TEST_F(BundleReader, AMissingOrAlteredTableIsRefused) {
  publish();
  write_file_atomic(table_dir() / bundle_format::kComponentsFile, csv() + "\n");
  EXPECT_NE(lookup_error_of([&] { (void)Deployment::load(variant, {}); })
                .find("components.csv: checksum mismatch (SHA-256 differs from meta.yaml "
                      "coverage.table_sha256)"),
            std::string::npos);
  fs::remove(table_dir() / bundle_format::kComponentsFile);
  EXPECT_NE(lookup_error_of([&] {
              (void)Deployment::load(variant, {});
            }).find("components.csv: table missing"),
            std::string::npos);
}

TEST_F(BundleReader, TheKeyMustNameExactlyOneEntry) {
  EXPECT_NE(load_error({2, 1, 0, std::nullopt, ""}).find(": no entry for TP2 DP1 rank 0"),
            std::string::npos);
  // The same deployment with and without sequence parallelism: --sp decides.
  Target sp = target;
  sp.sp = true;
  nlohmann::json sp_contract = contract;
  sp_contract["target"] = sp.to_json();
  extra_entries.push_back(
      {sp, bundle_format::components_path(sp), sp_contract, "", {{"table_sha256", "-"}}, {}});
  EXPECT_NE(load_error().find("several entries match TP1 DP1 rank 0; pass --sp"),
            std::string::npos);
  EXPECT_EQ(load_error({1, 1, 0, false, ""}), "");
}

// A collective table of one group: allreduce over TP2 at three token counts.
class CollectiveReader : public ::testing::Test {
 protected:
  void SetUp() override {
    variant = fs::temp_directory_path() /
              ("collective_reader_" + std::to_string(::getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(variant);
    header = bundle_format::kCollectivesHeader;
    rows = {"tp_allreduce,all_reduce,2,16,65536,10.0,6.5,6.5,9.0,8.0",
            "tp_allreduce,all_reduce,2,64,262144,20.0,13.1,13.1,19.0,18.0",
            "tp_allreduce,all_reduce,2,256,1048576,50.0,21.0,21.0,48.0,45.0"};
  }
  void TearDown() override { fs::remove_all(variant); }

  std::string load_error() {
    const auto dir = bundle_format::target_dir(variant, target, bundle_format::kCollectivesDir);
    fs::create_directories(dir);
    std::string table = header + "\n";
    for (const auto& r : rows) table += r + "\n";
    write_file_atomic(dir / bundle_format::kCollectivesFile, table);
    BundleMeta meta;
    meta.variant = variant.filename().string();
    // (A TP of a bundle has its component tables; this one's is never read.)
    meta.add({target,
              bundle_format::components_path(target),
              {{"target", target.to_json()}},
              "",
              {},
              {}});
    meta.add({target,
              bundle_format::collectives_path(target),
              {{"target", target.to_json()}},
              "",
              {{"table_sha256", sha256_hex(table)}},
              {}},
             Section::collectives);
    save_bundle_meta(variant, meta);
    return lookup_error_of([&] {
      (void)CollectiveTable::load(variant, {2, 1, 0, std::nullopt, ""});
    });
  }

  fs::path variant;
  Target target{2, 1, 1, 0, false};
  std::string header;
  std::vector<std::string> rows;
};

TEST_F(CollectiveReader, AWellFormedTableLoadsAndInterpolatesInBytes) {
  ASSERT_EQ(load_error(), "");
  const auto t = CollectiveTable::load(variant, {2, 1, 0, std::nullopt, ""});
  const auto mid = t.query("tp_allreduce", 40);
  EXPECT_FALSE(mid.exact);
  EXPECT_DOUBLE_EQ(mid.time_us, 15.0);
  EXPECT_EQ(mid.bytes, 163840);
  EXPECT_TRUE(t.query("tp_allreduce", 256).exact);
}

TEST_F(CollectiveReader, EveryMalformedRowIsRefusedNamingItsLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"tp_allreduce,all_reduce,2,64,262144,20.0,13.1,13.1,19.0", ":3: expected 10 fields"},
      {"tp_allreduce,all_reduce,2,64,262144B,20.0,13.1,13.1,19.0,18.0",
       ":3: malformed number: '262144B' is not a whole number"},
      {"tp_allreduce,all_reduce,2,64,262144,20.0,13.1,13.1,19.0,inf",
       ":3: malformed number: 'inf' is not a finite number"},
      {"tp_allreduce,all_reduce,2,64,0,20.0,13.1,13.1,19.0,18.0",
       ":3: non-positive tokens, bytes or time"},
      {"tp_allreduce,all_reduce,2,16,262144,20.0,13.1,13.1,19.0,18.0",
       ": tp_allreduce has two rows at 16 tokens"},
  };
  for (const auto& [row, why] : cases) {
    SetUp();
    rows[1] = row;
    const auto error = load_error();
    EXPECT_NE(error.find("collectives.csv" + why), std::string::npos) << row << ": " << error;
  }
  SetUp();
  header = "collective,op,group_size,tokens,bytes,time_us,algbw_gbps,busbw_gbps,model_time_us";
  EXPECT_NE(load_error().find("(a bundle published before steady_time_us; publish it again)"),
            std::string::npos);
}

}  // namespace
}  // namespace moe
