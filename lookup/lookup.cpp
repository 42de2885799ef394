#include "lookup/lookup.h"

#include <algorithm>
#include <sstream>

#include "bundle/bundle_meta.h"
#include "bundle/format.h"
#include "core/files.h"
#include "core/lru_cache.h"
#include "core/planner.h"
#include "lookup/simplex_interpolator.h"

namespace moe {

namespace {

// Barycentric weights at or below this are round-off of a query on a simplex face.
constexpr double kNegligibleWeight = 1e-12;

struct Row {
  GridPoint point;
  double time_us;
};

// 1-D piecewise-linear table over tokens.
struct TokenTable {
  std::vector<Row> rows;  // sorted by tokens

  LookupResult at(std::int64_t tokens, const std::string& what) const {
    if (rows.empty()) throw LookupError(what + ": no measured rows");
    auto hi = std::lower_bound(rows.begin(), rows.end(), tokens,
                               [](const Row& r, std::int64_t t) { return r.point.tokens < t; });
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

struct CacheKey {
  int component;
  std::int64_t n, a, m;
  bool operator==(const CacheKey&) const = default;
  auto operator<=>(const CacheKey&) const = default;
};
struct CacheKeyHash {
  std::size_t operator()(const CacheKey& k) const {
    std::size_t h = std::hash<std::int64_t>{}(k.n);
    h = h * 1000003u ^ std::hash<std::int64_t>{}(k.a);
    h = h * 1000003u ^ std::hash<std::int64_t>{}(k.m);
    return h * 31u + static_cast<std::size_t>(k.component);
  }
};

}  // namespace

struct Deployment::Impl {
  nlohmann::json contract;
  std::map<Component, TokenTable> local;  // gate_routing, finalize_copy, wrapper
  TokenTable all_remote;                  // experts rows with A = M = 0
  std::vector<Row> expert_rows;           // experts rows with A > 0
  std::unique_ptr<SimplexInterpolator> experts;
  std::unordered_map<CacheKey, LookupResult, CacheKeyHash> exact_experts;
  std::vector<Component> components;
  int experts_global = 0, top_k = 0, experts_local = 0;  // the feasibility polytope's E, k, L
  LruCache<CacheKey, LookupResult> answers;              // bounded cache of answered queries
  std::size_t hits = 0;
};

Deployment::Deployment(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Deployment::~Deployment() = default;
Deployment::Deployment(Deployment&&) noexcept = default;
Deployment& Deployment::operator=(Deployment&&) noexcept = default;

const nlohmann::json& Deployment::contract() const {
  return impl_->contract;
}
std::vector<Component> Deployment::components() const {
  return impl_->components;
}
std::size_t Deployment::cache_hits() const {
  return impl_->hits;
}

Deployment Deployment::load(const std::filesystem::path& variant_dir, const DeploymentKey& key,
                            std::size_t cache_capacity) {
  BundleMeta meta;
  try {
    meta = load_bundle_meta(variant_dir);
  } catch (const BundleError& e) {
    throw LookupError(e.what());
  }
  if (meta.empty())
    throw LookupError(variant_dir.string() + ": no bundle here (meta.yaml missing or empty)");
  const BundleEntry* entry = nullptr;
  const auto& tables = meta.per_tp();
  auto tp = tables.find(key.tp);
  if (tp != tables.end())
    for (const auto& e : tp->second) {
      const auto& t = e.target;
      if (t.dp != key.dp || t.rank != key.rank) continue;
      if (key.sp && t.sp != *key.sp) continue;
      if (entry)
        throw LookupError("several entries match TP" + std::to_string(key.tp) + " DP" +
                          std::to_string(key.dp) + " rank " + std::to_string(key.rank) +
                          "; pass --sp");
      entry = &e;
    }
  if (!entry)
    throw LookupError(variant_dir.string() + ": no entry for TP" + std::to_string(key.tp) + " DP" +
                      std::to_string(key.dp) + " rank " + std::to_string(key.rank));
  const auto csv_path = variant_dir / tp_dir_name(key.tp) / entry->path;
  std::string csv;
  try {
    csv = read_file(csv_path);
  } catch (const std::exception&) {
    throw LookupError(csv_path.string() + ": table missing");
  }
  const auto want_sha = entry->coverage.value("table_sha256", std::string());
  if (sha256_hex(csv) != want_sha)
    throw LookupError(csv_path.string() +
                      ": checksum mismatch (SHA-256 differs from meta.yaml coverage.table_sha256)");

  auto impl = std::make_unique<Impl>();
  impl->contract = entry->contract;
  impl->answers.set_capacity(cache_capacity);
  try {
    impl->experts_global = entry->contract.at("geometry").at("num_experts").get<int>();
    impl->top_k = entry->contract.at("geometry").at("top_k").get<int>();
    impl->experts_local = entry->contract.at("expert_ownership").at("local_experts").get<int>();
  } catch (const nlohmann::json::exception&) {
    throw LookupError(variant_dir.string() +
                      ": the entry's contract lacks geometry.num_experts, geometry.top_k or "
                      "expert_ownership.local_experts");
  }
  for (const auto& c : entry->contract.at("components")) {
    auto comp = parse_component(c.get<std::string>());
    if (!comp)
      throw LookupError("contract names an unknown component '" + c.get<std::string>() + "'");
    impl->components.push_back(*comp);
  }
  std::stringstream in(csv);
  std::string line;
  std::getline(in, line);
  if (line != bundle_format::kComponentsHeader)
    throw LookupError(csv_path.string() + ": unexpected header '" + line + "'");
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    const auto f = split_csv_line(line);
    const auto bad = [&](const std::string& why) {
      return LookupError(csv_path.string() + ":" + std::to_string(lineno) + ": " + why);
    };
    if (f.size() != 6) throw bad("expected 6 fields");
    const auto comp = parse_component(f[0]);
    if (!comp) throw bad("unknown component '" + f[0] + "'");
    Row r{};
    try {
      r.point = {std::stoll(f[2]), std::stoll(f[3]), std::stoll(f[4])};
      r.time_us = std::stod(f[5]);
    } catch (const std::exception&) {
      throw bad("malformed number");
    }
    if (!(r.time_us > 0) || r.point.tokens < 1) throw bad("non-positive tokens or time");
    if (*comp != Component::experts) {
      impl->local[*comp].rows.push_back(r);
    } else if (r.point.activated == 0) {
      impl->all_remote.rows.push_back(r);
    } else {
      impl->expert_rows.push_back(r);
    }
  }
  for (auto* t : {&impl->all_remote})
    std::sort(t->rows.begin(), t->rows.end(),
              [](auto& a, auto& b) { return a.point.tokens < b.point.tokens; });
  for (auto& [c, t] : impl->local)
    std::sort(t.rows.begin(), t.rows.end(),
              [](auto& a, auto& b) { return a.point.tokens < b.point.tokens; });
  if (!impl->expert_rows.empty()) {
    std::vector<SimplexInterpolator::Point> pts;
    for (const auto& r : impl->expert_rows) {
      pts.push_back({static_cast<double>(r.point.tokens), static_cast<double>(r.point.activated),
                     static_cast<double>(r.point.assignments)});
      impl->exact_experts[{static_cast<int>(Component::experts), r.point.tokens, r.point.activated,
                           r.point.assignments}] = {r.time_us, true, {{r.point, r.time_us, 1.0}}};
    }
    impl->experts = std::make_unique<SimplexInterpolator>(std::move(pts));
  }
  return Deployment(std::move(impl));
}

LookupResult Deployment::query(Component c, std::int64_t tokens, std::int64_t activated,
                               std::int64_t assignments) {
  auto& d = *impl_;
  if (std::find(d.components.begin(), d.components.end(), c) == d.components.end())
    throw LookupError("component " + std::string(to_string(c)) +
                      " is not in this deployment's contract");
  if (c != Component::experts) activated = assignments = 0;
  const CacheKey key{static_cast<int>(c), tokens, activated, assignments};
  if (const auto* cached = d.answers.find(key)) {
    ++d.hits;
    return *cached;
  }
  LookupResult r;
  const std::string what = std::string(to_string(c));
  if (c != Component::experts) {
    r = d.local.at(c).at(tokens, what);
  } else if (const auto violated = feasibility_violation(
                 tokens, activated, assignments, d.experts_local, d.experts_global, d.top_k)) {
    throw LookupError("experts: (N=" + std::to_string(tokens) + ", A=" + std::to_string(activated) +
                      ", M=" + std::to_string(assignments) +
                      ") is impossible for this deployment: it violates " + *violated);
  } else if (activated == 0 && assignments == 0) {
    r = d.all_remote.at(tokens, "experts (all remote)");
  } else if (auto ex = d.exact_experts.find(key); ex != d.exact_experts.end()) {
    r = ex->second;
  } else {
    const auto w =
        d.experts ? d.experts->locate({static_cast<double>(tokens), static_cast<double>(activated),
                                       static_cast<double>(assignments)})
                  : std::nullopt;
    if (!w)
      throw LookupError("experts: (N=" + std::to_string(tokens) +
                        ", A=" + std::to_string(activated) + ", M=" + std::to_string(assignments) +
                        ") is outside the measured support; the lookup never extrapolates");
    // Vertices whose weight is round-off (the query lies on a face) are left out, and the
    // remaining weights renormalized, so --explain lists only contributing rows.
    double kept = 0;
    for (const auto& [v, weight] : *w) kept += weight > kNegligibleWeight ? weight : 0;
    for (auto [v, weight] : *w) {
      if (weight <= kNegligibleWeight) continue;
      weight /= kept;
      const auto& row = d.expert_rows[v];
      r.time_us += weight * row.time_us;
      r.vertices.push_back({row.point, row.time_us, weight});
    }
  }
  if (d.answers.capacity() > 0) d.answers.insert(key, r);
  return r;
}

}  // namespace moe
