// The co-location validity gate (docs/colocation.md), run on every node: the node's first rank
// measures one target cell solo and then while other ranks of the node run closed-loop background
// work (component loops and collectives among themselves); 8-way, then 4-way, then stop.
#pragma once

#include <mpi.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/job_spec.h"
#include "ranks/families.h"

namespace moe {

inline constexpr double kColocationTolerance = 0.03;

struct RegimeFigures {
  int regime = 1;                                    // ranks of the node running at once
  double throughput_solo = 0, throughput_coloc = 0;  // reference forwards per second
  FamilyShares solo, coloc;
};

struct FamilyCheck {
  std::string family;
  double solo = 0, coloc = 0, delta = 0;
  bool pass = false;
};

struct RegimeVerdict {
  int regime = 0;
  bool passed = false;
  double throughput_ratio = 0;
  std::vector<FamilyCheck> f3;  // the three families with the largest solo share
  std::string reason;           // why it failed ("" when passed)
};

// Pass iff |T_coloc/T_solo - 1| < 0.03 and every F3 family moved by < 0.03 share points, with
// both windows classifiable (<= 30% `other`).
[[nodiscard]] RegimeVerdict decide(const RegimeFigures& f);

// {8, 4} limited to the ranks on the node; the largest available when fewer than 4 (>= 2).
[[nodiscard]] std::vector<int> candidate_regimes(int ranks_on_node);

struct GateVerdict {
  std::vector<RegimeVerdict> tried;
  std::optional<int> allowed;  // the regime acquisition may use; nullopt: stop
};
// Tries `regimes` in order and stops at the first that passes; never a smaller regime silently.
[[nodiscard]] GateVerdict run_gate(const std::vector<int>& regimes,
                                   const std::function<RegimeFigures(int)>& measure);

struct ColocateOptions {
  std::string out_dir;         // colocation.h5
  double interval_s = 2.0;     // clean interval of the throughput measurement
  double calibration_s = 0.5;  // calibration run before each interval
  int window_forwards = 50;    // reference forwards in the family-share window
  bool quiet = false;
  bool keep_launcher_binding = false;  // bind within the launcher's mask (ranks/affinity.h)
};

// Collective over `comm`. Returns the verdict document (all nodes) on rank 0, null elsewhere.
[[nodiscard]] nlohmann::json colocate(MPI_Comm comm, const JobSpec& job,
                                      const ColocateOptions& options);

// Reads <variant_dir>/colocation.yaml: the regime acquisition may use on a node (nullopt when the
// gate stopped), or throws when absent.
[[nodiscard]] std::optional<int> allowed_regime(const nlohmann::json& verdict);

}  // namespace moe
