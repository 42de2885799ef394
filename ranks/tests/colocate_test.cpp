#include "ranks/colocate.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/files.h"
#include "ranks/families.h"

namespace moe {
namespace {

RegimeFigures figures(double t_solo, double t_coloc, std::map<std::string, double> solo,
                      std::map<std::string, double> coloc) {
  RegimeFigures f;
  f.regime = 8;
  f.throughput_solo = t_solo;
  f.throughput_coloc = t_coloc;
  f.solo.shares = std::move(solo);
  f.coloc.shares = std::move(coloc);
  f.solo.total_us = f.coloc.total_us = 1;
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
  EXPECT_NE(v.reason.find("unclassifiable"), std::string::npos);
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
  EXPECT_EQ(t.classify("silu_and_mul"), "activation");
  EXPECT_EQ(t.classify("nvjet_sm90_tst_128x256"), "gemm");
  EXPECT_EQ(t.classify("ncclDevKernel_AllReduce_Sum_bf16_RING_LL"), "communication");
  EXPECT_EQ(t.classify("memcpy2"), "memory");
  EXPECT_EQ(t.classify("cpu_experts"), "gemm");
  EXPECT_EQ(t.classify("something_else"), "other");
}

}  // namespace
}  // namespace moe
