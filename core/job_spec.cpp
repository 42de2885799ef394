#include "core/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/files.h"
#include "core/hf_config.h"
#include "core/yaml_error.h"

namespace moe {

namespace {

const std::string kDefaultJobYaml =
    R"(# Embedded default job: runs anywhere (tiny geometry; CPU backend when no GPU is present).
model:
  preset: tiny
deployment:
  tp: [1]
  dp: [1, 2]
  sp: false
tokens:
  max_num_batched_tokens: 64
  max_num_seqs: 16
graph:
  mode: FULL_AND_PIECEWISE
measurement:
  grid_factor: 2
  rounds: 3
  iterations: 5
  backend: auto
fidelity:
  # Host-clock times of tiny CPU forwards vary by tens of percent between rounds: these tables
  # exercise the pipeline and are published as "accepted-with-failures" with their held-out
  # errors. GPU jobs (jobs/*.yaml) keep the default 2% gate.
  max_added_points: 32
  accept_failures: true
output:
  out_root: out
  variant: default-tiny
budget:
  gpu_hours: 0.5
)";

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string did_you_mean(const std::string& key, const std::vector<std::string>& allowed) {
  std::string best;
  std::size_t best_d = 4;  // suggest only close matches
  for (const auto& a : allowed) {
    const auto d = edit_distance(key, a);
    if (d < best_d) best_d = d, best = a;
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

std::string where(const YAML::Node& n) {
  return n.Mark().is_null() ? "" : " (line " + std::to_string(n.Mark().line + 1) + ")";
}

// Rejects keys outside `allowed` in mapping `node` named `path`.
void check_keys(const YAML::Node& node, const std::string& path,
                const std::vector<std::string>& allowed) {
  if (!node.IsMap()) throw JobError("job: '" + path + "' must be a mapping" + where(node));
  for (const auto& kv : node) {
    const auto key = kv.first.as<std::string>();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      throw JobError("job: unknown key '" + (path.empty() ? key : path + "." + key) + "'" +
                     where(kv.first) + did_you_mean(key, allowed));
  }
}

template <class T>
T scalar(const YAML::Node& n, const std::string& path) {
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    throw JobError("job: '" + path + "' has an invalid value '" + (n.IsScalar() ? n.Scalar() : "") +
                   "'" + where(n));
  }
}

template <class T>
std::vector<T> list(const YAML::Node& n, const std::string& path) {
  if (n.IsScalar()) return {scalar<T>(n, path)};
  if (!n.IsSequence()) throw JobError("job: '" + path + "' must be a list" + where(n));
  std::vector<T> out;
  for (const auto& e : n) out.push_back(scalar<T>(e, path));
  return out;
}

YAML::Node required(const YAML::Node& parent, const std::string& key, const std::string& path) {
  auto n = parent[key];
  if (!n) throw JobError("job: missing required key '" + path + "'");
  return n;
}

Dtype dtype_of(const YAML::Node& n, const std::string& path) {
  auto d = parse_dtype(scalar<std::string>(n, path));
  if (!d) throw JobError("job: '" + path + "' must be bf16 or fp32" + where(n));
  return *d;
}

GraphMode graph_mode_of(const YAML::Node& n) {
  static const std::map<std::string, GraphMode> modes = {
      {"NONE", GraphMode::none},
      {"PIECEWISE", GraphMode::piecewise},
      {"FULL", GraphMode::full},
      {"FULL_AND_PIECEWISE", GraphMode::full_and_piecewise},
      {"FULL_DECODE_ONLY", GraphMode::full_decode_only}};
  const auto s = scalar<std::string>(n, "graph.mode");
  auto it = modes.find(s);
  if (it == modes.end())
    throw JobError("job: unknown graph.mode '" + s + "'" + where(n) +
                   " (NONE, PIECEWISE, FULL, FULL_AND_PIECEWISE, FULL_DECODE_ONLY)");
  return it->second;
}

// `model.config` names a Hugging Face config.json, relative to the job file's directory.
ModelGeometry parse_model(const YAML::Node& m, const std::string& source) {
  check_keys(
      m, "model",
      {"preset", "config", "name", "hidden_size", "moe_intermediate_size", "num_experts", "top_k",
       "renormalize", "weight_dtype", "router_dtype", "shared_experts", "num_layers"});
  ModelGeometry g;
  if (m["preset"] && m["config"])
    throw JobError("job: model.preset and model.config both name a model" + where(m["config"]));
  if (auto c = m["config"]) {
    auto path = std::filesystem::path(scalar<std::string>(c, "model.config"));
    if (path.is_relative()) path = std::filesystem::path(source).parent_path() / path;
    std::string text;
    try {
      text = read_file(path);
    } catch (const std::exception&) {
      throw JobError("job: model.config: cannot read '" + path.string() + "'" + where(c));
    }
    try {
      g = geometry_from_hf_config(text, path.string());
    } catch (const std::invalid_argument& e) {
      throw JobError(std::string("job: ") + e.what());
    }
  } else if (auto p = m["preset"]) {
    const auto name = scalar<std::string>(p, "model.preset");
    auto found = find_preset(name);
    if (!found) {
      std::string names;
      for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
      throw JobError("job: unknown preset '" + name + "'" + where(p) +
                     did_you_mean(name, preset_names()) + "; presets: " + names);
    }
    g = *found;
  } else {
    for (const char* key : {"hidden_size", "moe_intermediate_size", "num_experts", "top_k"})
      required(m, key, std::string("model.") + key);
    g.name = "custom";
  }
  if (auto n = m["name"]) g.name = scalar<std::string>(n, "model.name");
  if (auto n = m["hidden_size"]) g.hidden = scalar<int>(n, "model.hidden_size");
  if (auto n = m["moe_intermediate_size"])
    g.intermediate = scalar<int>(n, "model.moe_intermediate_size");
  if (auto n = m["num_experts"]) g.experts = scalar<int>(n, "model.num_experts");
  if (auto n = m["top_k"]) g.top_k = scalar<int>(n, "model.top_k");
  if (auto n = m["renormalize"]) g.renormalize = scalar<bool>(n, "model.renormalize");
  if (auto n = m["weight_dtype"]) g.weight_dtype = dtype_of(n, "model.weight_dtype");
  if (auto n = m["router_dtype"]) g.router_dtype = dtype_of(n, "model.router_dtype");
  if (auto n = m["num_layers"]) g.layers = scalar<int>(n, "model.num_layers");
  if (auto s = m["shared_experts"]) {
    check_keys(s, "model.shared_experts", {"count", "intermediate_size"});
    g.shared.count = scalar<int>(required(s, "count", "model.shared_experts.count"),
                                 "model.shared_experts.count");
    g.shared.intermediate =
        scalar<int>(required(s, "intermediate_size", "model.shared_experts.intermediate_size"),
                    "model.shared_experts.intermediate_size");
  }
  return g;
}

// vLLM-style default capture sizes: 1, 2, 4, then multiples of 8 up to 256, then of 16,
// capped at min(2 * max_num_seqs, 512, max_num_batched_tokens).
std::vector<std::int64_t> derive_capture_sizes(std::int64_t max_seqs, std::int64_t budget) {
  const std::int64_t cap = std::min<std::int64_t>({2 * max_seqs, 512, budget});
  std::vector<std::int64_t> out;
  for (std::int64_t g : {1, 2, 4})
    if (g <= cap) out.push_back(g);
  for (std::int64_t g = 8; g <= cap; g += (g < 256 ? 8 : 16)) out.push_back(g);
  return out;
}

void require_positive(std::int64_t v, const std::string& what) {
  if (v <= 0) throw JobError("job: " + what + " must be positive (got " + std::to_string(v) + ")");
}

// Positive and at most `limit` (docs/cli.md lists the limits): checked before anything is
// planned or allocated.
void require_in_range(std::int64_t v, const std::string& what, std::int64_t limit) {
  require_positive(v, what);
  if (v > limit)
    throw JobError("job: " + what + " " + std::to_string(v) + " exceeds the limit " +
                   std::to_string(limit));
}

// Component names (from a YAML list or a comma-separated option) -> components, in order,
// without repeats; names the option and the unknown name in the error.
std::vector<Component> components_named(const std::vector<std::string>& items,
                                        const std::string& option) {
  std::vector<std::string> names;
  for (auto c : kAllComponents) names.emplace_back(to_string(c));
  std::vector<Component> out;
  for (const auto& item : items) {
    const auto c = parse_component(item);
    if (!c)
      throw JobError(option + ": unknown component '" + item + "'" + did_you_mean(item, names) +
                     " (" + component_names() + ")");
    if (std::find(out.begin(), out.end(), *c) == out.end()) out.push_back(*c);
  }
  if (out.empty()) throw JobError(option + ": name at least one component");
  return out;
}

}  // namespace

std::string to_string(GraphMode m) {
  switch (m) {
    case GraphMode::none:
      return "NONE";
    case GraphMode::piecewise:
      return "PIECEWISE";
    case GraphMode::full:
      return "FULL";
    case GraphMode::full_and_piecewise:
      return "FULL_AND_PIECEWISE";
    case GraphMode::full_decode_only:
      return "FULL_DECODE_ONLY";
  }
  return "NONE";
}

bool capture_sizes_replace_tokens(GraphMode m) {
  return m == GraphMode::full || m == GraphMode::piecewise || m == GraphMode::full_and_piecewise;
}

const std::string& default_job_yaml() {
  return kDefaultJobYaml;
}

JobSpec parse_job(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw JobError("job " + source + ": " + describe_yaml_error(e));
  }
  if (!root.IsMap()) throw JobError("job " + source + ": top level must be a mapping");
  JobSpec job;
  job.source = source;
  try {
    check_keys(
        root, "",
        {"model", "deployment", "tokens", "graph", "measurement", "fidelity", "output", "budget"});
    job.geometry = parse_model(required(root, "model", "model"), source);

    auto d = required(root, "deployment", "deployment");
    check_keys(d, "deployment", {"tp", "dp", "ep", "ranks", "sp"});
    job.tp = list<int>(required(d, "tp", "deployment.tp"), "deployment.tp");
    job.dp = list<int>(required(d, "dp", "deployment.dp"), "deployment.dp");
    if (auto n = d["ep"]) job.ep = list<int>(n, "deployment.ep");
    if (auto n = d["ranks"]) job.ranks = list<int>(n, "deployment.ranks");
    if (auto n = d["sp"]) job.sp = scalar<bool>(n, "deployment.sp");

    auto t = required(root, "tokens", "tokens");
    check_keys(t, "tokens", {"max_num_batched_tokens", "max_num_seqs"});
    job.max_num_batched_tokens =
        scalar<std::int64_t>(required(t, "max_num_batched_tokens", "tokens.max_num_batched_tokens"),
                             "tokens.max_num_batched_tokens");
    job.max_num_seqs = job.max_num_batched_tokens;
    if (auto n = t["max_num_seqs"])
      job.max_num_seqs = scalar<std::int64_t>(n, "tokens.max_num_seqs");

    if (auto g = root["graph"]) {
      check_keys(g, "graph", {"mode", "capture_sizes"});
      if (auto n = g["mode"]) job.graph_mode = graph_mode_of(n);
      if (auto n = g["capture_sizes"])
        job.capture_sizes = list<std::int64_t>(n, "graph.capture_sizes");
    }
    if (auto m = root["measurement"]) {
      check_keys(m, "measurement",
                 {"grid_factor", "rounds", "iterations", "settle_ms", "capped_settle_ms", "backend",
                  "seed", "components"});
      if (auto n = m["grid_factor"]) job.grid_factor = scalar<double>(n, "measurement.grid_factor");
      if (auto n = m["rounds"]) job.rounds = scalar<int>(n, "measurement.rounds");
      if (auto n = m["iterations"]) job.iterations = scalar<int>(n, "measurement.iterations");
      if (auto n = m["settle_ms"]) job.settle_ms = scalar<int>(n, "measurement.settle_ms");
      if (auto n = m["capped_settle_ms"])
        job.capped_settle_ms = scalar<int>(n, "measurement.capped_settle_ms");
      if (auto n = m["backend"]) job.backend = scalar<std::string>(n, "measurement.backend");
      if (auto n = m["seed"]) job.seed = scalar<std::uint64_t>(n, "measurement.seed");
      if (auto n = m["components"])
        job.components = components_named(list<std::string>(n, "measurement.components"),
                                          "measurement.components");
    }
    if (auto f = root["fidelity"]) {
      check_keys(f, "fidelity",
                 {"tolerance", "max_added_points", "random_points", "remeasure_limit", "refine",
                  "accept_failures"});
      auto& fid = job.fidelity;
      if (auto n = f["tolerance"]) fid.tolerance = scalar<double>(n, "fidelity.tolerance");
      if (auto n = f["max_added_points"])
        fid.max_added_points = scalar<int>(n, "fidelity.max_added_points");
      if (auto n = f["random_points"]) fid.random_points = scalar<int>(n, "fidelity.random_points");
      if (auto n = f["remeasure_limit"])
        fid.remeasure_limit = scalar<int>(n, "fidelity.remeasure_limit");
      if (auto n = f["refine"]) fid.refine = scalar<bool>(n, "fidelity.refine");
      if (auto n = f["accept_failures"])
        fid.accept_failures = scalar<bool>(n, "fidelity.accept_failures");
    }
    if (auto o = root["output"]) {
      check_keys(o, "output", {"out_root", "variant"});
      if (auto n = o["out_root"]) job.out_root = scalar<std::string>(n, "output.out_root");
      if (auto n = o["variant"]) job.variant = scalar<std::string>(n, "output.variant");
    }
    if (auto b = root["budget"]) {
      check_keys(b, "budget", {"gpu_hours"});
      if (auto n = b["gpu_hours"]) job.gpu_hours = scalar<double>(n, "budget.gpu_hours");
    }
  } catch (const JobError& e) {
    throw JobError(std::string(e.what()) + " [" + source + "]");
  } catch (const YAML::Exception& e) {
    throw JobError("job " + source + ": " + describe_yaml_error(e));
  }
  if (job.variant.empty()) job.variant = job.geometry.name;
  if (job.capture_sizes.empty() && job.graph_mode != GraphMode::none &&
      job.max_num_batched_tokens > 0) {
    job.capture_sizes = derive_capture_sizes(job.max_num_seqs, job.max_num_batched_tokens);
    job.capture_sizes_derived = true;
  }
  try {
    validate(job);
  } catch (const JobError& e) {  // a value checked against others: named in the job file
    throw JobError(std::string(e.what()) + " [" + source + "]");
  }
  return job;
}

