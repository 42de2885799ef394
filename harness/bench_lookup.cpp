// Lookup benchmark (not a test): builds a bundle with the planner's grid for Qwen3-30B-A3B
// TP1/DP2 rank 0 (times from the nominal roofline model; the values do not matter here), then
// reports the load time and uncached/cached experts queries per second.
//   build/harness/harness-bench-lookup [OUT_DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "bundle/bundle_meta.h"
#include "bundle/format.h"
#include "core/contract.h"
#include "core/files.h"
#include "core/planner.h"
#include "lookup/lookup.h"

using namespace moe;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  const fs::path root = argc > 1 ? argv[1] : fs::temp_directory_path() / "harness-bench-lookup";
  auto job = load_job_file(std::string(HARNESS_SOURCE_DIR) + "/jobs/qwen3-30b-a3b.yaml");
  job.dp = {2};
  job.ranks = {0};
  const auto plan = make_plan(job);
  const auto& t = plan.targets.front();
  std::string csv = std::string(bundle_format::kComponentsHeader) + "\n";
  std::vector<GridPoint> expert_points;
  for (const auto& g : t.components)
    for (const auto& p : g.points) {
      const double us = 1e6 * estimate_forward_seconds(job.geometry, g.component, p, plan.device);
      char line[160];
      std::snprintf(line, sizeof(line), "%s,eager,%lld,%lld,%lld,%.4f\n",
                    std::string(to_string(g.component)).c_str(), static_cast<long long>(p.tokens),
                    static_cast<long long>(p.activated), static_cast<long long>(p.assignments), us);
      csv += line;
      if (g.component == Component::experts && p.activated > 0) expert_points.push_back(p);
    }
  const auto variant = root / "bench";
  fs::remove_all(variant);
  const auto rel = bundle_format::components_path(t.target);
  fs::create_directories(variant / "tp1" / fs::path(rel).parent_path());
  write_file_atomic(variant / "tp1" / rel, csv);
  BundleMeta meta;
  meta.variant = "bench";
  const auto contract = Contract::of(plan, "nominal_roofline", "none", plan.device.l2_bytes);
  meta.add({t.target,
            rel,
            contract.component_table(contract.targets.front()),
            "",
            {{"table_sha256", sha256_hex(csv)}},
            {}});
  save_bundle_meta(variant, meta);

  DeploymentKey dp2;
  dp2.dp = 2;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto uncached = Deployment::load(variant, dp2, 0);
  const double load_s = std::chrono::duration<double>(clock::now() - t0).count();

  // Queries: midpoints of random pairs of measured points with the same N (inside the support).
  std::mt19937 rng(1);
  std::uniform_int_distribution<std::size_t> pick(0, expert_points.size() - 1);
  std::vector<GridPoint> queries;
  while (queries.size() < 2000) {
    const auto& a = expert_points[pick(rng)];
    const auto& b = expert_points[pick(rng)];
    if (a.tokens != b.tokens) continue;
    queries.push_back(
        {a.tokens, (a.activated + b.activated) / 2, (a.assignments + b.assignments) / 2});
  }
  double sink = 0;
  int answered = 0;
  auto t1 = clock::now();
  for (const auto& q : queries) {
    try {
      sink += uncached.query(Component::experts, q.tokens, q.activated, q.assignments).time_us;
      ++answered;
    } catch (const LookupError&) {
    }
  }
  const double uncached_s = std::chrono::duration<double>(clock::now() - t1).count();
  auto cached = Deployment::load(variant, dp2, 4096);
  for (const auto& q : queries) try {
      sink += cached.query(Component::experts, q.tokens, q.activated, q.assignments).time_us;
    } catch (const LookupError&) {
    }
  const int reps = 50;
  t1 = clock::now();
  for (int r = 0; r < reps; ++r)
    for (const auto& q : queries) try {
        sink += cached.query(Component::experts, q.tokens, q.activated, q.assignments).time_us;
      } catch (const LookupError&) {
      }
  const double cached_s = std::chrono::duration<double>(clock::now() - t1).count();
  std::printf("lookup benchmark: Qwen3-30B-A3B TP1/DP2 rank 0, %zu expert points, %zu total rows\n",
              expert_points.size(),
              static_cast<std::size_t>(std::count(csv.begin(), csv.end(), '\n') - 1));
  std::printf("  load (parse, checksum, triangulate): %.3f s\n", load_s);
  std::printf("  uncached experts queries: %.0f /s (%d of %zu inside support)\n",
              queries.size() / uncached_s, answered, queries.size());
  std::printf("  cached experts queries:   %.0f /s  (checksum of answers %.3g)\n",
              reps * queries.size() / cached_s, sink);
  return 0;
}
