#include "lookup/lookup.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "bundle/bundle_meta.h"
#include "bundle/format.h"
#include "core/contract.h"
#include "core/files.h"
#include "core/lru_cache.h"
#include "core/planner.h"
#include "lookup/simplex_interpolator.h"

namespace moe {

namespace {

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

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Refuses an entry measured on a device other than `expected` (DeploymentKey::expect_device).
void require_device(const BundleEntry& entry, const std::string& expected,
                    const std::string& where) {
  const auto hardware = entry.provenance.value("hardware", nlohmann::json::object());
  const auto devices = hardware.value("devices", nlohmann::json::array());
  if (devices.empty())
    throw LookupError(where + " carries no hardware identity (published before it was recorded), " +
                      "so it cannot be checked against the expected device '" + expected + "'");
  for (const auto& d : devices) {
    const auto name = d.value("device", std::string()), uuid = d.value("uuid", std::string());
    if (uuid == expected || lowercase(name).find(lowercase(expected)) != std::string::npos)
      continue;
    throw LookupError(where + " was measured on " + name + (uuid.empty() ? "" : " " + uuid) +
                      " (host " + d.value("host", std::string("?")) +
                      "), not on the expected device '" + expected + "'");
  }
}

}  // namespace

struct Deployment::Impl {
  nlohmann::json contract;
  nlohmann::json fidelity;  // coverage.fidelity.components (null when absent)
  std::vector<Component> components;
  std::optional<ComponentTables> tables;
  std::map<Component, std::vector<TableRow>> rows;  // as published
  LruCache<CacheKey, LookupResult> answers;         // bounded cache of answered queries
  std::size_t hits = 0;
  std::filesystem::path tp_dir;       // <variant>/tp<N>, where row_clocks.csv lies
  BundleEntry entry;                  // the entry's meta.yaml record (collective tables: unset)
  std::optional<RowRecords> records;  // row_clocks.csv, once read (row_records)
};

Deployment::Deployment(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Deployment::~Deployment() = default;
Deployment::Deployment(Deployment&&) noexcept = default;
Deployment& Deployment::operator=(Deployment&&) noexcept = default;

const nlohmann::json& Deployment::contract() const {
  return impl_->contract;
}
nlohmann::json HeldOutErrors::to_json() const {
  nlohmann::json out = {{"count", count},
                        {"median_abs_relative_error", median},
                        {"p95_abs_relative_error", p95},
                        {"max_abs_relative_error", max}};
  if (!routing.empty()) out["routing"] = routing;
  if (!waves.empty()) out["waves"] = waves;
  return out;
}

namespace {

// The statistics block `path` below a component's held_out block; LookupError when malformed.
HeldOutErrors held_out_block(const nlohmann::json& held, std::initializer_list<const char*> path,
                             Component c) {
  try {
    const nlohmann::json* block = &held;
    for (const char* key : path) block = &block->at(key);
    return HeldOutErrors{block->at("count").get<int>(),
                         block->at("median_abs_relative_error").get<double>(),
                         block->at("p95_abs_relative_error").get<double>(),
                         block->at("max_abs_relative_error").get<double>(),
                         {},
                         {}};
  } catch (const nlohmann::json::exception& e) {
    throw LookupError(std::string("the entry's coverage.fidelity of ") + std::string(to_string(c)) +
                      " is malformed: " + e.what());
  }
}

// The block at `path` below the component's entry of coverage.fidelity.components; nullptr where
// the entry records no such block (a bundle published before it).
const nlohmann::json* fidelity_block(const nlohmann::json& components, Component c,
                                     std::initializer_list<const char*> path) {
  const auto it = components.is_object() ? components.find(to_string(c)) : components.end();
  if (it == components.end()) return nullptr;
  const nlohmann::json* block = &*it;
  for (const char* key : path) {
    if (!block->is_object() || !block->contains(key)) return nullptr;
    block = &block->at(key);
  }
  return block;
}

}  // namespace

std::optional<HeldOutErrors> Deployment::held_out_errors_across_wave_steps(Component c) const {
  const auto* by_waves = fidelity_block(impl_->fidelity, c, {"held_out", "by_waves"});
  if (!by_waves) return std::nullopt;
  auto errors = held_out_block(*by_waves, {"across_waves"}, c);
  errors.waves = "across_waves";
  return errors;
}

nlohmann::json DeviceSpread::to_json() const {
  return {{"count", count},
          {"median_abs_relative_difference", median},
          {"max_abs_relative_difference", max},
          {"largest_offset", largest_offset},
          {"pairs", pairs}};
}

std::optional<DeviceSpread> Deployment::device_spread(Component c) const {
  const auto* by_device = fidelity_block(impl_->fidelity, c, {"repeatability", "by_device"});
  const auto* anchors = fidelity_block(impl_->fidelity, c, {"device_anchors"});
  if (!by_device && !anchors) return std::nullopt;
  try {
    DeviceSpread spread;
    // (row, row) anchor pairs are a device against itself: rows whose later rounds the new
    // device measured compared with its own anchors.
    const auto add_pairs = [&](const nlohmann::json& pairs, const char* first, const char* second) {
      for (const auto& pair : pairs) {
        if (pair.at("count").get<int>() < DeviceSpread::kMinPairPoints ||
            pair.at(first) == pair.at(second))
          continue;
        ++spread.pairs;
        const double offset = pair.at("median_signed_relative_difference").get<double>();
        if (std::abs(offset) > std::abs(spread.largest_offset)) spread.largest_offset = offset;
      }
    };
    if (by_device) {
      const auto& across = by_device->at("across_devices");
      spread.count = across.at("count").get<int>();
      if (spread.count > 0) {
        spread.median = across.at("median_abs_relative_difference").get<double>();
        spread.max = across.at("max_abs_relative_difference").get<double>();
      }
      add_pairs(by_device->at("device_pairs"), "grid_device", "held_out_device");
    }
    if (anchors) add_pairs(anchors->at("device_pairs"), "row_device", "anchor_device");
    return spread;
  } catch (const nlohmann::json::exception& e) {
    throw LookupError(std::string("the entry's coverage.fidelity of ") + std::string(to_string(c)) +
                      " is malformed: " + e.what());
  }
}

std::optional<HeldOutErrors> Deployment::held_out_errors(Component c, std::int64_t tokens,
                                                         std::int64_t activated,
                                                         std::int64_t assignments) const {
  const auto* held_block = fidelity_block(impl_->fidelity, c, {"held_out"});
  if (!held_block) return std::nullopt;
  const auto& held = *held_block;
  const auto read = [&](const nlohmann::json& block, std::string routing) {
    auto errors = routing.empty() ? held_out_block(block, {}, c)
                                  : held_out_block(block, {"by_routing", routing.c_str()}, c);
    errors.routing = std::move(routing);
    return errors;
  };
  if (c != Component::experts || !held.contains("by_routing")) return read(held, "");
  std::optional<GridPoint> balanced;
  try {
    balanced = balanced_point(geometry_from_json(impl_->contract.at("geometry")),
                              Target::from_json(impl_->contract.at("target")), tokens);
  } catch (const std::exception& e) {
    throw LookupError(std::string("the entry's contract names no geometry and target: ") +
                      e.what());
  }
  const std::string routing =
      balanced == GridPoint{tokens, activated, assignments} ? "balanced" : "off_balance";
  return read(held, routing);
}

const RowRecords& Deployment::row_records() const {
  if (!impl_->records) {
    try {
      impl_->records = read_row_records(impl_->tp_dir, impl_->entry);
    } catch (const BundleError& e) {
      throw LookupError(e.what());
    }
  }
  return *impl_->records;
}

std::optional<bool> Deployment::spans_launch_wave_step(Component c, const LookupResult& r) const {
  if (c != Component::experts || r.exact || r.vertices.empty()) return std::nullopt;
  const auto& records = row_records();
  const std::vector<std::int64_t>* first = nullptr;
  bool differ = false;
  for (const auto& x : r.vertices) {
    const auto row = records.find({c, x.point});
    if (row == records.end() || row->second.launch_waves.empty()) return std::nullopt;
    const auto& waves = row->second.launch_waves;
    differ = differ || (first && waves != *first);
    if (!first) first = &waves;
  }
  return differ;
}

std::vector<Component> Deployment::components() const {
  return impl_->components;
}
const std::vector<TableRow>& Deployment::rows(Component c) const {
  static const std::vector<TableRow> none;
  const auto it = impl_->rows.find(c);
  return it == impl_->rows.end() ? none : it->second;
}
std::size_t Deployment::cache_hits() const {
  return impl_->hits;
}

namespace {

BundleMeta load_meta(const std::filesystem::path& variant_dir) {
  BundleMeta meta;
  try {
    meta = load_bundle_meta(variant_dir);
  } catch (const BundleError& e) {
    throw LookupError(e.what());
  }
  if (meta.empty())
    throw LookupError(variant_dir.string() + ": no bundle here (meta.yaml missing or empty)");
  return meta;
}

// The one entry of `section` for `key`, on the expected device, and its table, checksum checked.
struct CheckedTable {
  const BundleEntry* entry = nullptr;
  std::filesystem::path path;
  std::string csv;
};

CheckedTable checked_table(const BundleMeta& meta, Section section,
                           const std::filesystem::path& variant_dir, const DeploymentKey& key) {
  CheckedTable out;
  const std::string what = section == Section::collectives ? "collective table" : "entry";
  const auto& tables = meta.per_tp(section);
  if (auto tp = tables.find(key.tp); tp != tables.end())
    for (const auto& e : tp->second) {
      const auto& t = e.target;
      if (t.dp != key.dp || t.rank != key.rank) continue;
      if (key.sp && t.sp != *key.sp) continue;
      if (out.entry)
        throw LookupError("several entries match TP" + std::to_string(key.tp) + " DP" +
                          std::to_string(key.dp) + " rank " + std::to_string(key.rank) +
                          "; pass --sp");
      out.entry = &e;
    }
  if (!out.entry)
    throw LookupError(variant_dir.string() + ": no " + what + " for TP" + std::to_string(key.tp) +
                      " DP" + std::to_string(key.dp) + " rank " + std::to_string(key.rank));
  out.path = variant_dir / tp_dir_name(key.tp) / out.entry->path;
  if (!key.expect_device.empty()) require_device(*out.entry, key.expect_device, out.path.string());
  try {
    out.csv = read_file(out.path);
  } catch (const std::exception&) {
    throw LookupError(out.path.string() + ": table missing");
  }
  if (sha256_hex(out.csv) != out.entry->coverage.value("table_sha256", std::string()))
    throw LookupError(out.path.string() +
                      ": checksum mismatch (SHA-256 differs from meta.yaml coverage.table_sha256)");
  return out;
}

}  // namespace

Deployment Deployment::load(const std::filesystem::path& variant_dir, const DeploymentKey& key,
                            std::size_t cache_capacity) {
  const auto meta = load_meta(variant_dir);
  const auto table = checked_table(meta, Section::moe_components, variant_dir, key);
  const auto* entry = table.entry;
  const auto& csv_path = table.path;
  const auto& csv = table.csv;
  auto impl = std::make_unique<Impl>();
  impl->contract = entry->contract;
  impl->tp_dir = variant_dir / tp_dir_name(key.tp);
  impl->entry = *entry;
  if (const auto f = entry->coverage.find("fidelity");
      f != entry->coverage.end() && f->is_object() && f->contains("components"))
    impl->fidelity = f->at("components");
  impl->answers.set_capacity(cache_capacity);
  ExpertPolytope polytope;
  try {
    const auto count = [&](const char* section, const char* name) {
      const auto& v = entry->contract.at(section).at(name);
      if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > 1 << 20)
        throw LookupError(std::string(section) + "." + name + " is " +
                          v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                          ", not a count from 1 to 1048576");
      return v.get<int>();
    };
    polytope = {count("geometry", "num_experts"), count("geometry", "top_k"),
                count("expert_ownership", "local_experts")};
    if (polytope.top_k > polytope.experts || polytope.local_experts > polytope.experts)
      throw LookupError(
          "geometry.top_k or expert_ownership.local_experts exceeds "
          "geometry.num_experts");
  } catch (const nlohmann::json::exception&) {
    throw LookupError(variant_dir.string() +
                      ": the entry's contract lacks geometry.num_experts, geometry.top_k or "
                      "expert_ownership.local_experts");
  } catch (const LookupError& e) {
    throw LookupError(variant_dir.string() + ": the entry's contract: " + e.what());
  }
  const auto listed = entry->contract.find("components");
  if (listed == entry->contract.end() || !listed->is_array())
    throw LookupError(variant_dir.string() +
                      ": the entry's contract has no list of components (contract.components)");
  for (const auto& c : *listed) {
    const auto comp = c.is_string() ? parse_component(c.get<std::string>()) : std::nullopt;
    if (!comp)
      throw LookupError(variant_dir.string() +
                        ": the entry's contract names an unknown component " +
                        c.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    impl->components.push_back(*comp);
  }
  std::stringstream in(csv);
  std::string line;
  std::getline(in, line);
  if (line != bundle_format::kComponentsHeader)
    throw LookupError(csv_path.string() + ": unexpected header '" + printable_text(line) + "'");
  std::map<Component, std::vector<TableRow>> rows;
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    const auto f = split_csv_line(line);
    const auto bad = [&](const std::string& why) {
      return LookupError(csv_path.string() + ":" + std::to_string(lineno) + ": " + why);
    };
    if (f.size() != 6) throw bad("expected 6 fields");
    const auto comp = parse_component(f[0]);
    if (!comp) throw bad("unknown component '" + printable_text(f[0]) + "'");
    if (std::find(impl->components.begin(), impl->components.end(), *comp) ==
        impl->components.end())
      throw bad("a row of " + f[0] + ", which the entry's contract.components does not list");
    TableRow r{};
    try {
      r.point = {csv_integer(f[2]), csv_integer(f[3]), csv_integer(f[4])};
      r.time_us = csv_real(f[5]);
    } catch (const std::invalid_argument& e) {
      throw bad(std::string("malformed number: ") + e.what());
    }
    if (!(r.time_us > 0) || r.point.tokens < 1) throw bad("non-positive tokens or time");
    if (const auto why = impossible_row(*comp, r.point, polytope)) throw bad(*why);
    rows[*comp].push_back(r);
  }
  // The experts rows with A > 0 interpolate over the triangulation the publisher stored, so that
  // every reader of the bundle gets the same answer (docs/bundle-format.md#interpolation).
  std::optional<Triangulation> mesh;
  if (const auto ex = rows.find(Component::experts);
      ex != rows.end() && std::any_of(ex->second.begin(), ex->second.end(),
                                      [](const TableRow& r) { return r.point.activated > 0; })) {
    const auto path = csv_path.parent_path() / bundle_format::kTriangulationFile;
    const auto& cov = entry->coverage.value("triangulation", nlohmann::json());
    if (!cov.is_object())
      throw LookupError(csv_path.string() +
                        ": the entry records no triangulation (coverage.triangulation; published "
                        "by an older harness): publish the acquisition again");
    std::string text;
    try {
      text = read_file(path);
    } catch (const std::exception&) {
      throw LookupError(path.string() + ": triangulation missing");
    }
    if (sha256_hex(text) != cov.value("sha256", std::string()))
      throw LookupError(path.string() +
                        ": checksum mismatch (SHA-256 differs from coverage.triangulation)");
    try {
      mesh = triangulation_from_json(text);
    } catch (const LookupError& e) {
      throw LookupError(path.string() + ": " + e.what());
    }
  }
  try {
    impl->tables.emplace(rows, polytope, mesh);
  } catch (const LookupError& e) {
    throw LookupError(csv_path.string() + ": " + e.what());
  }
  impl->rows = std::move(rows);
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
  LookupResult r = d.tables->query(c, tokens, activated, assignments);
  if (d.answers.capacity() > 0) d.answers.insert(key, r);
  return r;
}

}  // namespace moe

