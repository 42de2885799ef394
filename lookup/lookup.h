// The lookup library (docs/bundle-format.md): loads a bundle variant once per deployment (TP, DP,
// rank, SP), validates it, and answers component-time queries by interpolation inside measured
// support. Out-of-support queries, corrupt contracts and checksum mismatches are errors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "bundle/bundle_meta.h"
#include "core/component.h"
#include "lookup/tables.h"

namespace moe {

struct DeploymentKey {
  int tp = 1, dp = 1, rank = 0;
  std::optional<bool> sp;  // unset: the only entry of (tp, dp, rank)
  // When set, the entry must have been measured on this device only: every device of its
  // hardware identity has this UUID, or a name containing it (case-insensitive, e.g. "H200").
  std::string expect_device;
};

// How well a table predicted points it was not built from (meta.yaml coverage.fidelity:
// docs/bundle-format.md): |relative error| statistics over its held-out points.
struct HeldOutErrors {
  int count = 0;
  double median = 0, p95 = 0, max = 0;
  // "balanced" or "off_balance": the experts points of the query's routing class, where the
  // entry records both; empty: the table's whole held-out set.
  std::string routing;
  // "across_waves": the experts points whose prediction spans a launch-wave step
  // (held_out_errors_across_wave_steps); empty otherwise.
  std::string waves;
  // With the bundle's key names (count, median_abs_relative_error, ...), and `routing` and
  // `waves` if any.
  [[nodiscard]] nlohmann::json to_json() const;
};

// How far apart GPUs of the kind measured the same points (meta.yaml coverage.fidelity
// repeatability.by_device: held-out points that a later refinement stage measured again as grid
// rows; device_anchors: rows a device new to the campaign measured again; no interpolation in
// either; docs/bundle-format.md). A table measured by a campaign that ran on several GPUs mixes
// their offsets, and a GPU that did not measure it may run off by as much: a bound on what the
// held-out errors can promise on another GPU of the kind.
struct DeviceSpread {
  int count = 0;               // held-out points measured on two devices (0: none recorded)
  double median = 0, max = 0;  // of |grid - held-out| / held-out over them
  // The signed median of the device pair furthest apart ((grid - held-out) / held-out, or
  // (anchor - row) / row), among the pairs of both records with at least kMinPairPoints points
  // (fewer are one point's noise); 0 where none.
  double largest_offset = 0;
  int pairs = 0;  // device pairs with at least kMinPairPoints points, of both records
  static constexpr int kMinPairPoints = 5;
  // With the bundle's key names (count, median_abs_relative_difference, ...).
  [[nodiscard]] nlohmann::json to_json() const;
};

class Deployment {
 public:
  // Loads <variant_dir>/meta.yaml and the deployment's table. Throws LookupError naming the
  // problem (missing entry, corrupt YAML, wrong schema, checksum mismatch, bad CSV, a device
  // other than key.expect_device).
  static Deployment load(const std::filesystem::path& variant_dir, const DeploymentKey& key,
                         std::size_t cache_capacity = 4096);
  ~Deployment();
  Deployment(Deployment&&) noexcept;
  Deployment& operator=(Deployment&&) noexcept;

  // Component time in microseconds. Local components use `tokens` only.
  [[nodiscard]] LookupResult query(Component c, std::int64_t tokens, std::int64_t activated = 0,
                                   std::int64_t assignments = 0);
  [[nodiscard]] const nlohmann::json& contract() const;
  [[nodiscard]] std::vector<Component> components() const;
  // The held-out errors of the table of `c` that apply to a query at (tokens, activated,
  // assignments): for experts those of its routing class — balanced when (A, M) is the balanced
  // routing of its N (the planner's balanced_point) — where the entry records both classes, else
  // the whole set. nullopt where the entry records no fidelity (bundles published before it).
  [[nodiscard]] std::optional<HeldOutErrors> held_out_errors(Component c, std::int64_t tokens,
                                                             std::int64_t activated = 0,
                                                             std::int64_t assignments = 0) const;
  // The held-out errors of the table of `c` over its points whose prediction spans a launch-wave
  // step (coverage.fidelity held_out.by_waves.across_waves): what applies to an answer whose
  // vertices run different launch waves (row_clocks.csv records each row's). nullopt where the
  // entry records no such split (a backend that declares no waves, or an older bundle).
  [[nodiscard]] std::optional<HeldOutErrors> held_out_errors_across_wave_steps(Component c) const;
  // How each published row of the component tables was measured (row_clocks.csv, read under its
  // checksum on first use and kept): clock, devices, run spread, launch waves. Empty for an entry
  // published before the file. Throws LookupError for a missing or corrupt row_clocks.csv.
  [[nodiscard]] const RowRecords& row_records() const;
  // Whether an experts answer's vertices run different launch waves (row_records()): a wave step
  // lies between them, and
  // held_out_errors_across_wave_steps applies. nullopt for the other components, an exact row,
  // or where a vertex's waves are not recorded (a backend that declares none, an older bundle).
  // Throws LookupError for a missing or corrupt row_clocks.csv.
  [[nodiscard]] std::optional<bool> spans_launch_wave_step(Component c,
                                                           const LookupResult& r) const;
  // The spread between GPUs of the kind that the table of `c` records; nullopt where it records
  // none (a bundle published before the forty-ninth session). Throws LookupError when malformed.
  [[nodiscard]] std::optional<DeviceSpread> device_spread(Component c) const;
  // The published rows of one component, in table order (empty when it has none).
  [[nodiscard]] const std::vector<TableRow>& rows(Component c) const;
  [[nodiscard]] std::size_t cache_hits() const;

 private:
  struct Impl;
  explicit Deployment(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One row of a collective table as lookup reads it.
struct CollectivePoint {
  std::int64_t tokens = 0, bytes = 0;
  double time_us = 0, steady_time_us = 0;
};

struct CollectiveResult {
  double time_us = 0;         // kernel time (the column a simulator adds to component times)
  double steady_time_us = 0;  // nccl-tests' back-to-back figure
  std::int64_t bytes = 0;     // the buffer at these tokens
  bool exact = false;         // a measured row
  std::vector<CollectivePoint> rows;  // the measured rows used (one, or the two that bracket)
};

// A deployment's collective table (docs/bundle-format.md#collective-tables): loads and checks it
// like Deployment (entry, device, checksum) and interpolates each collective linearly in bytes
// between the measured token counts that bracket a query; refuses outside them. Thread-safe
// (const).
class CollectiveTable {
 public:
  static CollectiveTable load(const std::filesystem::path& variant_dir, const DeploymentKey& key);
  ~CollectiveTable();
  CollectiveTable(CollectiveTable&&) noexcept;
  CollectiveTable& operator=(CollectiveTable&&) noexcept;

  // `tokens` is the per-DP-rank token count (the table's token axis).
  [[nodiscard]] CollectiveResult query(const std::string& collective, std::int64_t tokens) const;
  [[nodiscard]] std::vector<std::string> collectives() const;
  [[nodiscard]] const nlohmann::json& contract() const;

 private:
  struct Impl;
  explicit CollectiveTable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe
