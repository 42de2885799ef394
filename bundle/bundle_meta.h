// meta.yaml of a bundle variant: per_tp[<tp>].moe_components {schema, entries}. Loaded and saved
// as a whole; callers hold <variant>/.meta.lock around load-modify-save.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/component.h"
#include "core/target.h"

namespace moe {

inline constexpr const char* kMoeComponentsSchema = "moe-components";
inline constexpr const char* kCollectivesSchema = "collectives";

// The tables listed under per_tp[<tp>]: MoE component tables and collective tables.
enum class Section { moe_components, collectives };

class BundleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct BundleEntry {
  Target target;
  std::string path;  // relative to tp<N>/
  nlohmann::json contract;
  std::string contract_sha256;
  nlohmann::json coverage;
  nlohmann::json provenance;

  // coverage.fidelity (held-out statistics, the files beside the table), and its `components`
  // (per component: held_out, sm_clock_mean_mhz, failed_points, ...); empty objects for an entry
  // published without them.
  [[nodiscard]] nlohmann::json fidelity() const;
  [[nodiscard]] nlohmann::json fidelity_components() const;
};

class BundleMeta {
 public:
  std::string variant;
  std::map<Section, std::map<int, std::vector<BundleEntry>>> sections;

  [[nodiscard]] const std::map<int, std::vector<BundleEntry>>& per_tp(
      Section s = Section::moe_components) const;
  [[nodiscard]] const BundleEntry* find(const Target& target,
                                        Section s = Section::moe_components) const;
  [[nodiscard]] BundleEntry* find(const Target& target, Section s = Section::moe_components);
  void add(BundleEntry e, Section s = Section::moe_components);
  [[nodiscard]] bool empty() const;
  [[nodiscard]] std::string to_yaml() const;
};

// The text of `file` beside a component table, which its coverage.fidelity names under `key`
// ({file, sha256}: held_out_table, row_clocks_table), checked against that SHA-256; nullopt where
// the entry names none (published before the file existed). `tp_dir`: <variant>/tp<N>. The name
// is the format's (bundle/format.h), never a path read from meta.yaml. Throws BundleError for a
// missing file or a checksum mismatch.
[[nodiscard]] std::optional<std::string> read_fidelity_file(const std::filesystem::path& tp_dir,
                                                            const BundleEntry& e,
                                                            const std::string& key,
                                                            const char* file);

// What row_clocks.csv says of one row of a component table.
struct RowRecord {
  std::optional<double> sm_clock_mean_mhz;  // the mean SM clock it ran at; nullopt: not recorded
  std::vector<int> devices;  // positions in provenance.hardware.devices; empty: not recorded
  // experts: how far its run moved (summary.h PointResult::run_spread); nullopt: not recorded
  std::optional<double> run_spread;
  // experts: the launch waves its forward runs, one count per GEMM launch, where the backend
  // declares them (core's ExpertWaves); empty: not declared or not recorded
  std::vector<std::int64_t> launch_waves;
};

// Each row of a component table's record (row_clocks.csv, through read_fidelity_file), by
// component and point; empty for an entry published before the file existed (and no devices or
// run spread where it predates their column). Throws BundleError naming a malformed line.
using RowRecords = std::map<std::pair<Component, GridPoint>, RowRecord>;
[[nodiscard]] RowRecords read_row_records(const std::filesystem::path& tp_dir,
                                          const BundleEntry& e);

// Loads <variant_dir>/meta.yaml (empty meta when absent). Throws BundleError naming the problem
// for malformed YAML, a wrong schema, or a contract whose SHA-256 does not match.
[[nodiscard]] BundleMeta load_bundle_meta(const std::filesystem::path& variant_dir);
// Writes meta.yaml atomically (temporary file, fsync, rename, directory fsync).
void save_bundle_meta(const std::filesystem::path& variant_dir, const BundleMeta& meta);

// SHA-256 identity of a contract, computed on its YAML round-trip form so that a loaded
// contract hashes like the one that was saved.
[[nodiscard]] std::string contract_sha256(const nlohmann::json& contract);

// A JSON document as YAML (strings quoted) and back; used for meta.yaml and colocation.yaml.
[[nodiscard]] std::string json_to_yaml(const nlohmann::json& j);
[[nodiscard]] nlohmann::json yaml_to_json(const std::string& yaml_text);

// The co-location verdict of a variant (<variant_dir>/colocation.yaml), or nullopt when there is
// none. Throws BundleError when the file is not valid YAML.
[[nodiscard]] std::optional<nlohmann::json> load_colocation(
    const std::filesystem::path& variant_dir);
// Writes <variant_dir>/colocation.yaml (the co-location verdict) under <variant_dir>/.meta.lock.
void publish_colocation(const std::filesystem::path& variant_dir, const nlohmann::json& verdict);

}  // namespace moe
