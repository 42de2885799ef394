#include "core/contract.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/files.h"
#include "core/job_spec.h"
#include "core/planner.h"
#include "core/statistics.h"

namespace moe {

using nlohmann::json;

namespace {

// Reads `j[key]` as T, or throws ContractError naming the key path.
template <class T>
T field(const json& j, const char* key, const std::string& where) {
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    throw ContractError("contract: '" + where + key + "' is missing or malformed");
  }
}

const json& object(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_object())
    throw ContractError("contract: '" + where + key + "' is missing or not a mapping");
  return j.at(key);
}

Dtype dtype_field(const json& j, const char* key, const std::string& where) {
  const auto d = parse_dtype(field<std::string>(j, key, where));
  if (!d) throw ContractError("contract: '" + where + key + "' is not a dtype");
  return *d;
}

}  // namespace

std::vector<Component> TargetContract::components() const {
  std::vector<Component> out;
  for (const auto& [c, g] : grids) out.push_back(c);
  return out;  // std::map orders by the enum: measurement order
}

json geometry_json(const ModelGeometry& g) {
  return {
      {"name", g.name},
      {"hidden_size", g.hidden},
      {"moe_intermediate_size", g.intermediate},
      {"num_experts", g.experts},
      {"top_k", g.top_k},
      {"renormalize", g.renormalize},
      {"activation", "silu_gated"},
      {"weight_dtype", to_string(g.weight_dtype)},
      {"router_dtype", to_string(g.router_dtype)},
      {"shared_experts", {{"count", g.shared.count}, {"intermediate_size", g.shared.intermediate}}},
      {"num_layers", g.layers}};
}

ModelGeometry geometry_from_json(const json& j) {
  const std::string w = "geometry.";
  ModelGeometry g;
  g.name = field<std::string>(j, "name", w);
  g.hidden = field<int>(j, "hidden_size", w);
  g.intermediate = field<int>(j, "moe_intermediate_size", w);
  g.experts = field<int>(j, "num_experts", w);
  g.top_k = field<int>(j, "top_k", w);
  g.renormalize = field<bool>(j, "renormalize", w);
  g.weight_dtype = dtype_field(j, "weight_dtype", w);
  g.router_dtype = dtype_field(j, "router_dtype", w);
  const auto& shared = object(j, "shared_experts", w);
  g.shared.count = field<int>(shared, "count", w + "shared_experts.");
  g.shared.intermediate = field<int>(shared, "intermediate_size", w + "shared_experts.");
  g.layers = field<int>(j, "num_layers", w);
  return g;
}

Contract Contract::of(const Plan& plan, const std::string& backend, const std::string& timing,
                      std::int64_t cache_bytes, int backend_version) {
  const auto& job = plan.job;
  Contract c;
  c.geometry = job.geometry;
  c.backend = backend;
  c.timing = timing;
  c.backend_version = backend_version;
  c.planner_version = kPlannerVersion;
  c.grid = {job.grid_factor,           job.max_num_batched_tokens, job.max_num_seqs,
            to_string(job.graph_mode), job.capture_sizes,          job.capture_sizes_derived};
  c.conditioning = {job.rounds,
                    job.iterations,
                    settle_ms_for(job, backend),
                    capped_settle_ms_for(job, backend),
                    kBankTolerance,
                    cache_bytes,
                    job.seed,
                    kTimingProtocol};
  c.fidelity = job.fidelity;
  const auto digest = [](const std::vector<GridPoint>& points) {
    std::string pts;
    for (const auto& p : points)
      pts += std::to_string(p.tokens) + "," + std::to_string(p.activated) + "," +
             std::to_string(p.assignments) + ";";
    return GridDigest{static_cast<std::int64_t>(points.size()), sha256_hex(pts)};
  };
  for (const auto& t : plan.targets) {
    TargetContract tc{t.target, t.ownership, t.weight_banks, {}, {}};
    for (const auto& g : t.components) {
      tc.grids[g.component] = digest(g.points);
      tc.held_out[g.component] = digest(g.held_out);
    }
    c.targets.push_back(std::move(tc));
  }
  return c;
}

