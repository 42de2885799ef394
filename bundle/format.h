// The bundle's file layout (docs/bundle-format.md): every file name, directory name and CSV header
// a writer or reader of a bundle uses. The lookup library depends on this header and on
// bundle_meta only, never on the publisher.
//
//   <out_root>/<variant>/meta.yaml                (updated under <variant>/.meta.lock)
//   <out_root>/<variant>/colocation.yaml          (the co-location verdict)
//   <out_root>/<variant>/tp<N>/moe_components/dp<D>_ep<E>_rank<r>_sp<0|1>/components.csv
//                                                                        /held_out.csv
//                                                                        /row_clocks.csv
//                                                                        /samples.jsonl (optional)
//   <out_root>/<variant>/tp<N>/collectives/dp<D>_ep<E>_rank<r>_sp<0|1>/collectives.csv
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "core/target.h"

namespace moe::bundle_format {

inline constexpr const char* kMetaFile = "meta.yaml";
inline constexpr const char* kMetaLock = ".meta.lock";
inline constexpr const char* kWriterLock = "writer.lock";
inline constexpr const char* kColocationFile = "colocation.yaml";
inline constexpr const char* kSamplesFile = "samples.jsonl";

inline constexpr const char* kComponentsDir = "moe_components";
inline constexpr const char* kComponentsFile = "components.csv";
inline constexpr const char* kComponentsHeader =
    "component,mode,tokens,activated_experts,local_assignments,time_us";

// The triangulation of a component table's experts rows (docs/bundle-format.md#interpolation);
// coverage.triangulation names it and its SHA-256.
inline constexpr const char* kTriangulationFile = "triangulation.json";

// Every held-out point of a component table with the table's prediction (empty: outside the
// support); coverage.fidelity.held_out_table names it and its SHA-256.
inline constexpr const char* kHeldOutFile = "held_out.csv";
inline constexpr const char* kHeldOutHeader =
    "component,tokens,activated_experts,local_assignments,measured_us,predicted_us";

// The mean SM clock each row of components.csv was measured at, row for row (empty: not
// recorded), and the devices whose rounds measured it (positions in the entry's
// provenance.hardware.devices, ';'-separated; empty: not recorded), and for `experts` how far
// its run moved (run_spread, a fraction; empty for the others), and for `experts` where the backend
// declares them the launch waves its forward runs (launch_waves, one count per GEMM launch,
// ';'-separated: W13;W2 for native; empty otherwise); files published before the devices,
// run_spread or launch_waves column have the header without them.
// coverage.fidelity.row_clocks_table names it and its SHA-256.
inline constexpr const char* kRowClocksFile = "row_clocks.csv";
inline constexpr const char* kRowClocksHeader =
    "component,tokens,activated_experts,local_assignments,sm_clock_mean_mhz,devices,run_spread,"
    "launch_waves";

inline constexpr const char* kCollectivesDir = "collectives";
inline constexpr const char* kCollectivesFile = "collectives.csv";
inline constexpr const char* kCollectivesHeader =
    "collective,op,group_size,tokens,bytes,time_us,algbw_gbps,busbw_gbps,model_time_us,"
    "steady_time_us";

// A target's component table relative to tp<N>/ (the `path` of its meta.yaml entry).
[[nodiscard]] inline std::string components_path(const Target& t) {
  return std::string(kComponentsDir) + "/" + t.dir_name() + "/" + kComponentsFile;
}
[[nodiscard]] inline std::string collectives_path(const Target& t) {
  return std::string(kCollectivesDir) + "/" + t.dir_name() + "/" + kCollectivesFile;
}
// A row's launch waves as row_clocks.csv (and bench's CSV) write them: the counts ';'-separated
// (bundle_meta's read_row_records reads them back).
[[nodiscard]] inline std::string launch_waves_field(std::span<const std::int64_t> waves) {
  std::string field;
  for (const auto w : waves) {
    if (!field.empty()) field += ';';
    field += std::to_string(w);
  }
  return field;
}
// A target's directory in the variant for `section_dir` (kComponentsDir or kCollectivesDir).
[[nodiscard]] inline std::filesystem::path target_dir(const std::filesystem::path& variant_dir,
                                                      const Target& t, const char* section_dir) {
  return variant_dir / t.tp_dir() / section_dir / t.dir_name();
}

}  // namespace moe::bundle_format
