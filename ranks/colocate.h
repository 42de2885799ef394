// The co-location validity gate (docs/colocation.md), run on every node: the node's first rank
// measures one target cell solo and then while other ranks of the node run closed-loop background
// work (component loops and collectives among themselves); 8-way, then 4-way, then stop.
#pragma once

#include <mpi.h>

#include <ctime>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/job_spec.h"
#include "ranks/families.h"

namespace moe {

inline constexpr double kColocationTolerance = 0.03;

// ---------------------------------------------------------------- the statistic
// A phase (solo, or one regime co-located) is a warm-up and then `intervals` clean intervals;
// each interval gives a throughput and the family shares of a window of reference forwards.
struct IntervalFigures {
  double throughput = 0;                   // reference forwards per second
  std::map<std::string, double> shares;    // family -> share of the window's kernel time
  std::map<std::string, double> other_us;  // kernel name -> time, for kernels classified `other`
};

// A phase decided on interval medians; the spread of the interval throughputs is recorded.
struct PhaseFigures {
  double throughput = 0;  // median over intervals
  double throughput_min = 0, throughput_max = 0;
  FamilyShares shares;  // per-family median over intervals
  // The kernels the family table did not classify (top 20 by time over all windows, with their
  // share of the windows' kernel time): what an unclassifiable window reports.
  std::vector<std::pair<std::string, double>> unmatched;
  std::vector<std::string> contamination;  // why the phase's environment was not clean
  [[nodiscard]] double spread() const {    // (max - min) / median of the interval throughputs
    return throughput > 0 ? (throughput_max - throughput_min) / throughput : 0.0;
  }
};
// Throws std::invalid_argument for no intervals.
[[nodiscard]] PhaseFigures combine_intervals(const std::vector<IntervalFigures>& intervals);

// When an environment sample (docs/colocation.md#contamination) shows work that is not the
// gate's own: a GPU process that is not a rank of the node, an SM clock below
// `min_clock_fraction` of its maximum, or a host load beyond the gate's own busy ranks of more
// than `max_foreign_load_per_cpu` per online CPU.
struct ContaminationLimits {
  double min_clock_fraction = 0.80;
  double max_foreign_load_per_cpu = 0.5;
};
// `samples`: environment objects {load_average: [1, 5, 15 min], online_cpus, device:
// {sm_clock_mhz, sm_clock_max_mhz, gpu_processes: "pid,pid"}}; `node_pids`: the node's ranks;
// `busy_ranks`: ranks of the node running work during the phase. One reason per kind found.
[[nodiscard]] std::vector<std::string> contamination(const nlohmann::json& samples,
                                                     const std::vector<long>& node_pids,
                                                     int busy_ranks,
                                                     const ContaminationLimits& limits);

struct RegimeFigures {
  int regime = 1;  // ranks of the node running at once
  PhaseFigures solo, coloc;
};

struct FamilyCheck {
  std::string family;
  double solo = 0, coloc = 0, delta = 0;
  bool pass = false;
};

struct RegimeVerdict {
  int regime = 0;
  bool passed = false;
  bool stop = false;  // the solo windows are unclassifiable: no other regime is worth trying
  double throughput_ratio = 0;
  std::vector<FamilyCheck> f3;  // the three families with the largest solo share
  std::string reason;           // why it failed ("" when passed)
};

// Pass iff neither phase is contaminated, both windows are classifiable (<= 30% `other`),
// |T_coloc/T_solo - 1| < 0.03 on the interval medians and every F3 family's median share moved by
// < 0.03 points. An unclassifiable solo window stops the gate, naming the top unmatched kernels.
[[nodiscard]] RegimeVerdict decide(const RegimeFigures& f);

// {8, 4} limited to the ranks on the node; the largest available when fewer than 4 (>= 2).
[[nodiscard]] std::vector<int> candidate_regimes(int ranks_on_node);

struct GateVerdict {
  std::vector<RegimeVerdict> tried;
  std::optional<int> allowed;  // the regime acquisition may use; nullopt: stop
};
// Tries `regimes` in order and stops at the first that passes, or at one whose verdict says stop;
// never a smaller regime silently.
[[nodiscard]] GateVerdict run_gate(const std::vector<int>& regimes,
                                   const std::function<RegimeFigures(int)>& measure);

// The measurement profile of each phase (docs/colocation.md#profile): the protocol's default, or
// `quick` for CI and smoke runs (its verdict says so).
struct GateProfile {
  std::string name = "default";
  double warmup_s = 60;    // closed-loop forwards before the first interval
  double measure_s = 240;  // clean measurement, split into `intervals`
  int intervals = 8;
  int window_forwards = 50;  // reference forwards in each interval's family-share window
  [[nodiscard]] static GateProfile quick() { return {"quick", 0.5, 2.0, 4, 10}; }
};

struct ColocateOptions {
  std::string out_dir;  // colocation.h5
  GateProfile profile;
  ContaminationLimits limits;
  bool quiet = false;
  bool keep_launcher_binding = false;  // bind within the launcher's mask (ranks/affinity.h)
};

// colocate's exit status (docs/colocation.md#exit-status).
inline constexpr int kGatePassed = 0;        // every node has an allowed regime
inline constexpr int kGateStopped = 3;       // a node's regimes all failed
inline constexpr int kGateUnclassified = 4;  // a node's solo window is unclassifiable

// Collective over `comm`. Returns the verdict document (all nodes) on rank 0, null elsewhere.
[[nodiscard]] nlohmann::json colocate(MPI_Comm comm, const JobSpec& job,
                                      const ColocateOptions& options);

// Exit status of a verdict document: kGatePassed, kGateStopped or kGateUnclassified.
[[nodiscard]] int gate_exit_status(const nlohmann::json& verdict);

// ---------------------------------------------------------------- the gate gates
// What a verdict must match before acquisition runs several measuring ranks on a node.
struct GateRequirement {
  std::string backend;
  std::string family_table_sha256;
  std::string host;
  std::vector<std::string> gpu_uuids;  // the node's GPUs, sorted (empty on host backends)
  double max_age_hours = 168;
  std::time_t now = 0;
};
struct GateDecision {
  std::optional<int> regime;  // the regime this node may use
  std::string problem;        // why none ("" when `regime`)
};
// The regime `verdict` (colocation.yaml; nullopt when there is none) allows on the node of `req`:
// the verdict must be of this backend and family table, younger than the maximum age, hold an
// entry for this host with these GPU UUIDs, and that entry must have passed.
[[nodiscard]] GateDecision check_verdict(const std::optional<nlohmann::json>& verdict,
                                         const GateRequirement& req);

}  // namespace moe
