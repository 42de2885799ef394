// The interpolation rules of a deployment's component tables (docs/bundle-format.md#reading-a-
// bundle), independent of where the rows come from: the lookup library builds them from a
// bundle's CSV, the publisher and the acquisition from measured rows to predict held-out points.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/component.h"
#include "lookup/simplex_interpolator.h"

namespace moe {

class LookupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LookupVertex {
  GridPoint point;
  double time_us;
  double weight;
};

struct LookupResult {
  double time_us = 0;
  bool exact = false;                  // the query is a measured row
  std::vector<LookupVertex> vertices;  // at most four, weights > 0 summing to 1
};

struct TableRow {
  GridPoint point;
  double time_us;
};

// Feasibility polytope of a deployment's `experts` queries: E global, k per token, L local.
struct ExpertPolytope {
  int experts = 0, top_k = 0, local_experts = 0;
};

// Why a table row at `p` is one the deployment could not have measured, or nullopt: local
// components' rows have N >= 1 and A = M = 0, experts rows lie in the polytope (the violated
// constraint is named). A reader refuses such a table; it is corrupt, not a point to interpolate.
[[nodiscard]] std::optional<std::string> impossible_row(Component c, const GridPoint& p,
                                                        const ExpertPolytope& polytope);

// Where a table's experts triangulation came from (docs/bundle-format.md#interpolation).
enum class MeshSource {
  stored,           // given (a bundle's triangulation.json)
  rows_per_expert,  // Delaunay in (log N, log M/A, log A/N), checked to triangulate (N, A, M)
  linear,           // Delaunay in normalised (N, A, M): rows-per-expert coordinates did not
};
[[nodiscard]] const char* to_string(MeshSource s);

class ComponentTables {
 public:
  // Local components interpolate piecewise-linearly over tokens; `experts` rows with A = M = 0
  // over tokens, the others (in their order) over a triangulation of (N, A, M): `experts_mesh`
  // when given (a bundle's stored one), else the Delaunay triangulation of the rows in
  // rows-per-expert coordinates where it triangulates them, else their own Delaunay
  // triangulation (experts_mesh_source says which). Rows must have positive times (the caller
  // validates). Throws LookupError on a row the polytope makes impossible (naming the violated
  // constraint; local components' rows have A = M = 0), duplicate rows, or a stored
  // triangulation that does not fit them.
  ComponentTables(const std::map<Component, std::vector<TableRow>>& rows, ExpertPolytope polytope,
                  const std::optional<Triangulation>& experts_mesh = std::nullopt);
  ~ComponentTables();
  ComponentTables(ComponentTables&&) noexcept;
  ComponentTables& operator=(ComponentTables&&) noexcept;

  // Exact rows come back as measured; other points are interpolated inside the support.
  // Throws LookupError for a component without rows, an impossible (N, A, M) (naming the
  // violated constraint) or a point outside the measured support. Thread-safe (const).
  [[nodiscard]] LookupResult query(Component c, std::int64_t tokens, std::int64_t activated = 0,
                                   std::int64_t assignments = 0) const;
  // The triangulation of the `experts` rows with A > 0 (nullopt when there are none): what the
  // publisher stores so that every reader interpolates over the same simplices.
  [[nodiscard]] std::optional<Triangulation> experts_mesh() const;
  [[nodiscard]] MeshSource experts_mesh_source() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe

namespace moe {

// A triangulation as stored in a bundle (triangulation.json, docs/bundle-format.md#interpolation),
// and back; from_json throws LookupError naming what is missing or malformed.
[[nodiscard]] std::string triangulation_json(const Triangulation& t);
[[nodiscard]] Triangulation triangulation_from_json(const std::string& text);

// What a publisher stores of `tables`' experts triangulation: the text of triangulation.json and
// the entry's coverage.triangulation (file, sha256, dimension, simplices, built_in); nullopt when
// the tables have no experts rows with A > 0.
struct StoredTriangulation {
  std::string text;
  nlohmann::json coverage;
};
[[nodiscard]] std::optional<StoredTriangulation> stored_triangulation(
    const ComponentTables& tables);

}  // namespace moe