namespace {

json grids_json(const std::map<Component, GridDigest>& digests) {
  json grids = json::object();
  for (const auto& [c, g] : digests)
    grids[std::string(to_string(c))] = {{"points", g.points}, {"sha256", g.sha256}};
  return grids;
}

json fidelity_json(const FidelitySpec& f) {
  return {{"tolerance", f.tolerance},
          {"max_added_points", f.max_added_points},
          {"random_points", f.random_points},
          {"remeasure_limit", f.remeasure_limit},
          {"refine", f.refine}};
}

std::map<Component, GridDigest> digests_from_json(const json& j, const std::string& where) {
  std::map<Component, GridDigest> out;
  for (const auto& [name, digest] : j.items()) {
    const auto component = parse_component(name);
    if (!component) throw ContractError("contract: " + where + " names '" + name + "'");
    out[*component] = {field<std::int64_t>(digest, "points", where + "." + name + "."),
                       field<std::string>(digest, "sha256", where + "." + name + ".")};
  }
  return out;
}

json conditioning_json(const Conditioning& c) {
  json j = {{"rounds", c.rounds},
            {"iterations", c.iterations},
            {"settle_ms", c.settle_ms},
            {"capped_settle_ms", c.capped_settle_ms},
            {"bank_tolerance", c.bank_tolerance},
            {"cache_bytes", c.cache_bytes},
            {"seed", c.seed}};
  // Written only above 1, as backend_version is: older files read as before.
  if (c.timing_protocol != 1) j["timing_protocol"] = c.timing_protocol;
  return j;
}

// Written only above 1, so that the contracts of code never changed, and the files they identify,
// read as before versions were recorded.
void add_backend_version(json& contract_json, int backend_version) {
  if (backend_version != 1) contract_json["backend_version"] = backend_version;
}

json ownership_json(const ExpertOwnership& o) {
  return {{"first_expert", o.first_expert},
          {"local_experts", o.local_experts},
          {"placement", "linear"}};
}

}  // namespace

json Contract::to_json() const {
  json targets_json = json::array();
  for (const auto& t : targets)
    targets_json.push_back({{"target", t.target.to_json()},
                            {"expert_ownership", ownership_json(t.ownership)},
                            {"weight_banks", t.weight_banks},
                            {"grids", grids_json(t.grids)},
                            {"held_out", grids_json(t.held_out)}});
  json j = {{"geometry", geometry_json(geometry)},
            {"backend", backend},
            {"timing", timing},
            {"mode", mode},
            {"planner_version", planner_version},
            {"grid",
             {{"factor", grid.factor},
              {"max_num_batched_tokens", grid.max_num_batched_tokens},
              {"max_num_seqs", grid.max_num_seqs},
              {"graph_mode", grid.graph_mode},
              {"capture_sizes", grid.capture_sizes},
              {"capture_sizes_derived", grid.capture_sizes_derived}}},
            {"conditioning", conditioning_json(conditioning)},
            {"fidelity", fidelity_json(fidelity)},
            {"targets", targets_json}};
  add_backend_version(j, backend_version);
  return j;
}