namespace moe {

struct CollectiveTable::Impl {
  nlohmann::json contract;
  std::map<std::string, std::vector<CollectivePoint>> rows;  // per collective, sorted by tokens
};

CollectiveTable::CollectiveTable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CollectiveTable::~CollectiveTable() = default;
CollectiveTable::CollectiveTable(CollectiveTable&&) noexcept = default;
CollectiveTable& CollectiveTable::operator=(CollectiveTable&&) noexcept = default;

const nlohmann::json& CollectiveTable::contract() const {
  return impl_->contract;
}

std::vector<std::string> CollectiveTable::collectives() const {
  std::vector<std::string> out;
  for (const auto& [name, rows] : impl_->rows) out.push_back(name);
  return out;
}

CollectiveTable CollectiveTable::load(const std::filesystem::path& variant_dir,
                                      const DeploymentKey& key) {
  const auto meta = load_meta(variant_dir);
  const auto table = checked_table(meta, Section::collectives, variant_dir, key);
  auto impl = std::make_unique<Impl>();
  impl->contract = table.entry->contract;
  std::stringstream in(table.csv);
  std::string line;
  std::getline(in, line);
  if (line != bundle_format::kCollectivesHeader)
    throw LookupError(table.path.string() + ": unexpected header '" + printable_text(line) +
                      "' (a bundle published before steady_time_us; publish it again)");
  for (int lineno = 2; std::getline(in, line); ++lineno) {
    const auto f = split_csv_line(line);
    const auto bad = [&](const std::string& why) {
      return LookupError(table.path.string() + ":" + std::to_string(lineno) + ": " + why);
    };
    if (f.size() != 10) throw bad("expected 10 fields");
    CollectivePoint r{};
    try {
      r.tokens = csv_integer(f[3]);
      r.bytes = csv_integer(f[4]);
      r.time_us = csv_real(f[5]);
      r.steady_time_us = csv_real(f[9]);
    } catch (const std::invalid_argument& e) {
      throw bad(std::string("malformed number: ") + e.what());
    }
    if (r.tokens < 1 || r.bytes < 1 || !(r.time_us > 0) || !(r.steady_time_us > 0))
      throw bad("non-positive tokens, bytes or time");
    impl->rows[f[0]].push_back(r);
  }
  for (auto& [name, rows] : impl->rows) {
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.tokens < b.tokens; });
    for (std::size_t i = 1; i < rows.size(); ++i)
      if (rows[i].tokens == rows[i - 1].tokens)
        throw LookupError(table.path.string() + ": " + name + " has two rows at " +
                          std::to_string(rows[i].tokens) + " tokens");
  }
  return CollectiveTable(std::move(impl));
}