JobSpec load_job_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw JobError("job: cannot open job file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_job(ss.str(), path);
}

std::string default_acquisition_dir(const JobSpec& job) {
  return (std::filesystem::path(job.out_root) / "acquisitions" / job.variant).string();
}

JobSpec default_job() {
  return parse_job(kDefaultJobYaml, "<embedded default>");
}

void validate(const JobSpec& job) {
  const auto& g = job.geometry;
  require_in_range(g.hidden, "model.hidden_size", job_limits::kHidden);
  require_in_range(g.intermediate, "model.moe_intermediate_size", job_limits::kIntermediate);
  require_in_range(g.experts, "model.num_experts", job_limits::kExperts);
  require_in_range(g.top_k, "model.top_k", job_limits::kTopK);
  require_in_range(g.layers, "model.num_layers", job_limits::kLayers);
  if (g.top_k > g.experts)
    throw JobError("job: top_k " + std::to_string(g.top_k) + " exceeds num_experts " +
                   std::to_string(g.experts));
  if (g.shared.count < 0) throw JobError("job: model.shared_experts.count must not be negative");
  if (g.shared.count > 0)
    require_in_range(g.shared.intermediate, "model.shared_experts.intermediate_size",
                     job_limits::kIntermediate);
  if (g.shared.count > job_limits::kSharedExperts)
    throw JobError("job: model.shared_experts.count " + std::to_string(g.shared.count) +
                   " exceeds the limit " + std::to_string(job_limits::kSharedExperts));
  require_in_range(job.max_num_batched_tokens, "tokens.max_num_batched_tokens",
                   job_limits::kTokens);
  require_in_range(job.max_num_seqs, "tokens.max_num_seqs", job_limits::kTokens);
  if (job.tp.empty() || job.dp.empty())
    throw JobError("job: deployment.tp and deployment.dp must not be empty");
  for (int v : job.tp) require_in_range(v, "deployment.tp entry", job_limits::kParallel);
  for (int v : job.dp) require_in_range(v, "deployment.dp entry", job_limits::kParallel);
  for (int v : job.ep) require_positive(v, "deployment.ep entry");
  for (int v : job.ranks)
    if (v < 0) throw JobError("job: deployment.ranks entries must not be negative");
  if (!(job.grid_factor >= job_limits::kMinGridFactor) || !(job.grid_factor <= 1024))
    throw JobError("job: measurement.grid_factor must be between " +
                   std::to_string(job_limits::kMinGridFactor) + " and 1024 (got " +
                   std::to_string(job.grid_factor) + ")");
  require_in_range(job.rounds, "measurement.rounds", job_limits::kRounds);
  require_in_range(job.iterations, "measurement.iterations", job_limits::kIterations);
  for (const auto& [value, key] :
       {std::pair{job.settle_ms, "settle_ms"}, std::pair{job.capped_settle_ms, "capped_settle_ms"}})
    if (value && (*value < 0 || *value > job_limits::kSettleMs))
      throw JobError(std::string("job: measurement.") + key + " must be between 0 and " +
                     std::to_string(job_limits::kSettleMs) + " (got " + std::to_string(*value) +
                     ")");
  if (!(job.fidelity.tolerance > 0) || !(job.fidelity.tolerance < 1))
    throw JobError("job: fidelity.tolerance must be a relative error in (0, 1) (got " +
                   std::to_string(job.fidelity.tolerance) + "; 0.02 is 2%)");
  if (job.fidelity.max_added_points < 0 || job.fidelity.max_added_points > job_limits::kAddedPoints)
    throw JobError("job: fidelity.max_added_points must be between 0 and " +
                   std::to_string(job_limits::kAddedPoints));
  if (job.fidelity.random_points < 0 || job.fidelity.random_points > job_limits::kHeldOutRandom)
    throw JobError("job: fidelity.random_points must be between 0 and " +
                   std::to_string(job_limits::kHeldOutRandom));
  if (job.fidelity.remeasure_limit < 0 || job.fidelity.remeasure_limit > job_limits::kRemeasures)
    throw JobError("job: fidelity.remeasure_limit must be between 0 and " +
                   std::to_string(job_limits::kRemeasures));
  static const std::vector<std::string> backends = {"auto", "cpu_reference", "cublas_grouped",
                                                    "native", "staircase_model"};
  if (std::find(backends.begin(), backends.end(), job.backend) == backends.end())
    throw JobError("job: unknown backend '" + job.backend + "'" +
                   did_you_mean(job.backend, backends) +
                   " (auto, cpu_reference, cublas_grouped, native, staircase_model)");
  for (auto c : job.capture_sizes) {
    require_positive(c, "graph.capture_sizes entry");
    if (c > job.max_num_batched_tokens)
      throw JobError("job: capture size " + std::to_string(c) +
                     " exceeds the token budget max_num_batched_tokens=" +
                     std::to_string(job.max_num_batched_tokens));
  }
  if (!(job.gpu_hours > 0)) throw JobError("job: budget.gpu_hours must be positive");
  try {
    require_path_component(job.variant, "output.variant");
  } catch (const std::invalid_argument& e) {
    throw JobError(std::string("job: ") + e.what());
  }
  (void)job.targets();
}