Contract Contract::from_json(const json& j) {
  if (!j.is_object()) throw ContractError("contract: not a JSON object");
  Contract c;
  c.geometry = geometry_from_json(object(j, "geometry", ""));
  c.backend = field<std::string>(j, "backend", "");
  c.timing = field<std::string>(j, "timing", "");
  c.backend_version = backend_version_of(j);
  c.mode = field<std::string>(j, "mode", "");
  c.planner_version = field<int>(j, "planner_version", "");
  const auto& g = object(j, "grid", "");
  c.grid = {field<double>(g, "factor", "grid."),
            field<std::int64_t>(g, "max_num_batched_tokens", "grid."),
            field<std::int64_t>(g, "max_num_seqs", "grid."),
            field<std::string>(g, "graph_mode", "grid."),
            field<std::vector<std::int64_t>>(g, "capture_sizes", "grid."),
            field<bool>(g, "capture_sizes_derived", "grid.")};
  const auto& k = object(j, "conditioning", "");
  c.conditioning = {field<int>(k, "rounds", "conditioning."),
                    field<int>(k, "iterations", "conditioning."),
                    k.value("settle_ms", 0),         // absent before the settle phase existed
                    k.value("capped_settle_ms", 0),  // absent before it was extended when capped
                    field<double>(k, "bank_tolerance", "conditioning."),
                    field<std::int64_t>(k, "cache_bytes", "conditioning."),
                    field<std::uint64_t>(k, "seed", "conditioning."),
                    k.value("timing_protocol", 1)};  // absent before it was recorded
  const auto& f = object(j, "fidelity", "");
  c.fidelity = {
      field<double>(f, "tolerance", "fidelity."), field<int>(f, "max_added_points", "fidelity."),
      field<int>(f, "random_points", "fidelity."), field<int>(f, "remeasure_limit", "fidelity."),
      field<bool>(f, "refine", "fidelity.")};
  if (!j.contains("targets") || !j.at("targets").is_array())
    throw ContractError("contract: 'targets' is missing or not a list");
  for (const auto& t : j.at("targets")) {
    TargetContract tc;
    try {
      tc.target = Target::from_json(t.at("target"));
    } catch (const std::exception& e) {
      throw ContractError(std::string("contract: targets[].target: ") + e.what());
    }
    const auto where = "targets[" + tc.target.label() + "].";
    const auto& o = object(t, "expert_ownership", where);
    tc.ownership = {field<int>(o, "local_experts", where + "expert_ownership."),
                    field<int>(o, "first_expert", where + "expert_ownership.")};
    tc.weight_banks = field<int>(t, "weight_banks", where);
    tc.grids = digests_from_json(object(t, "grids", where), where + "grids");
    tc.held_out = digests_from_json(object(t, "held_out", where), where + "held_out");
    c.targets.push_back(std::move(tc));
  }
  return c;
}

Contract Contract::parse(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw ContractError(std::string("contract: not valid JSON: ") + e.what());
  }
  return from_json(j);
}

json Contract::component_table(const TargetContract& t) const {
  json components = json::array();
  for (const auto c : t.components()) components.push_back(std::string(to_string(c)));
  json j = {{"geometry", geometry_json(geometry)},
            {"target", t.target.to_json()},
            {"expert_ownership", ownership_json(t.ownership)},
            {"dtypes",
             {{"weights", to_string(geometry.weight_dtype)},
              {"router", to_string(geometry.router_dtype)},
              {"activations", "bf16"}}},
            {"backend", backend},
            {"timing", timing},
            {"modes", json::array({mode})},
            {"components", components},
            {"planner_version", planner_version},
            {"conditioning", conditioning_json(conditioning)},
            {"expert_sampling",
             {{"axes", json::array({"tokens", "activated_experts", "local_assignments"})},
              {"grid_factor", grid.factor},
              {"graph_mode", grid.graph_mode},
              {"capture_tokens", grid.capture_sizes},
              {"capture_tokens_derived", grid.capture_sizes_derived},
              {"max_num_batched_tokens", grid.max_num_batched_tokens}}},
            {"fidelity", fidelity_json(fidelity)},
            {"grids", grids_json(t.grids)},
            {"held_out", grids_json(t.held_out)}};
  j["conditioning"]["weight_banks"] = t.weight_banks;
  j["conditioning"]["bank_arms"] = json::array({"B", "2B"});
  add_backend_version(j, backend_version);
  return j;
}

