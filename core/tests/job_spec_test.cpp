#include "core/job_spec.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

const std::string kBase = R"(model:
  preset: qwen3-30b-a3b
deployment:
  tp: [1, 2]
  dp: [1, 2]
tokens:
  max_num_batched_tokens: 256
)";

// Parses `yaml` and returns the error message (empty if it parsed).
std::string error_of(const std::string& yaml) {
  try {
    (void)parse_job(yaml, "test.yaml");
  } catch (const JobError& e) {
    return e.what();
  }
  return "";
}

TEST(JobSpec, ShippedJobsAndDefaultParse) {
  for (const char* f : {"tiny", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3"}) {
    const auto job = load_job_file(std::string(HARNESS_SOURCE_DIR) + "/jobs/" + f + ".yaml");
    EXPECT_EQ(job.geometry.name, f);
    EXPECT_FALSE(job.targets().empty());
  }
  const auto d = default_job();
  EXPECT_EQ(d.geometry.name, "tiny");
  EXPECT_TRUE(d.capture_sizes_derived);
  EXPECT_EQ(d.capture_sizes, (std::vector<std::int64_t>{1, 2, 4, 8, 16, 24, 32}));
}

TEST(JobSpec, EpIsTpTimesDpAndTheFilterSelects) {
  auto job = parse_job(kBase, "t");
  JobOverrides o;
  o.ep = std::vector<int>{2};
  apply_overrides(job, o);
  const auto targets = job.targets();
  ASSERT_EQ(targets.size(), 4u);  // TP1/DP2 and TP2/DP1, ranks 0 and 1 each
  for (const auto& t : targets) {
    EXPECT_EQ(t.ep, 2);
    EXPECT_EQ(t.ep, t.tp * t.dp);
  }
}

TEST(JobSpec, UnmatchedExplicitEpIsNamed) {
  auto job = parse_job(kBase, "t");
  JobOverrides o;
  o.ep = std::vector<int>{2, 3};
  try {
    apply_overrides(job, o);
    FAIL() << "EP 3 accepted";
  } catch (const JobError& e) {
    EXPECT_NE(std::string(e.what()).find("EP 3"), std::string::npos) << e.what();
  }
}

TEST(JobSpec, UnknownKeySuggestsTheClosestKey) {
  const auto msg = error_of(kBase + "measurement:\n  rouns: 3\n");
  EXPECT_NE(msg.find("unknown key 'measurement.rouns'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'rounds'"), std::string::npos) << msg;
}

TEST(JobSpec, EverySizeHasAnUpperLimitNamedInTheError) {
  const std::string tiny = "deployment:\n  tp: 1\n  dp: 1\ntokens:\n  max_num_batched_tokens: 8\n";
  const auto model = [&](const std::string& key, const std::string& value) {
    return "model:\n  preset: tiny\n  " + key + ": " + value + "\n" + tiny;
  };
  struct Case {
    std::string yaml, needle;
  };
  for (const auto& [yaml, needle] : std::vector<Case>{
           {model("hidden_size", "2000000000"),
            "model.hidden_size 2000000000 exceeds the limit 65536"},
           {model("moe_intermediate_size", "70000"), "model.moe_intermediate_size 70000 exceeds"},
           {model("num_experts", "8192"), "model.num_experts 8192 exceeds the limit 4096"},
           {model("num_layers", "5000"), "model.num_layers 5000 exceeds"},
           {"model:\n  preset: tiny\ndeployment:\n  tp: 1\n  dp: 1\ntokens:\n  "
            "max_num_batched_tokens: 9200000000000000000\n",
            "tokens.max_num_batched_tokens 9200000000000000000 exceeds the limit 1048576"},
           {kBase + "measurement:\n  grid_factor: 1.000001\n", "grid_factor must be between 1.1"},
           {kBase + "measurement:\n  rounds: 100000\n", "measurement.rounds 100000 exceeds"},
           {kBase + "measurement:\n  iterations: 10000000\n", "measurement.iterations 10000000"},
           {kBase + "measurement:\n  settle_ms: -5\n",
            "measurement.settle_ms must be between 0 and 60000 (got -5)"},
           {kBase + "measurement:\n  settle_ms: 90000\n",
            "measurement.settle_ms must be between 0 and 60000 (got 90000)"},
           {kBase + "measurement:\n  capped_settle_ms: -1\n",
            "measurement.capped_settle_ms must be between 0 and 60000 (got -1)"},
           {model("shared_experts", "{count: 65, intermediate_size: 8}"),
            "model.shared_experts.count 65 exceeds the limit 64"},
           {model("shared_experts", "{count: -1, intermediate_size: 8}"),
            "model.shared_experts.count must not be negative"}}) {
    const auto error = error_of(yaml);
    EXPECT_NE(error.find(needle), std::string::npos) << "got: " << error << "\nfor:\n" << yaml;
  }
}

TEST(JobSpec, EachBadValueGetsItsOwnMessage) {
  EXPECT_NE(error_of("deployment:\n  tp: [1]\n  dp: [1]\ntokens:\n  max_num_batched_tokens: 8\n")
                .find("missing required key 'model'"),
            std::string::npos);
  EXPECT_NE(error_of("model:\n  preset: qwen3-30b-a3b\ndeployment:\n  tp: [1]\ntokens:\n  "
                     "max_num_batched_tokens: 8\n")
                .find("missing required key 'deployment.dp'"),
            std::string::npos);
  EXPECT_NE(
      error_of(kBase + "measurement:\n  rounds: 0\n").find("measurement.rounds must be positive"),
      std::string::npos);
  EXPECT_NE(
      error_of("model:\n  preset: tiny\n  top_k: 9\ndeployment:\n  tp: 1\n  dp: 1\ntokens:\n  "
               "max_num_batched_tokens: 8\n")
          .find("top_k 9 exceeds num_experts 8"),
      std::string::npos);
  EXPECT_NE(error_of("model:\n  preset: tiny\ndeployment:\n  tp: 3\n  dp: 1\ntokens:\n  "
                     "max_num_batched_tokens: 8\n")
                .find("not divisible by EP 3"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "graph:\n  mode: FULL\n  capture_sizes: [1, 512]\n")
                .find("capture size 512 exceeds the token budget"),
            std::string::npos);
  EXPECT_NE(error_of("model:\n  preset: qwen3-31b\ndeployment:\n  tp: 1\n  dp: 1\ntokens:\n  "
                     "max_num_batched_tokens: 8\n")
                .find("unknown preset 'qwen3-31b'"),
            std::string::npos);
  EXPECT_NE(
      error_of("model:\n  hidden_size: -4\n  moe_intermediate_size: 8\n  num_experts: 4\n  "
               "top_k: 2\ndeployment:\n  tp: 1\n  dp: 1\ntokens:\n  max_num_batched_tokens: 8\n")
          .find("model.hidden_size must be positive"),
      std::string::npos);
  EXPECT_EQ(error_of(kBase + "graph:\n  mode: FULL_GRAPH\n"),
            "job: unknown graph.mode 'FULL_GRAPH' (line 9) (NONE, PIECEWISE, FULL, "
            "FULL_AND_PIECEWISE, FULL_DECODE_ONLY) [test.yaml]");
  EXPECT_EQ(error_of("model:\n  preset: tiny\ndeployment:\n  tp: []\n  dp: [1]\ntokens:\n  "
                     "max_num_batched_tokens: 8\n"),
            "job: deployment.tp and deployment.dp must not be empty [test.yaml]");
}

TEST(JobSpec, FidelitySettingsParseAndBadOnesAreNamed) {
  const auto job = parse_job(kBase +
                                 "fidelity:\n  tolerance: 0.05\n  max_added_points: 40\n"
                                 "  random_points: 3\n  remeasure_limit: 1\n  refine: false\n"
                                 "  accept_failures: true\n",
                             "test.yaml");
  EXPECT_EQ(job.fidelity, (FidelitySpec{0.05, 40, 3, 1, false, true}));
  EXPECT_EQ(parse_job(kBase, "test.yaml").fidelity, FidelitySpec{});
  for (const auto& [yaml, message] : std::vector<std::pair<std::string, std::string>>{
           {"tolerance: 0", "fidelity.tolerance must be a relative error in (0, 1)"},
           {"tolerance: 2", "fidelity.tolerance must be a relative error in (0, 1)"},
           {"max_added_points: -1", "fidelity.max_added_points must be between 0 and 100000"},
           {"random_points: 20000", "fidelity.random_points must be between 0 and 10000"},
           {"remeasure_limit: 101", "fidelity.remeasure_limit must be between 0 and 100"},
           {"tolerence: 0.1", "did you mean 'tolerance'"}})
    EXPECT_NE(error_of(kBase + "fidelity:\n  " + yaml + "\n").find(message), std::string::npos)
        << yaml << ": " << error_of(kBase + "fidelity:\n  " + yaml + "\n");
}

TEST(JobSpec, MalformedYamlNamesTheLine) {
  const auto msg = error_of("model:\n  preset: tiny\ndeployment: [1,\n  tp: 1\n");
  EXPECT_NE(msg.find("line 5, column 1: malformed YAML"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed YAML"), std::string::npos) << msg;
}

// Found by fuzz_job: a key that is not a scalar escaped as yaml-cpp's TypedBadConversion.
TEST(JobSpec, AKeyOfTheWrongYamlTypeNamesTheLineNotTheLibrary) {
  const auto msg = error_of("? [a, b]\n: 1\n");
  EXPECT_NE(msg.find("line 1, column 3: a value has the wrong type"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("yaml-cpp"), std::string::npos) << msg;
}

TEST(JobSpec, ExplicitGeometryWithoutPreset) {
  const auto job = parse_job(
      "model:\n  hidden_size: 32\n  moe_intermediate_size: 16\n  num_experts: 4\n  top_k: 2\n"
      "  router_dtype: fp32\ndeployment:\n  tp: 1\n  dp: [1, 2]\ntokens:\n  "
      "max_num_batched_tokens: 8\n",
      "t");
  EXPECT_EQ(job.geometry.hidden, 32);
  EXPECT_EQ(job.geometry.router_dtype, Dtype::fp32);
  EXPECT_EQ(job.targets().size(), 3u);
}

TEST(JobSpec, ComponentsFromTheJobOrTheOption) {
  const auto job = parse_job(
      kBase + "measurement:\n  components: [experts, gate_routing, experts]\n", "test.yaml");
  EXPECT_EQ(job.components, (std::vector<Component>{Component::experts, Component::gate_routing}));
  EXPECT_NE(error_of(kBase + "measurement:\n  components: [gate_routng]\n")
                .find("measurement.components: unknown component 'gate_routng' (did you mean "
                      "'gate_routing'?)"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "measurement:\n  components: []\n")
                .find("measurement.components: name at least one component"),
            std::string::npos);
  EXPECT_EQ(parse_component_list("finalize_copy,wrapper", "--components"),
            (std::vector<Component>{Component::finalize_copy, Component::wrapper}));
  EXPECT_THROW((void)parse_component_list("experts,,gate_routing", "--components"), JobError);
}

TEST(JobSpec, IntListOption) {
  EXPECT_EQ(parse_int_list("1,2,4", "--tp"), (std::vector<int>{1, 2, 4}));
  EXPECT_THROW((void)parse_int_list("1,x", "--tp"), JobError);
}

}  // namespace
}  // namespace moe
