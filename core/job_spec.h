// Job specs: YAML files under jobs/ (or the embedded default) describing what to measure.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/component.h"
#include "core/geometry.h"

namespace moe {

// Upper limits of a job's sizes, checked by validate() before anything is planned or allocated:
// beyond them a plan or an acquisition would not finish, or not fit any device.
namespace job_limits {
inline constexpr std::int64_t kHidden = 65536;        // model.hidden_size
inline constexpr std::int64_t kIntermediate = 65536;  // (shared) moe_intermediate_size
inline constexpr std::int64_t kExperts = 4096;        // model.num_experts
inline constexpr std::int64_t kTopK = 64;             // model.top_k
inline constexpr std::int64_t kLayers = 1024;         // model.num_layers
inline constexpr std::int64_t kSharedExperts = 64;    // model.shared_experts.count
inline constexpr std::int64_t kTokens = 1 << 20;      // tokens.max_num_batched_tokens, max_num_seqs
inline constexpr std::int64_t kParallel = 4096;       // each TP and DP degree
inline constexpr std::int64_t kRounds = 1000;         // measurement.rounds
inline constexpr std::int64_t kIterations = 100000;   // measurement.iterations
inline constexpr std::int64_t kSettleMs = 60000;      // measurement.settle_ms
inline constexpr double kMinGridFactor = 1.1;         // measurement.grid_factor
inline constexpr std::int64_t kAddedPoints = 100000;  // fidelity.max_added_points
inline constexpr std::int64_t kHeldOutRandom = 10000;  // fidelity.random_points
inline constexpr std::int64_t kRemeasures = 100;       // fidelity.remeasure_limit
}  // namespace job_limits

// Every problem with a job (file, YAML, values, command-line overrides) is one JobError whose
// message names the problem. Raised before any measurement starts.
class JobError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class GraphMode { none, piecewise, full, full_and_piecewise, full_decode_only };
[[nodiscard]] std::string to_string(GraphMode m);
// True for modes whose capture sizes replace interior geometric token points.
[[nodiscard]] bool capture_sizes_replace_tokens(GraphMode m);

// Held-out validation, adaptive refinement and quality gates (docs/measurement.md#fidelity).
struct FidelitySpec {
  double tolerance = 0.02;      // held-out |relative error| a table must meet
  int max_added_points = 2000;  // per cell: grid points refinement may add
  int random_points = 12;       // per cell: random feasible held-out points
  int remeasure_limit = 2;      // fresh measurements of a point that fails B/2B
  bool refine = true;           // false: validate only, never add points
  // Publish tables that miss the gate, recorded as fidelity "accepted-with-failures" (a
  // publishing policy, not a measurement condition: not part of the contract).
  bool accept_failures = false;
  bool operator==(const FidelitySpec&) const = default;
};

struct JobSpec {
  std::string source;  // file path, or "<embedded default>"
  ModelGeometry geometry;
  std::vector<int> tp{1};
  std::vector<int> dp{1};
  std::vector<int> ep;     // filter over TP*DP; empty = no filter
  std::vector<int> ranks;  // filter over ranks of each deployment; empty = all
  bool sp = false;
  std::int64_t max_num_batched_tokens = 0;
  std::int64_t max_num_seqs = 0;
  GraphMode graph_mode = GraphMode::none;
  std::vector<std::int64_t> capture_sizes;
  bool capture_sizes_derived = false;
  double grid_factor = 2.0;
  int rounds = 3;
  int iterations = 10;
  // Untimed forwards per point before its warm-up, in ms (docs/measurement.md#protocol); unset:
  // the backend's default (settle_ms_for).
  std::optional<int> settle_ms;
  // The settle's whole length, in ms, when the power or thermal policy held the clocks down
  // during it (the governor then needs longer); unset: the backend's default.
  std::optional<int> capped_settle_ms;
  std::string backend = "auto";  // auto | cpu_reference | cublas_grouped | native | staircase_model
  // Components to measure; empty = every component of each target. A subset is its own
  // acquisition (the contract records the grids); collectives are measured either way.
  std::vector<Component> components;
  std::uint64_t seed = 20261129;
  std::string out_root = "out";
  std::string variant;
  double gpu_hours = 1.0;
  FidelitySpec fidelity;

  // Deployment cells selected by tp x dp (EP = TP*DP), the ep filter and the rank filter.
  // Throws JobError naming an unmatched explicit EP or an EP that does not divide E.
  [[nodiscard]] std::vector<Target> targets() const;
};

[[nodiscard]] JobSpec parse_job(const std::string& yaml_text, const std::string& source);
[[nodiscard]] JobSpec load_job_file(const std::string& path);
[[nodiscard]] JobSpec default_job();
// Where `acquire` and `colocate` keep a job's acquisition when no --out is given (and where
// `plan` looks for its measured costs): <out_root>/acquisitions/<variant>.
[[nodiscard]] std::string default_acquisition_dir(const JobSpec& job);
[[nodiscard]] const std::string& default_job_yaml();

// Command-line overrides; unset fields keep the job's values. Validates the result.
struct JobOverrides {
  std::optional<std::vector<int>> tp, dp, ep, ranks;
  std::optional<int> rounds, iterations;
  std::optional<std::string> backend, out_root;
  std::optional<double> grid_factor, gpu_hours;
  std::optional<std::vector<Component>> components;
  std::optional<ModelGeometry> geometry;  // --model-config
};
void apply_overrides(JobSpec& job, const JobOverrides& o);

// Checks every value-level rule (positive sizes, k <= E, capture sizes within the budget,
// targets resolvable). parse_job and apply_overrides call it.
void validate(const JobSpec& job);

// True for the backends that run on the host CPU (cpu_reference and its staircase_model test
// double): no GPU needed, host-side figures, never device data.
[[nodiscard]] bool host_backend(std::string_view backend);

// Untimed forwards before each point on a GPU backend (docs/measurement.md#protocol): on the H200
// 300 ms took the spread of one point over bench orders from up to 24% to at most 6%.
inline constexpr int kGpuSettleMs = 300;
// The job's measurement.settle_ms, or the default of `backend`: kGpuSettleMs on GPU backends,
// 0 on host backends.
[[nodiscard]] int settle_ms_for(const JobSpec& job, std::string_view backend);
// Under the H200's power cap a 300 ms settle left the same point spread by up to 15% over three
// bench orders; 1500 ms kept it within 5% (docs/measurement.md#protocol).
inline constexpr int kGpuCappedSettleMs = 1500;
// The job's measurement.capped_settle_ms, or kGpuCappedSettleMs on GPU backends, 0 on host
// backends (whose clocks nothing reports as held down).
[[nodiscard]] int capped_settle_ms_for(const JobSpec& job, std::string_view backend);

// "gate_routing,experts" -> components; names the option and the unknown name in the error.
[[nodiscard]] std::vector<Component> parse_component_list(const std::string& text,
                                                          const std::string& option);
// "1,2,4" -> {1,2,4}; names the option in the error.
[[nodiscard]] std::vector<int> parse_int_list(const std::string& text, const std::string& option);

}  // namespace moe