std::vector<Target> JobSpec::targets() const {
  std::set<int> matched;
  std::vector<Target> out;
  for (int t : tp)
    for (int d : dp) {
      const int e = t * d;
      if (!ep.empty() && std::find(ep.begin(), ep.end(), e) == ep.end()) continue;
      matched.insert(e);
      if (geometry.experts % e != 0)
        throw JobError("job: num_experts " + std::to_string(geometry.experts) +
                       " is not divisible by EP " + std::to_string(e) + " (TP " +
                       std::to_string(t) + " x DP " + std::to_string(d) + ")");
      for (int r = 0; r < e; ++r) {
        if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), r) == ranks.end()) continue;
        out.push_back({t, d, e, r, sp && t > 1});
      }
    }
  for (int e : ep)
    if (!matched.count(e))
      throw JobError("job: EP " + std::to_string(e) +
                     " matches no selected TP*DP (EP is TP*DP; --ep only filters)");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) throw JobError("job: the deployment selection yields no targets");
  return out;
}

bool host_backend(std::string_view backend) {
  return backend == "cpu_reference" || backend == "staircase_model";
}

int settle_ms_for(const JobSpec& job, std::string_view backend) {
  return job.settle_ms.value_or(host_backend(backend) ? 0 : kGpuSettleMs);
}

int capped_settle_ms_for(const JobSpec& job, std::string_view backend) {
  return job.capped_settle_ms.value_or(host_backend(backend) ? 0 : kGpuCappedSettleMs);
}

void apply_overrides(JobSpec& job, const JobOverrides& o) {
  if (o.geometry) job.geometry = *o.geometry;
  if (o.tp) job.tp = *o.tp;
  if (o.dp) job.dp = *o.dp;
  if (o.ep) job.ep = *o.ep;
  if (o.ranks) job.ranks = *o.ranks;
  if (o.rounds) job.rounds = *o.rounds;
  if (o.iterations) job.iterations = *o.iterations;
  if (o.backend) job.backend = *o.backend;
  if (o.out_root) job.out_root = *o.out_root;
  if (o.grid_factor) job.grid_factor = *o.grid_factor;
  if (o.gpu_hours) job.gpu_hours = *o.gpu_hours;
  if (o.components) job.components = *o.components;
  validate(job);
}

std::vector<Component> parse_component_list(const std::string& text, const std::string& option) {
  std::vector<std::string> items;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) items.push_back(item);
  return components_named(items, option);
}

std::vector<int> parse_int_list(const std::string& text, const std::string& option) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw JobError("option " + option + ": '" + item +
                     "' is not an integer (expected e.g. 1,2,4)");
    }
  }
  if (out.empty()) throw JobError("option " + option + ": empty list");
  return out;
}

}  // namespace moe
