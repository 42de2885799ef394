// The contract: every semantic condition of an acquisition (geometry, backend, timing, grid,
// conditioning, targets). It is what acquire agrees on across ranks, what the HDF5 file stores
// and resumes against, and what the publisher turns into each meta.yaml entry. All of its JSON
// forms are written and read here (docs/design.md, docs/bundle-format.md).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/component.h"
#include "core/geometry.h"
#include "core/job_spec.h"
#include "core/target.h"

namespace moe {

struct JobSpec;
struct Plan;

class ContractError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A component grid's identity: its point count and the SHA-256 of its coordinates.
struct GridDigest {
  std::int64_t points = 0;
  std::string sha256;
  bool operator==(const GridDigest&) const = default;
};

struct TargetContract {
  Target target;
  ExpertOwnership ownership;
  int weight_banks = 0;
  std::map<Component, GridDigest> grids;
  std::map<Component, GridDigest> held_out;  // the planned held-out sets (refinement adds more)
  // The components of the grid in measurement order (gate_routing, experts, ...).
  [[nodiscard]] std::vector<Component> components() const;
};

struct GridConditions {
  double factor = 2.0;
  std::int64_t max_num_batched_tokens = 0;
  std::int64_t max_num_seqs = 0;
  std::string graph_mode;
  std::vector<std::int64_t> capture_sizes;
  bool capture_sizes_derived = false;
};

struct Conditioning {
  int rounds = 0;
  int iterations = 0;
  int settle_ms = 0;
  int capped_settle_ms = 0;  // the settle's length when the clocks were held down during it
  double bank_tolerance = 0;
  std::int64_t cache_bytes = 0;
  std::uint64_t seed = 0;
  int timing_protocol = 1;  // kTimingProtocol of the code that measured (1: absent, before it)
};

// The timing loop's version, raised when a change of it changes measured times: 2 since a point's
// chunks run back to back with one flush of the timer (fortieth session); 1 flushed after every
// chunk (docs/measurement.md#protocol).
inline constexpr int kTimingProtocol = 2;

struct Contract {
  ModelGeometry geometry;
  std::string backend;      // cpu_reference | cublas_grouped | native
  std::string timing;       // host_clock | cupti_activity
  int backend_version = 1;  // Backend::version of the code measured
  std::string mode = "eager";
  int planner_version = 0;
  GridConditions grid;
  Conditioning conditioning;
  FidelitySpec fidelity;
  std::vector<TargetContract> targets;

  // The acquisition's contract for a plan made on a device with `cache_bytes` of L2, measuring
  // version `backend_version` of `backend`.
  [[nodiscard]] static Contract of(const Plan& plan, const std::string& backend,
                                   const std::string& timing, std::int64_t cache_bytes,
                                   int backend_version = 1);

  // The stored form (HDF5 attribute); its dump is hashed for the file's identity.
  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] std::string dump() const { return to_json().dump(); }
  // Throws ContractError naming the key that is missing or malformed.
  [[nodiscard]] static Contract from_json(const nlohmann::json& j);
  [[nodiscard]] static Contract parse(const std::string& text);

  // The contract of one target's component table as published in meta.yaml.
  [[nodiscard]] nlohmann::json component_table(const TargetContract& t) const;
  // The contract of one target's collective table; `collective_backend` is nccl or mpi_host.
  [[nodiscard]] nlohmann::json collective_table(const TargetContract& t,
                                                const std::string& collective_backend) const;
};

// The geometry as stored in contracts and HDF5 attributes, and back.
[[nodiscard]] nlohmann::json geometry_json(const ModelGeometry& g);
[[nodiscard]] ModelGeometry geometry_from_json(const nlohmann::json& j);

// The backend_version of a stored contract or of a published table's contract: absent, as for
// all code from before versions were recorded, it is 1.
[[nodiscard]] int backend_version_of(const nlohmann::json& contract);

// The conditioning's timing_protocol of a stored or published contract (1 where absent).
[[nodiscard]] int timing_protocol_of(const nlohmann::json& contract);

// Names what differs from `a` to `b` by its dotted path, down through objects, with both values
// where they are scalars ("conditioning.cache_bytes: 62914560 -> 52428800", "absent" for a missing
// key); arrays and other values by their path alone. At most the first eight; "contract" when
// nothing differs.
[[nodiscard]] std::string json_difference(const nlohmann::json& a, const nlohmann::json& b);

// The one change a resumed acquisition may make to its stored contract: a larger refinement cap
// (fidelity.max_added_points), everything else equal. The cap bounds how far refinement goes,
// not how a point is measured, so a campaign refinement stopped at its cap can go on with a larger
// one (docs/cli.md, acquire). Returns {stored cap, wanted cap} when that is the only difference
// and the wanted cap is larger; nullopt otherwise.
[[nodiscard]] std::optional<std::pair<int, int>> refinement_cap_raise(const nlohmann::json& stored,
                                                                      const nlohmann::json& wanted);

}  // namespace moe
