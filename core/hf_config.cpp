#include "core/hf_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/files.h"

namespace moe {

namespace {

using nlohmann::json;

class Config {
 public:
  Config(const std::string& text, const std::string& source) : source_(source) {
    try {
      j_ = json::parse(text);
    } catch (const json::parse_error& e) {
      fail("not valid JSON (byte " + std::to_string(e.byte) + ")");
    }
    if (!j_.is_object()) fail("not a JSON object");
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw std::invalid_argument("model config " + source_ + ": " + why);
  }
  [[nodiscard]] int positive(const char* key) const {
    if (!j_.contains(key)) fail("missing '" + std::string(key) + "'");
    const auto& v = j_[key];
    if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > (1LL << 30))
      fail("'" + std::string(key) + "' must be a positive integer");
    return v.get<int>();
  }
  [[nodiscard]] int count(const char* key, int fallback) const {
    return j_.contains(key) && !j_[key].is_null() ? nonnegative(key) : fallback;
  }
  [[nodiscard]] bool flag(const char* key, bool fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    if (!j_[key].is_boolean()) fail("'" + std::string(key) + "' must be true or false");
    return j_[key].get<bool>();
  }
  [[nodiscard]] std::string text(const char* key) const {
    return j_.contains(key) && j_[key].is_string() ? j_[key].get<std::string>() : std::string();
  }

 private:
  [[nodiscard]] int nonnegative(const char* key) const {
    const auto& v = j_[key];
    if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > (1LL << 30))
      fail("'" + std::string(key) + "' must be a non-negative integer");
    return v.get<int>();
  }
  std::string source_;
  json j_;
};

}  // namespace

ModelGeometry geometry_from_hf_config(const std::string& json_text, const std::string& source) {
  const Config c(json_text, source);
  const auto type = c.text("model_type");
  ModelGeometry g;
  const auto name = c.text("_name_or_path");
  // A config.json lives in a directory named after the model; another file is named after it.
  const std::filesystem::path file(source);
  g.name = !name.empty()                      ? name
           : file.filename() == "config.json" ? file.parent_path().filename().string()
                                              : file.stem().string();
  if (g.name.empty()) g.name = type;
  g.hidden = c.positive("hidden_size");
  g.top_k = c.positive("num_experts_per_tok");
  g.layers = c.positive("num_hidden_layers");
  if (type == "qwen3_moe" || type == "qwen2_moe") {
    g.intermediate = c.positive("moe_intermediate_size");
    g.experts = c.positive("num_experts");
    g.renormalize = c.flag("norm_topk_prob", type == "qwen3_moe");
    if (type == "qwen2_moe" && c.count("shared_expert_intermediate_size", 0) > 0)
      g.shared = {1, c.count("shared_expert_intermediate_size", 0)};
  } else if (type == "deepseek_v3" || type == "deepseek_v2") {
    g.intermediate = c.positive("moe_intermediate_size");
    g.experts = c.positive("n_routed_experts");
    g.renormalize = c.flag("norm_topk_prob", type == "deepseek_v3");
    if (const int shared = c.count("n_shared_experts", 0); shared > 0)
      g.shared = {shared, g.intermediate};
    g.layers -= c.count("first_k_dense_replace", 0);
    if (g.layers < 1) c.fail("first_k_dense_replace leaves no MoE layer");
    g.router_dtype = Dtype::fp32;
  } else if (type == "mixtral") {
    g.intermediate = c.positive("intermediate_size");
    g.experts = c.positive("num_local_experts");
    g.renormalize = true;  // softmax over the top-k logits
  } else {
    c.fail("model_type '" + type +
           "' is not a supported MoE config (qwen3_moe, qwen2_moe, deepseek_v3, deepseek_v2, "
           "mixtral); give the sizes in the job's model section instead");
  }
  if (g.top_k > g.experts) c.fail("num_experts_per_tok exceeds the number of experts");
  return g;
}

ModelGeometry geometry_from_hf_config_file(const std::string& path) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::exception&) {
    throw std::invalid_argument("cannot read '" + path + "'");
  }
  return geometry_from_hf_config(text, path);
}

}  // namespace moe
