// The interpolation rules of a deployment's component tables (docs/bundle-format.md#reading-a-
// bundle), independent of where the rows come from: the lookup library builds them from a
// bundle's CSV, the publisher and the acquisition from measured rows to predict held-out points.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

#include "core/component.h"

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

class ComponentTables {
 public:
  // Local components interpolate piecewise-linearly over tokens; `experts` rows with A = M = 0
  // over tokens, the others over the Delaunay triangulation of (N, A, M). Rows must have
  // positive tokens and times (the caller validates). Throws LookupError on duplicate rows.
  ComponentTables(const std::map<Component, std::vector<TableRow>>& rows, ExpertPolytope polytope);
  ~ComponentTables();
  ComponentTables(ComponentTables&&) noexcept;
  ComponentTables& operator=(ComponentTables&&) noexcept;

  // Exact rows come back as measured; other points are interpolated inside the support.
  // Throws LookupError for a component without rows, an impossible (N, A, M) (naming the
  // violated constraint) or a point outside the measured support. Thread-safe (const).
  [[nodiscard]] LookupResult query(Component c, std::int64_t tokens, std::int64_t activated = 0,
                                   std::int64_t assignments = 0) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe
