#include "lookup/tables.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "bundle/format.h"
#include "core/files.h"
#include "core/planner.h"
#include "lookup/simplex_interpolator.h"

namespace moe {

namespace {

// Barycentric weights at or below this are round-off of a query on a simplex face.
constexpr double kNegligibleWeight = 1e-12;

// 1-D piecewise-linear table over tokens.
struct TokenTable {
  std::vector<TableRow> rows;  // sorted by tokens

  LookupResult at(std::int64_t tokens, const std::string& what) const {
    if (rows.empty()) throw LookupError(what + ": no measured rows");
    auto hi =
        std::lower_bound(rows.begin(), rows.end(), tokens,
                         [](const TableRow& r, std::int64_t t) { return r.point.tokens < t; });
    if (hi != rows.end() && hi->point.tokens == tokens)
      return {hi->time_us, true, {{hi->point, hi->time_us, 1.0}}};
    if (hi == rows.begin() || hi == rows.end())
      throw LookupError(
          what + ": tokens=" + std::to_string(tokens) + " is outside the measured support [" +
          std::to_string(rows.front().point.tokens) + ", " +
          std::to_string(rows.back().point.tokens) + "]; the lookup never extrapolates");
    const auto lo = hi - 1;
    const double w = static_cast<double>(tokens - lo->point.tokens) /
                     static_cast<double>(hi->point.tokens - lo->point.tokens);
    return {(1 - w) * lo->time_us + w * hi->time_us,
            false,
            {{lo->point, lo->time_us, 1 - w}, {hi->point, hi->time_us, w}}};
  }
};

struct PointHash {
  std::size_t operator()(const GridPoint& p) const {
    std::size_t h = std::hash<std::int64_t>{}(p.tokens);
    h = h * 1000003u ^ std::hash<std::int64_t>{}(p.activated);
    return h * 1000003u ^ std::hash<std::int64_t>{}(p.assignments);
  }
};

std::string coordinates(std::int64_t n, std::int64_t a, std::int64_t m) {
  return "(N=" + std::to_string(n) + ", A=" + std::to_string(a) + ", M=" + std::to_string(m) + ")";
}

// Where the experts mesh comes from (docs/bundle-format.md#interpolation): a kernel pads each
// expert's rows to its tiles, so the time steps where the rows per active expert M/A cross a
// tile boundary: along rays M/A = b through the origin, which sparse N rows cross diagonally. In
// (log N, log M/A, log A/N) those edges are axis-parallel, and a grid of rows x rows-per-expert
// values is a tensor grid whose Delaunay cells do not straddle them.
SimplexInterpolator::Point rows_per_expert_coordinates(const SimplexInterpolator::Point& p) {
  return {std::log(p[0]), std::log(p[2] / p[1]), std::log(p[1] / p[0])};
}

}  // namespace

std::optional<std::string> impossible_row(Component c, const GridPoint& p,
                                          const ExpertPolytope& poly) {
  const auto where = coordinates(p.tokens, p.activated, p.assignments);
  if (c != Component::experts) {
    if (p.tokens >= 1 && p.activated == 0 && p.assignments == 0) return std::nullopt;
    return std::string(to_string(c)) + ": the row at " + where +
           " is impossible: a local component's rows have N >= 1 and A = M = 0";
  }
  if (const auto violated = feasibility_violation(p.tokens, p.activated, p.assignments,
                                                  poly.local_experts, poly.experts, poly.top_k))
    return "experts: the row at " + where + " is impossible for this deployment: it violates " +
           *violated;
  return std::nullopt;
}

struct ComponentTables::Impl {
  ExpertPolytope polytope;
  std::map<Component, TokenTable> local;  // gate_routing, finalize_copy, wrapper
  bool has_experts = false;
  TokenTable all_remote;              // experts rows with A = M = 0
  std::vector<TableRow> expert_rows;  // experts rows with A > 0
  std::unique_ptr<SimplexInterpolator> experts;
  MeshSource experts_mesh_source = MeshSource::stored;
  std::unordered_map<GridPoint, std::size_t, PointHash> exact_experts;  // index in expert_rows
};

ComponentTables::~ComponentTables() = default;
ComponentTables::ComponentTables(ComponentTables&&) noexcept = default;
ComponentTables& ComponentTables::operator=(ComponentTables&&) noexcept = default;

ComponentTables::ComponentTables(const std::map<Component, std::vector<TableRow>>& rows,
                                 ExpertPolytope polytope,
                                 const std::optional<Triangulation>& experts_mesh)
    : impl_(std::make_unique<Impl>()) {
  auto& d = *impl_;
  d.polytope = polytope;
  const auto by_tokens = [](const TableRow& a, const TableRow& b) {
    return a.point.tokens < b.point.tokens;
  };
  const auto no_duplicates = [&](const TokenTable& t, const std::string& what) {
    for (std::size_t i = 1; i < t.rows.size(); ++i)
      if (t.rows[i].point.tokens == t.rows[i - 1].point.tokens)
        throw LookupError(what + ": two rows at tokens=" + std::to_string(t.rows[i].point.tokens));
  };
  for (const auto& [c, list] : rows) {
    for (const auto& r : list)
      if (const auto why = impossible_row(c, r.point, polytope)) throw LookupError(*why);
    if (c != Component::experts) {
      auto& t = d.local[c];
      t.rows = list;
      std::sort(t.rows.begin(), t.rows.end(), by_tokens);
      no_duplicates(t, std::string(to_string(c)));
      continue;
    }
    d.has_experts = true;
    std::vector<SimplexInterpolator::Point> pts;
    for (const auto& r : list) {
      if (r.point.activated == 0) {
        d.all_remote.rows.push_back(r);
        continue;
      }
      if (!d.exact_experts.emplace(r.point, d.expert_rows.size()).second)
        throw LookupError("experts: two rows at " +
                          coordinates(r.point.tokens, r.point.activated, r.point.assignments));
      d.expert_rows.push_back(r);
      pts.push_back({static_cast<double>(r.point.tokens), static_cast<double>(r.point.activated),
                     static_cast<double>(r.point.assignments)});
    }
    std::sort(d.all_remote.rows.begin(), d.all_remote.rows.end(), by_tokens);
    no_duplicates(d.all_remote, "experts (all remote)");
    if (pts.empty()) continue;
    try {
      if (experts_mesh) {
        d.experts = std::make_unique<SimplexInterpolator>(std::move(pts), *experts_mesh);
      } else {
        std::vector<SimplexInterpolator::Point> mesh_coordinates;
        for (const auto& p : pts) mesh_coordinates.push_back(rows_per_expert_coordinates(p));
        d.experts = std::make_unique<SimplexInterpolator>(std::move(pts), mesh_coordinates);
        d.experts_mesh_source =
            d.experts->mesh_refusal() ? MeshSource::linear : MeshSource::rows_per_expert;
      }
    } catch (const std::invalid_argument& e) {
      throw LookupError(std::string("experts: ") + e.what());
    }
  }
}

std::optional<Triangulation> ComponentTables::experts_mesh() const {
  if (!impl_->experts) return std::nullopt;
  return impl_->experts->triangulation();
}

MeshSource ComponentTables::experts_mesh_source() const {
  return impl_->experts_mesh_source;
}

const char* to_string(MeshSource s) {
  switch (s) {
    case MeshSource::stored:
      return "stored";
    case MeshSource::rows_per_expert:
      return "rows_per_expert";
    case MeshSource::linear:
      return "linear";
  }
  return "?";
}

namespace {

nlohmann::json frame_vector(const std::array<double, 3>& v) {
  return {v[0], v[1], v[2]};
}

std::array<double, 3> frame_vector(const nlohmann::json& j, const char* what) {
  if (!j.is_array() || j.size() != 3)
    throw LookupError(std::string("triangulation: ") + what + " must have 3 numbers");
  return {j[0].get<double>(), j[1].get<double>(), j[2].get<double>()};
}

}  // namespace

std::string triangulation_json(const Triangulation& t) {
  nlohmann::json basis = nlohmann::json::array(), simplices = nlohmann::json::array();
  for (const auto& b : t.basis) basis.push_back(frame_vector(b));
  for (const auto& s : t.simplices) {
    nlohmann::json v = nlohmann::json::array();
    for (int k = 0; k <= t.dimension; ++k) v.push_back(s[static_cast<std::size_t>(k)]);
    simplices.push_back(v);
  }
  return nlohmann::json{{"schema", "triangulation/1"},
                        {"points",
                         "experts rows of components.csv with activated_experts > 0, "
                         "in file order, as (tokens, activated_experts, "
                         "local_assignments)"},
                        {"dimension", t.dimension},
                        {"scale", frame_vector(t.scale)},
                        {"origin", frame_vector(t.origin)},
                        {"basis", basis},
                        {"simplices", simplices}}
      .dump();
}

Triangulation triangulation_from_json(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.value("schema", "") != "triangulation/1")
      throw LookupError("triangulation: schema is not triangulation/1");
    Triangulation t;
    t.dimension = j.at("dimension").get<int>();
    if (t.dimension < 0 || t.dimension > 3)
      throw LookupError("triangulation: dimension must be 0 to 3");
    t.scale = frame_vector(j.at("scale"), "scale");
    t.origin = frame_vector(j.at("origin"), "origin");
    for (const auto& b : j.at("basis")) t.basis.push_back(frame_vector(b, "a basis vector"));
    for (const auto& s : j.at("simplices")) {
      if (!s.is_array() || static_cast<int>(s.size()) != t.dimension + 1)
        throw LookupError("triangulation: every simplex needs dimension + 1 vertex indices");
      std::array<std::size_t, 4> v{};
      for (std::size_t k = 0; k < s.size(); ++k) v[k] = s[k].get<std::size_t>();
      t.simplices.push_back(v);
    }
    return t;
  } catch (const nlohmann::json::exception& e) {
    throw LookupError(std::string("triangulation: malformed (") + e.what() + ")");
  }
}

