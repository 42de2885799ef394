#include "core/hf_config.h"

#include <gtest/gtest.h>

#include "core/job_spec.h"

namespace moe {
namespace {

ModelGeometry from_file(const std::string& name) {
  return geometry_from_hf_config_file(std::string(HARNESS_SOURCE_DIR) + "/tests/data/hf/" + name);
}

std::string error_of(const std::string& text) {
  try {
    (void)geometry_from_hf_config(text, "config.json");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// The shipped presets were typed from the same configs: reading the configs must give them.
TEST(HfConfig, QwenAndDeepSeekConfigsGiveTheirPresets) {
  for (const auto& [file, preset] : {std::pair{"qwen3-moe.json", "qwen3-30b-a3b"},
                                     std::pair{"deepseek-v3.json", "deepseek-v3"}}) {
    auto g = from_file(file);
    auto want = *find_preset(preset);
    g.name = want.name;
    EXPECT_EQ(g, want) << file;
  }
}

TEST(HfConfig, AFileThatCannotBeReadIsNamed) {
  const std::string dir = std::string(HARNESS_SOURCE_DIR) + "/tests/data/hf";
  for (const auto& path : {dir + "/no-such-config.json", dir}) {
    try {
      (void)geometry_from_hf_config_file(path);
      ADD_FAILURE() << path << " gave a geometry";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "cannot read '" + path + "'");
    }
  }
}

TEST(HfConfig, MixtralRoutesTopTwoOfEightWithRenormalizedWeights) {
  const auto g = from_file("mixtral.json");
  EXPECT_EQ(g.hidden, 4096);
  EXPECT_EQ(g.intermediate, 14336);
  EXPECT_EQ(g.experts, 8);
  EXPECT_EQ(g.top_k, 2);
  EXPECT_TRUE(g.renormalize);
  EXPECT_EQ(g.shared.count, 0);
  EXPECT_EQ(g.layers, 32);
}

TEST(HfConfig, ErrorsNameTheFieldOrTheModelType) {
  EXPECT_NE(error_of(R"({"model_type": "qwen3_moe", "hidden_size": 8, "num_experts_per_tok": 2,
                        "num_hidden_layers": 2, "num_experts": 4})")
                .find("missing 'moe_intermediate_size'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "llama", "hidden_size": 8, "num_experts_per_tok": 2,
                        "num_hidden_layers": 2})")
                .find("model_type 'llama' is not a supported MoE config"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "mixtral", "hidden_size": "big"})")
                .find("'hidden_size' must be a positive integer"),
            std::string::npos);
  EXPECT_NE(error_of("{nope").find("config.json: not valid JSON"), std::string::npos);
}

// A job names the config relative to its own directory.
TEST(HfConfig, AJobNamesTheConfigRelativeToItsFile) {
  const auto job = parse_job(
      "model:\n  config: hf/mixtral.json\ndeployment:\n  tp: [1]\n  dp: [1]\ntokens:\n"
      "  max_num_batched_tokens: 64\n  max_num_seqs: 8\n",
      std::string(HARNESS_SOURCE_DIR) + "/tests/data/job.yaml");
  EXPECT_EQ(job.geometry.experts, 8);
  EXPECT_EQ(job.geometry.top_k, 2);
  try {
    (void)parse_job("model:\n  preset: tiny\n  config: hf/mixtral.json\n", "job.yaml");
    FAIL() << "preset and config together accepted";
  } catch (const JobError& e) {
    EXPECT_NE(std::string(e.what()).find("model.preset and model.config"), std::string::npos);
  }
  // A config that is not there, or not a model harness knows, is named with the job's line.
  const auto error = [](const std::string& config) {
    try {
      (void)parse_job("model:\n  config: " + config +
                          "\ndeployment:\n  tp: [1]\n  dp: [1]\ntokens:\n"
                          "  max_num_batched_tokens: 64\n",
                      std::string(HARNESS_SOURCE_DIR) + "/tests/data/job.yaml");
    } catch (const JobError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string data = std::string(HARNESS_SOURCE_DIR) + "/tests/data/";
  EXPECT_EQ(error("hf/missing.json"), "job: model.config: cannot read '" + data +
                                          "hf/missing.json' (line 2) [" + data + "job.yaml]");
  // (A job file is not a config.json: its text is not JSON.)
  EXPECT_NE(error("qwen3-30b-a3b-smoke.yaml").find("qwen3-30b-a3b-smoke.yaml: not valid JSON"),
            std::string::npos);
}

}  // namespace
}  // namespace moe
