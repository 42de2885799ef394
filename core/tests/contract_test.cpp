#include "core/contract.h"

#include <gtest/gtest.h>

#include "core/job_spec.h"
#include "core/planner.h"

namespace moe {
namespace {

Plan tiny_plan() {
  return make_plan(
      parse_job("model:\n  preset: tiny\ndeployment:\n  tp: 1\n  dp: 2\n  ranks: [0, 1]\n"
                "tokens:\n  max_num_batched_tokens: 64\n  max_num_seqs: 8\n",
                "test"),
      std::int64_t{1} << 20);
}

TEST(Contract, StoredFormRoundTripsExactly) {
  const auto plan = tiny_plan();
  const auto c = Contract::of(plan, "cpu_reference", "host_clock", 1 << 20);
  ASSERT_EQ(c.targets.size(), 2u);
  EXPECT_EQ(c.targets[1].target, (Target{1, 2, 2, 1, false}));
  EXPECT_EQ(c.targets[0].ownership.local_experts, plan.targets[0].ownership.local_experts);
  const auto back = Contract::parse(c.dump());
  EXPECT_EQ(back.dump(), c.dump());  // the identity hash is stable across a store and a load
  EXPECT_EQ(back.geometry, plan.job.geometry);
  EXPECT_EQ(back.targets[0].grids, c.targets[0].grids);
  // A grid's digest changes with its points.
  auto other = plan.job;
  other.grid_factor = 4;
  const auto c4 =
      Contract::of(make_plan(other, std::int64_t{1} << 20), "cpu_reference", "host_clock", 1 << 20);
  EXPECT_NE(c4.targets[0].grids.at(Component::experts), c.targets[0].grids.at(Component::experts));
  EXPECT_EQ(json_difference(c.to_json(), c4.to_json()), "grid.factor: 2.0 -> 4.0, targets");
}

TEST(Contract, PublishedTablesCarryTheTargetAndConditioning) {
  const auto c = Contract::of(tiny_plan(), "cpu_reference", "host_clock", 1 << 20);
  const auto table = c.component_table(c.targets[1]);
  EXPECT_EQ(table.at("target"), c.targets[1].target.to_json());
  EXPECT_EQ(table.at("components"),
            nlohmann::json::array({"gate_routing", "experts", "finalize_copy", "wrapper"}));
  EXPECT_EQ(table.at("conditioning").at("bank_tolerance"), 0.03);
  EXPECT_EQ(table.at("grids").at("experts").at("sha256"),
            c.targets[1].grids.at(Component::experts).sha256);
  const auto coll = c.collective_table(c.targets[1], "nccl");
  // Both columns name their method: the kernel time and the nccl-tests steady state.
  EXPECT_EQ(coll.at("timing").at("time_us").get<std::string>().rfind("cupti_activity", 0), 0u);
  EXPECT_NE(coll.at("timing").at("steady_time_us").get<std::string>().find("nccl-tests"),
            std::string::npos);
  EXPECT_EQ(c.collective_table(c.targets[1], "mpi_host")
                .at("timing")
                .at("time_us")
                .get<std::string>()
                .rfind("host_clock", 0),
            0u);
  EXPECT_EQ(coll.at("bandwidth").at("bus_factor").at("all_to_all"), "(n-1)/n");
  EXPECT_EQ(coll.at("tokens").at("points"), c.targets[1].grids.at(Component::gate_routing).points);
}

TEST(Contract, SettleFollowsTheTimingUnlessTheJobSetsIt) {
  auto plan = tiny_plan();
  // Unset: the GPU default under CUPTI timing, nothing on a host clock.
  EXPECT_EQ(Contract::of(plan, "native", "cupti_activity", 1 << 20).conditioning.settle_ms,
            kGpuSettleMs);
  const auto host = Contract::of(plan, "cpu_reference", "host_clock", 1 << 20);
  EXPECT_EQ(host.conditioning.settle_ms, 0);
  EXPECT_EQ(host.conditioning.capped_settle_ms, 0);
  EXPECT_EQ(Contract::of(plan, "native", "cupti_activity", 1 << 20).conditioning.capped_settle_ms,
            kGpuCappedSettleMs);
  EXPECT_EQ(host.component_table(host.targets[0]).at("conditioning").at("settle_ms"), 0);
  plan.job.settle_ms = 50;
  plan.job.capped_settle_ms = 700;
  const auto set = Contract::of(plan, "native", "cupti_activity", 1 << 20);
  EXPECT_EQ(set.conditioning.settle_ms, 50);
  EXPECT_EQ(Contract::parse(set.dump()).conditioning.settle_ms, 50);
  EXPECT_EQ(Contract::parse(set.dump()).conditioning.capped_settle_ms, 700);
  EXPECT_EQ(set.component_table(set.targets[0]).at("conditioning").at("capped_settle_ms"), 700);
  // A contract stored before the settle phase existed reads as no settle.
  auto old = set.to_json();
  old["conditioning"].erase("settle_ms");
  old["conditioning"].erase("capped_settle_ms");
  EXPECT_EQ(Contract::from_json(old).conditioning.settle_ms, 0);
  EXPECT_EQ(Contract::from_json(old).conditioning.capped_settle_ms, 0);
  EXPECT_EQ(tiny_plan().job.settle_ms, std::nullopt);
  EXPECT_EQ(parse_job("model:\n  preset: tiny\ndeployment:\n  tp: 1\n  dp: 1\ntokens:\n"
                      "  max_num_batched_tokens: 8\nmeasurement:\n  settle_ms: 120\n",
                      "test")
                .settle_ms,
            120);
}

// The measured code's version is part of the contract (a file of one version is not resumed by
// another, a table says which measured it); version 1, all code before versions were recorded,
// is left out, so that those contracts read and hash as before.
TEST(Contract, TheBackendVersionIsRecordedFromTwoOn) {
  const auto plan = tiny_plan();
  const auto v1 = Contract::of(plan, "native", "cupti_activity", 1 << 20);
  const auto v2 = Contract::of(plan, "native", "cupti_activity", 1 << 20, 2);
  EXPECT_EQ(v1.backend_version, 1);
  EXPECT_FALSE(v1.to_json().contains("backend_version"));
  EXPECT_FALSE(v1.component_table(v1.targets[0]).contains("backend_version"));
  EXPECT_EQ(v2.to_json().at("backend_version"), 2);
  EXPECT_EQ(v2.component_table(v2.targets[0]).at("backend_version"), 2);
  EXPECT_EQ(Contract::parse(v2.dump()).backend_version, 2);
  EXPECT_EQ(Contract::parse(v1.dump()).backend_version, 1);
  EXPECT_NE(v1.dump(), v2.dump());
  EXPECT_EQ(json_difference(v1.to_json(), v2.to_json()), "backend_version: absent -> 2");
  EXPECT_EQ(backend_version_of(v1.component_table(v1.targets[0])),
            1);  // what readers of tables use
  EXPECT_EQ(backend_version_of(v2.component_table(v2.targets[0])), 2);
}

// A change of the timing loop is a new contract: a campaign measured with the old loop is refused
// on resume, and a table says which loop measured it (absent: 1, before it was recorded).
TEST(Contract, TheTimingProtocolIsRecordedInTheConditioning) {
  const auto c = Contract::of(tiny_plan(), "native", "cupti_activity", 1 << 20);
  EXPECT_EQ(c.conditioning.timing_protocol, kTimingProtocol);
  EXPECT_EQ(c.to_json().at("conditioning").at("timing_protocol"), kTimingProtocol);
  const auto table = c.component_table(c.targets[0]);
  EXPECT_EQ(timing_protocol_of(table), kTimingProtocol);
  EXPECT_EQ(Contract::parse(c.dump()).conditioning.timing_protocol, kTimingProtocol);
  auto older = c.to_json();
  older["conditioning"].erase("timing_protocol");
  EXPECT_EQ(Contract::from_json(older).conditioning.timing_protocol, 1);
  EXPECT_EQ(timing_protocol_of(older), 1);
  EXPECT_FALSE(Contract::from_json(older).to_json().at("conditioning").contains("timing_protocol"));
  EXPECT_EQ(json_difference(older, c.to_json()), "conditioning.timing_protocol: absent -> 2");
  EXPECT_EQ(timing_protocol_of(nlohmann::json::object()), 1);
}

// A resume may raise the refinement cap and nothing else: a larger fidelity.max_added_points alone
// is a raise, a smaller or equal one, or any other change beside it, is not.
TEST(Contract, OnlyALargerRefinementCapIsARaise) {
  auto job = tiny_plan().job;
  const auto contract = [&](int cap, double tolerance) {
    job.fidelity.max_added_points = cap;
    job.fidelity.tolerance = tolerance;
    return Contract::of(make_plan(job, std::int64_t{1} << 20), "cpu_reference", "host_clock",
                        1 << 20)
        .to_json();
  };
  const auto stored = contract(2000, 0.02);
  EXPECT_EQ(refinement_cap_raise(stored, contract(4000, 0.02)), (std::pair{2000, 4000}));
  EXPECT_EQ(refinement_cap_raise(stored, contract(2000, 0.02)), std::nullopt);
  EXPECT_EQ(refinement_cap_raise(stored, contract(1000, 0.02)), std::nullopt);
  EXPECT_EQ(refinement_cap_raise(stored, contract(4000, 0.03)), std::nullopt);
  auto other_backend = contract(4000, 0.02);
  other_backend["backend"] = "native";
  EXPECT_EQ(refinement_cap_raise(stored, other_backend), std::nullopt);
  EXPECT_EQ(refinement_cap_raise(nlohmann::json::object(), contract(4000, 0.02)), std::nullopt);
}

// A refused resume or publish names what changed, down to the field and both values: a campaign
// resumed on a GPU of another kind differs in the cache its weight banks were sized for.
TEST(Contract, TheDifferenceNamesTheFieldAndBothValues) {
  const auto c = Contract::of(tiny_plan(), "native", "cupti_activity", 60 << 20);
  const auto other_gpu = Contract::of(tiny_plan(), "native", "cupti_activity", 50 << 20);
  EXPECT_EQ(json_difference(c.to_json(), other_gpu.to_json()),
            "conditioning.cache_bytes: 62914560 -> 52428800");
  EXPECT_EQ(json_difference(c.to_json(), c.to_json()), "contract");
  nlohmann::json a = nlohmann::json::object(), b = nlohmann::json::object();
  for (int i = 0; i < 10; ++i) a[std::string(1, 'k') += std::to_string(i)] = i;
  b["k0"] = "zero";
  b["k1"] = nlohmann::json::array({1});
  EXPECT_EQ(json_difference(a, b),
            "k0: 0 -> \"zero\", k1, k2: 2 -> absent, k3: 3 -> absent, k4: 4 -> absent, "
            "k5: 5 -> absent, k6: 6 -> absent, k7: 7 -> absent and 2 more");
}

TEST(Contract, MalformedContractsNameTheKey) {
  auto j = Contract::of(tiny_plan(), "cpu_reference", "host_clock", 1 << 20).to_json();
  const auto message = [](const nlohmann::json& doc) {
    try {
      (void)Contract::from_json(doc);
    } catch (const ContractError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  auto bad = j;
  bad["geometry"].erase("top_k");
  EXPECT_NE(message(bad).find("geometry.top_k"), std::string::npos) << message(bad);
  bad = j;
  bad["conditioning"]["rounds"] = "three";
  EXPECT_NE(message(bad).find("conditioning.rounds"), std::string::npos) << message(bad);
  bad = j;
  bad["targets"][0]["grids"]["attention"] = bad["targets"][0]["grids"]["experts"];
  EXPECT_NE(message(bad).find("attention"), std::string::npos) << message(bad);
  for (const auto& targets : {nlohmann::json(), nlohmann::json("tp1")}) {
    bad = j;
    bad["targets"] = targets;
    EXPECT_EQ(message(bad), "contract: 'targets' is missing or not a list");
  }
  bad = j;
  bad["fidelity"] = 3;
  EXPECT_EQ(message(bad), "contract: 'fidelity' is missing or not a mapping");
  bad = j;
  bad["targets"][0]["target"] = "tp1";
  EXPECT_EQ(message(bad).rfind("contract: targets[].target: ", 0), 0u) << message(bad);
  EXPECT_THROW((void)Contract::parse("{not json"), ContractError);
}

}  // namespace
}  // namespace moe
