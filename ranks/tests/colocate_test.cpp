#include "ranks/colocate.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/files.h"
#include "core/timestamp.h"
#include "ranks/families.h"

namespace moe {
namespace {

RegimeFigures figures(double t_solo, double t_coloc, std::map<std::string, double> solo,
                      std::map<std::string, double> coloc) {
  RegimeFigures f;
  f.regime = 8;
  f.solo.throughput = t_solo;
  f.coloc.throughput = t_coloc;
  f.solo.shares.shares = std::move(solo);
  f.coloc.shares.shares = std::move(coloc);
  f.solo.shares.total_us = f.coloc.shares.total_us = 1;
  return f;
}

const std::map<std::string, double> kShares = {
    {"gemm", 0.6}, {"routing", 0.2}, {"memory", 0.1}, {"activation", 0.1}};

TEST(ColocationGate, ThroughputBoundary) {
  EXPECT_TRUE(decide(figures(1000, 1029.9, kShares, kShares)).passed) << "2.99% passes";
  EXPECT_FALSE(decide(figures(1000, 1030.0, kShares, kShares)).passed) << "3.00% fails";
  EXPECT_TRUE(decide(figures(1000, 970.1, kShares, kShares)).passed);
  EXPECT_FALSE(decide(figures(1000, 970.0, kShares, kShares)).passed);
}

TEST(ColocationGate, F3IsChosenFromSoloSharesAndBoundedAtThreePoints) {
  auto coloc = kShares;
  coloc["activation"] = 0.2;  // the 4th family may move: not in F3
  coloc["memory"] = 0.0;      // ... but memory (3rd, tie broken by name) may not
  auto v = decide(figures(1000, 1000, kShares, coloc));
  ASSERT_EQ(v.f3.size(), 3u);
  EXPECT_EQ(v.f3[0].family, "gemm");
  EXPECT_EQ(v.f3[1].family, "routing");
  EXPECT_EQ(v.f3[2].family, "activation");  // 0.1 tie with memory: lower name first
  EXPECT_FALSE(v.passed);
  coloc = kShares;
  coloc["gemm"] = 0.6 + 0.0299;
  EXPECT_TRUE(decide(figures(1000, 1000, kShares, coloc)).passed);
  coloc["gemm"] = 0.6 + 0.0301;
  EXPECT_FALSE(decide(figures(1000, 1000, kShares, coloc)).passed);
  auto with_other = kShares;
  with_other["other"] = 0.9;  // `other` is never an F3 family
  EXPECT_EQ(decide(figures(1000, 1000, with_other, with_other)).f3[0].family, "gemm");
}

TEST(ColocationGate, UnclassifiableWindowFails) {
  std::map<std::string, double> mostly_other = {{"gemm", 0.6}, {"other", 0.31}};
  const auto v = decide(figures(1000, 1000, kShares, mostly_other));
  EXPECT_FALSE(v.passed);
  EXPECT_FALSE(v.stop) << "an unclassifiable co-located window fails this regime only";
  EXPECT_NE(v.reason.find("unclassifiable"), std::string::npos);
}

TEST(ColocationGate, UnclassifiableSoloWindowStopsTheGateNamingTheUnmatchedKernels) {
  std::vector<IntervalFigures> intervals(3);
  for (auto& i : intervals) {
    i.throughput = 1000;
    i.shares = {{"gemm", 0.5}, {"other", 0.5}};
    for (int k = 0; k < 25; ++k) i.other_us["mystery_kernel_" + std::to_string(k)] = 1.0 + k;
  }
  auto f = figures(1000, 1000, kShares, kShares);
  f.solo = combine_intervals(intervals);
  ASSERT_EQ(f.solo.unmatched.size(), 20u) << "the top 20";
  EXPECT_EQ(f.solo.unmatched.front().first, "mystery_kernel_24");
  double listed = 0;
  for (const auto& u : f.solo.unmatched) listed += u.second;
  EXPECT_LT(listed, 0.5);
  EXPECT_GT(listed, 0.4);
  const auto v = decide(f);
  EXPECT_TRUE(v.stop);
  EXPECT_NE(v.reason.find("mystery_kernel_24"), std::string::npos) << v.reason;
  EXPECT_EQ(v.reason.find("mystery_kernel_0 "), std::string::npos) << "not in the top 20";
  std::vector<int> measured;
  const auto g = run_gate({8, 4}, [&](int r) {
    measured.push_back(r);
    auto copy = f;
    copy.regime = r;
    return copy;
  });
  EXPECT_EQ(measured, (std::vector<int>{8})) << "no retry at 4-way";
  EXPECT_FALSE(g.allowed);
}

TEST(ColocationGate, DecidesOnIntervalMediansAndRecordsTheSpread) {
  // One outlier interval (a hiccup) moves the mean by 10% but not the median.
  std::vector<IntervalFigures> solo, coloc;
  for (double t : {1000.0, 1001.0, 999.0, 1000.5, 1000.2}) solo.push_back({t, kShares, {}});
  for (double t : {1000.0, 1002.0, 500.0, 999.0, 1001.0}) coloc.push_back({t, kShares, {}});
  RegimeFigures f;
  f.regime = 4;
  f.solo = combine_intervals(solo);
  f.coloc = combine_intervals(coloc);
  EXPECT_DOUBLE_EQ(f.coloc.throughput, 1000.0);
  EXPECT_DOUBLE_EQ(f.coloc.throughput_min, 500.0);
  EXPECT_DOUBLE_EQ(f.coloc.spread(), 0.502);
  EXPECT_NEAR(f.solo.spread(), 2.0 / 1000.2, 1e-12);  // median 1000.2
  EXPECT_DOUBLE_EQ(f.solo.shares.shares.at("gemm"), 0.6);
  EXPECT_TRUE(decide(f).passed);
  // A family absent from some windows counts as 0 there.
  std::vector<IntervalFigures> sparse = {
      {1, {{"gemm", 1.0}}, {}}, {1, {{"memory", 1.0}}, {}}, {1, {{"gemm", 1.0}}, {}}};
  EXPECT_DOUBLE_EQ(combine_intervals(sparse).shares.shares.at("memory"), 0.0);
  EXPECT_THROW((void)combine_intervals({}), std::invalid_argument);
}

nlohmann::json sample(double load, int cpus, const std::string& sm, const std::string& max_sm,
                      const std::string& pids) {
  return {
      {"load_average", {load, load, load}},
      {"online_cpus", cpus},
      {"device", {{"sm_clock_mhz", sm}, {"sm_clock_max_mhz", max_sm}, {"gpu_processes", pids}}}};
}

TEST(ColocationGate, ContaminationIsFoundAndFailsTheRegime) {
  const std::vector<long> ours = {100, 101, 102, 103};
  const ContaminationLimits limits;
  const auto clean = nlohmann::json::array({sample(4.5, 64, "1980", "1980", "100")});
  EXPECT_TRUE(contamination(clean, ours, 4, limits).empty());
  const auto foreign = nlohmann::json::array({sample(4, 64, "1980", "1980", "100,777")});
  auto why = contamination(foreign, ours, 4, limits);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_NE(why[0].find("777"), std::string::npos) << why[0];
  // Host-namespace pids that match none of ours: one process is the rank's own, more are foreign.
  EXPECT_TRUE(
      contamination(nlohmann::json::array({sample(1, 8, "1980", "1980", "90001")}), ours, 1, limits)
          .empty());
  why = contamination(nlohmann::json::array({sample(1, 8, "1980", "1980", "90001,90002")}), ours, 1,
                      limits);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_NE(why[0].find("by count"), std::string::npos) << why[0];
  why =
      contamination(nlohmann::json::array({sample(1, 8, "1500", "1980", "100")}), ours, 1, limits);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_NE(why[0].find("SM clock 1500"), std::string::npos) << why[0];
  // 8 CPUs, 2 busy ranks: up to 2 + 0.5 * 8 = 6 is the gate's own.
  EXPECT_TRUE(
      contamination(nlohmann::json::array({sample(6.0, 8, "1980", "1980", "100")}), ours, 2, limits)
          .empty());
  why = contamination(nlohmann::json::array({sample(6.1, 8, "1980", "1980", "100")}), ours, 2,
                      limits);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_NE(why[0].find("host load"), std::string::npos) << why[0];
  // Host backends record no device figures: only the load is checked.
  EXPECT_TRUE(contamination(nlohmann::json::array({{{"load_average", {1, 1, 1}},
                                                    {"online_cpus", 2},
                                                    {"device", nlohmann::json::object()}}}),
                            ours, 1, limits)
                  .empty());

  auto f = figures(1000, 1000, kShares, kShares);
  f.coloc.contamination = {"1 foreign GPU process(es) (pids 777)"};
  const auto v = decide(f);
  EXPECT_FALSE(v.passed);
  EXPECT_FALSE(v.stop);
  EXPECT_NE(v.reason.find("co-located phase contaminated: 1 foreign"), std::string::npos)
      << v.reason;
}

nlohmann::json verdict_for(const std::string& host, std::vector<std::string> uuids,
                           nlohmann::json allowed, const std::string& created) {
  return {{"backend", "native"},
          {"passed", !allowed.is_null()},
          {"allowed_regime", allowed},
          {"created_utc", created},
          {"family_table", {{"sha256", std::string(64, 'f')}}},
          {"nodes", {{{"host", host}, {"gpu_uuids", uuids}, {"allowed_regime", allowed}}}}};
}

TEST(GateGates, AVerdictMustMatchBackendNodeFamilyTableAndAge) {
  const auto now = *parse_utc("2026-12-01T12:00:00Z");
  const GateRequirement req{"native", std::string(64, 'f'), "node7", {"GPU-a", "GPU-b"}, 24, now};
  const auto good = verdict_for("node7", {"GPU-b", "GPU-a"}, 2, "2026-12-01T00:00:00Z");
  EXPECT_EQ(check_verdict(good, req).regime, 2) << check_verdict(good, req).problem;
  const auto problem = [&](const std::optional<nlohmann::json>& v) {
    const auto d = check_verdict(v, req);
    EXPECT_FALSE(d.regime);
    return d.problem;
  };
  EXPECT_NE(problem(std::nullopt).find("no co-location verdict"), std::string::npos);
  auto v = good;
  v["backend"] = "cublas_grouped";
  EXPECT_NE(problem(v).find("backend cublas_grouped"), std::string::npos);
  v = good;
  v["family_table"]["sha256"] = std::string(64, 'e');
  EXPECT_NE(problem(v).find("operator-family table"), std::string::npos);
  v = good;
  v["created_utc"] = "2026-11-30T11:59:59Z";
  EXPECT_NE(problem(v).find("older than the maximum of 24 hours"), std::string::npos) << problem(v);
  v["created_utc"] = "yesterday";
  EXPECT_NE(problem(v).find("created_utc"), std::string::npos);
  EXPECT_NE(problem(verdict_for("node8", {"GPU-a", "GPU-b"}, 2, "2026-12-01T00:00:00Z"))
                .find("no entry for host node7"),
            std::string::npos);
  EXPECT_NE(problem(verdict_for("node7", {"GPU-a", "GPU-c"}, 2, "2026-12-01T00:00:00Z"))
                .find("UUIDs differ"),
            std::string::npos);
  EXPECT_NE(problem(verdict_for("node7", {"GPU-a", "GPU-b"}, nullptr, "2026-12-01T00:00:00Z"))
                .find("gate stopped"),
            std::string::npos);
}

TEST(GateGates, ExitStatusOfAVerdict) {
  auto v = verdict_for("n", {}, 4, "2026-12-01T00:00:00Z");
  EXPECT_EQ(gate_exit_status(v), kGatePassed);
  v = verdict_for("n", {}, nullptr, "2026-12-01T00:00:00Z");
  EXPECT_EQ(gate_exit_status(v), kGateStopped);
  v["nodes"][0]["unclassifiable"] = true;
  EXPECT_EQ(gate_exit_status(v), kGateUnclassified);
}

TEST(ColocationGate, EightThenFourThenStop) {
  std::vector<int> measured;
  auto fail_all = [&](int r) {
    measured.push_back(r);
    auto f = figures(1000, 900, kShares, kShares);
    f.regime = r;
    return f;
  };
  auto g = run_gate({8, 4}, fail_all);
  EXPECT_EQ(measured, (std::vector<int>{8, 4}));
  EXPECT_FALSE(g.allowed.has_value()) << "never a smaller regime silently";
  measured.clear();
  auto pass_at_4 = [&](int r) {
    measured.push_back(r);
    auto f = figures(1000, r == 8 ? 900 : 1000, kShares, kShares);
    f.regime = r;
    return f;
  };
  g = run_gate({8, 4}, pass_at_4);
  EXPECT_EQ(g.allowed, 4);
  measured.clear();
  g = run_gate({8, 4}, [&](int r) {
    measured.push_back(r);
    auto f = figures(1000, 1000, kShares, kShares);
    f.regime = r;
    return f;
  });
  EXPECT_EQ(g.allowed, 8);
  EXPECT_EQ(measured, (std::vector<int>{8})) << "stops at the first passing regime";
  EXPECT_EQ(candidate_regimes(8), (std::vector<int>{8, 4}));
  EXPECT_EQ(candidate_regimes(6), (std::vector<int>{4}));
  EXPECT_EQ(candidate_regimes(2), (std::vector<int>{2}));
  EXPECT_TRUE(candidate_regimes(1).empty());
}

TEST(FamilyTable, PriorityOrderFirstMatchWinsUnmatchedIsOther) {
  const FamilyTable t(
      "version: 3\nfamilies:\n  - {name: a, pattern: \"gemm_silu\"}\n  - {name: b, pattern: "
      "\"gemm\"}\n");
  EXPECT_EQ(t.classify("fused_gemm_silu_kernel"), "a");
  EXPECT_EQ(t.classify("sm90_gemm"), "b");
  EXPECT_EQ(t.classify("reduce"), "other");
  EXPECT_EQ(t.version(), 3);
  EXPECT_THROW(FamilyTable("version: 1\nfamilies:\n  - {name: x, pattern: \"(\"}\n"),
               std::invalid_argument);
  EXPECT_THROW(FamilyTable("version: 1\nfamilies:\n  - {name: other, pattern: \"a\"}\n"),
               std::invalid_argument);
  const auto refusal = [](const std::string& yaml) {
    try {
      (void)FamilyTable(yaml);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal("version: 1\nfamilies: [\n"),
            "operator family table: malformed YAML at line 3");
  EXPECT_EQ(refusal("version: 1\nfamilies: {a: b}\n"),
            "operator family table needs `version` and a `families` list");
  EXPECT_EQ(refusal("version: 1\nfamilies:\n  - {name: a}\n"),
            "operator family entries need `name` and `pattern`");
  const auto shares = family_shares(t, {{"gemm_silu", 3.0}, {"x_gemm", 1.0}, {"memcpy", 4.0}});
  EXPECT_DOUBLE_EQ(shares.shares.at("a"), 0.375);
  EXPECT_DOUBLE_EQ(shares.other(), 0.5);
  EXPECT_FALSE(shares.classifiable());
}

TEST(FamilyTable, BuiltinTableClassifiesOurKernelsAndHashesTheCommittedFile) {
  const auto& t = FamilyTable::builtin();
  EXPECT_EQ(t.sha256(), sha256_hex(read_file(std::string(HARNESS_SOURCE_DIR) +
                                             "/ranks/operator_families.yaml")));
  EXPECT_EQ(t.classify("softmax_topk"), "routing");
  EXPECT_EQ(t.classify("permute_rows"), "permute_combine");
  // The native backend's kernels, as CUPTI names them (mangled).
  EXPECT_EQ(
      t.classify("_ZN3moe4cuda50_GLOBAL__N__4f_native_experts_cu_11plan_routesEPKiPKfiiiiiiPi"),
      "permute_combine");
  EXPECT_EQ(t.classify("_ZN3moe4cuda50_GLOBAL__N__4f_native_experts_cu_14scatter_routesEPKiiiiS3_"),
            "permute_combine");
  EXPECT_EQ(t.classify("_ZN3moe4cuda50_GLOBAL__N__4f_native_experts_cu_13combine_lanesEPK13__nv"),
            "permute_combine");
  EXPECT_EQ(t.classify("_ZN3moe4cuda50_GLOBAL__N__4f_native_experts_cu_17expert_gemm_wgmmaINS1_11"),
            "gemm");
  // One token's two launches (the second also sums the lanes) count as GEMMs.
  EXPECT_EQ(t.classify("_ZN3moe4cuda50_GLOBAL__N__4f_native_experts_cu_21expert_gemm_one_"
                       "tokenILb0ELi3EEEvNS1_12OneTokenArgsE"),
            "gemm");
  EXPECT_EQ(t.classify("silu_and_mul"), "activation");
  EXPECT_EQ(t.classify("nvjet_sm90_tst_128x256"), "gemm");
  EXPECT_EQ(t.classify("ncclDevKernel_AllReduce_Sum_bf16_RING_LL"), "communication");
  EXPECT_EQ(t.classify("memcpy2"), "memory");
  EXPECT_EQ(t.classify("cpu_experts"), "gemm");
  EXPECT_EQ(t.classify("something_else"), "other");
}

}  // namespace
}  // namespace moe