json Contract::collective_table(const TargetContract& t,
                                const std::string& collective_backend) const {
  const auto tokens = t.grids.find(Component::gate_routing);
  return {
      {"geometry", geometry_json(geometry)},
      {"target", t.target.to_json()},
      {"backend", collective_backend},
      {"timing",
       {{"time_us", collective_backend == "nccl"
                        ? "cupti_activity: the op's kernel time, ranks aligned by a barrier before "
                          "each op; median of round medians"
                        : "host_clock: one blocking op after a barrier; median of round medians"},
        {"steady_time_us",
         "nccl-tests default: ops back to back after a barrier, host time per op averaged over "
         "ranks; median over rounds"}}},
      {"conditioning", {{"rounds", conditioning.rounds}, {"iterations", conditioning.iterations}}},
      {"bandwidth",
       {{"convention", "nccl-tests"},
        {"bus_factor",
         {{"all_reduce", "2(n-1)/n"},
          {"all_gather", "(n-1)/n"},
          {"reduce_scatter", "(n-1)/n"},
          {"all_to_all", "(n-1)/n"}}}}},
      {"model", "worst-rank ring envelope: steps * (alpha + max_chunk / beta)"},
      {"tokens", tokens == t.grids.end()
                     ? json(nullptr)
                     : json{{"points", tokens->second.points}, {"sha256", tokens->second.sha256}}}};
}

int timing_protocol_of(const json& contract) {
  const auto k = contract.find("conditioning");
  return k != contract.end() && k->is_object() ? k->value("timing_protocol", 1) : 1;
}

int backend_version_of(const json& contract) {
  return contract.value("backend_version", 1);
}

namespace {

void collect_differences(const json* a, const json* b, const std::string& path,
                         std::vector<std::string>& out) {
  if (a && b && *a == *b) return;
  if (a && b && a->is_object() && b->is_object()) {
    std::set<std::string> keys;
    for (auto& [k, v] : a->items()) keys.insert(k);
    for (auto& [k, v] : b->items()) keys.insert(k);
    for (const auto& k : keys) {
      const auto ia = a->find(k), ib = b->find(k);
      collect_differences(ia != a->end() ? &*ia : nullptr, ib != b->end() ? &*ib : nullptr,
                          path.empty() ? k : path + "." + k, out);
    }
    return;
  }
  const auto shown = [](const json* v) { return v ? v->dump() : std::string("absent"); };
  const bool scalars = (!a || a->is_primitive()) && (!b || b->is_primitive());
  const auto name = path.empty() ? std::string("contract") : path;
  out.push_back(scalars ? name + ": " + shown(a) + " -> " + shown(b) : name);
}

}  // namespace

std::string json_difference(const json& a, const json& b) {
  constexpr std::size_t kShown = 8;
  std::vector<std::string> differences;
  collect_differences(&a, &b, "", differences);
  if (differences.empty()) return "contract";
  std::string out;
  for (std::size_t i = 0; i < std::min(differences.size(), kShown); ++i)
    out += (i ? ", " : "") + differences[i];
  if (differences.size() > kShown)
    out += " and " + std::to_string(differences.size() - kShown) + " more";
  return out;
}

std::optional<std::pair<int, int>> refinement_cap_raise(const json& stored, const json& wanted) {
  const auto cap = [](const json& c) -> std::optional<int> {
    const auto f = c.find("fidelity");
    if (f == c.end() || !f->is_object()) return std::nullopt;
    const auto m = f->find("max_added_points");
    if (m == f->end() || !m->is_number_integer()) return std::nullopt;
    return m->get<int>();
  };
  const auto from = cap(stored), to = cap(wanted);
  if (!from || !to || *to <= *from) return std::nullopt;
  auto raised = stored;
  raised["fidelity"]["max_added_points"] = *to;
  if (raised != wanted) return std::nullopt;
  return std::pair{*from, *to};
}

}  // namespace moe