LookupResult ComponentTables::query(Component c, std::int64_t tokens, std::int64_t activated,
                                    std::int64_t assignments) const {
  const auto& d = *impl_;
  const std::string what(to_string(c));
  if (c != Component::experts) {
    const auto t = d.local.find(c);
    if (t == d.local.end()) throw LookupError(what + ": no measured rows");
    return t->second.at(tokens, what);
  }
  if (!d.has_experts) throw LookupError("experts: no measured rows");
  const auto& poly = d.polytope;
  if (const auto violated = feasibility_violation(tokens, activated, assignments,
                                                  poly.local_experts, poly.experts, poly.top_k))
    throw LookupError("experts: " + coordinates(tokens, activated, assignments) +
                      " is impossible for this deployment: it violates " + *violated);
  if (activated == 0) return d.all_remote.at(tokens, "experts (all remote)");
  if (const auto ex = d.exact_experts.find({tokens, activated, assignments});
      ex != d.exact_experts.end()) {
    const auto& row = d.expert_rows[ex->second];
    return {row.time_us, true, {{row.point, row.time_us, 1.0}}};
  }
  const auto w =
      d.experts ? d.experts->locate({static_cast<double>(tokens), static_cast<double>(activated),
                                     static_cast<double>(assignments)})
                : std::nullopt;
  if (!w)
    throw LookupError("experts: " + coordinates(tokens, activated, assignments) +
                      " is outside the measured support; the lookup never extrapolates");
  // Vertices whose weight is round-off (the query lies on a face) are left out and the remaining
  // weights renormalized, so an explanation lists only contributing rows.
  double kept = 0;
  for (const auto& [v, weight] : *w) kept += weight > kNegligibleWeight ? weight : 0;
  LookupResult r;
  for (auto [v, weight] : *w) {
    if (weight <= kNegligibleWeight) continue;
    weight /= kept;
    const auto& row = d.expert_rows[v];
    r.time_us += weight * row.time_us;
    r.vertices.push_back({row.point, row.time_us, weight});
  }
  return r;
}

std::optional<StoredTriangulation> stored_triangulation(const ComponentTables& tables) {
  const auto mesh = tables.experts_mesh();
  if (!mesh) return std::nullopt;
  StoredTriangulation out{triangulation_json(*mesh), {}};
  out.coverage = {{"file", bundle_format::kTriangulationFile},
                  {"sha256", sha256_hex(out.text)},
                  {"dimension", mesh->dimension},
                  {"simplices", mesh->simplices.size()},
                  {"built_in", to_string(tables.experts_mesh_source())}};
  return out;
}

}  // namespace moe