CollectiveResult CollectiveTable::query(const std::string& collective, std::int64_t tokens) const {
  const auto it = impl_->rows.find(collective);
  if (it == impl_->rows.end()) {
    std::string known;
    for (const auto& name : collectives()) known += (known.empty() ? "" : ", ") + name;
    throw LookupError("no collective '" + collective + "' in this table (" + known + ")");
  }
  const auto& rows = it->second;
  if (tokens < rows.front().tokens || tokens > rows.back().tokens)
    throw LookupError(collective + " at " + std::to_string(tokens) +
                      " tokens is outside the measured range [" +
                      std::to_string(rows.front().tokens) + ", " +
                      std::to_string(rows.back().tokens) + "] tokens; never extrapolated");
  const auto hi = std::lower_bound(rows.begin(), rows.end(), tokens,
                                   [](const auto& r, std::int64_t t) { return r.tokens < t; });
  if (hi->tokens == tokens) return {hi->time_us, hi->steady_time_us, hi->bytes, true, {*hi}};
  const auto lo = std::prev(hi);
  // Bytes grow linearly with tokens for one collective; time is interpolated linearly in bytes.
  const double w =
      static_cast<double>(tokens - lo->tokens) / static_cast<double>(hi->tokens - lo->tokens);
  const auto lerp = [w](double a, double b) { return a + w * (b - a); };
  return {lerp(lo->time_us, hi->time_us),
          lerp(lo->steady_time_us, hi->steady_time_us),
          std::llround(lerp(static_cast<double>(lo->bytes), static_cast<double>(hi->bytes))),
          false,
          {*lo, *hi}};
}

}  // namespace moe
