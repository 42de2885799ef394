// Lookup benchmark (not a test): builds a bundle with the planner's grid for Qwen3-30B-A3B
// TP1/DP2 rank 0 (times from the nominal roofline model; the values do not matter here), then
// reports the load time and uncached/cached experts queries per second.
//   build/harness/harness-bench-lookup [OUT_DIR]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <vector>

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
  std::map<Component, std::vector<TableRow>> published;
  std::vector<GridPoint> expert_points;
  for (const auto& g : t.components)
    for (const auto& p : g.points) {
      const double us = 1e6 * estimate_forward_seconds(job.geometry, g.component, p, plan.device);
      char line[160];
      std::snprintf(line, sizeof(line), "%s,eager,%lld,%lld,%lld,%.4f\n",
                    std::string(to_string(g.component)).c_str(), static_cast<long long>(p.tokens),
                    static_cast<long long>(p.activated), static_cast<long long>(p.assignments), us);
      csv += line;
      published[g.component].push_back({p, us});
      if (g.component == Component::experts && p.activated > 0) expert_points.push_back(p);
    }
  const auto variant = root / "bench";
  fs::remove_all(variant);
  const auto rel = bundle_format::components_path(t.target);
  const auto table_dir = variant / "tp1" / fs::path(rel).parent_path();
  fs::create_directories(table_dir);
  write_file_atomic(variant / "tp1" / rel, csv);
  const auto contract = Contract::of(plan, "nominal_roofline", "none", plan.device.l2_bytes);
  const auto& target = contract.targets.front();
  // The experts rows' triangulation, stored beside the table as the publisher stores it (the
  // reader interpolates over it and refuses a table without one).
  const auto triangulation =
      stored_triangulation(ComponentTables(published, {job.geometry.experts, job.geometry.top_k,
                                                       target.ownership.local_experts}))
          .value();
  write_file_atomic(table_dir / bundle_format::kTriangulationFile, triangulation.text);
  BundleMeta meta;
  meta.variant = "bench";
  meta.add({t.target,
            rel,
            contract.component_table(target),
            "",
            {{"table_sha256", sha256_hex(csv)}, {"triangulation", triangulation.coverage}},
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
  // Each query's answer (NaN: refused), uncached and then cached: the cache must give the same
  // bits, and most midpoints lie inside the support; otherwise the figures below mean nothing.
  const auto answer = [&](Deployment& d, const GridPoint& q) {
    try {
      return d.query(Component::experts, q.tokens, q.activated, q.assignments).time_us;
    } catch (const LookupError&) {
      return std::nan("");
    }
  };
  std::vector<double> answers(queries.size());
  auto t1 = clock::now();
  for (std::size_t i = 0; i < queries.size(); ++i) answers[i] = answer(uncached, queries[i]);
  const double uncached_s = std::chrono::duration<double>(clock::now() - t1).count();
  const auto answered =
      std::count_if(answers.begin(), answers.end(), [](double v) { return !std::isnan(v); });
  auto cached = Deployment::load(variant, dp2, 4096);
  const int reps = 50;
  double sink = 0;
  for (int r = -1; r < reps; ++r) {  // the untimed pass -1 fills the cache
    if (r == 0) t1 = clock::now();
    for (std::size_t i = 0; i < queries.size(); ++i) {
      const double v = answer(cached, queries[i]);
      if (std::memcmp(&v, &answers[i], sizeof v) != 0) {
        std::fprintf(stderr, "harness-bench-lookup: the cached answer of query %zu differs\n", i);
        return 1;
      }
      sink += std::isnan(v) ? 0 : v;
    }
  }
  const double cached_s = std::chrono::duration<double>(clock::now() - t1).count();
  if (answered < static_cast<std::ptrdiff_t>(queries.size() * 9 / 10)) {
    std::fprintf(stderr, "harness-bench-lookup: only %td of %zu queries inside the support\n",
                 answered, queries.size());
    return 1;
  }
  std::printf("lookup benchmark: Qwen3-30B-A3B TP1/DP2 rank 0, %zu expert points, %zu total rows\n",
              expert_points.size(),
              static_cast<std::size_t>(std::count(csv.begin(), csv.end(), '\n') - 1));
  std::printf("  load (parse, checksums, stored triangulation): %.3f s\n", load_s);
  std::printf("  uncached experts queries: %.0f /s (%td of %zu inside support)\n",
              queries.size() / uncached_s, answered, queries.size());
  std::printf("  cached experts queries:   %.0f /s, the same answers (sum %.3g)\n",
              reps * queries.size() / cached_s, sink);
  return 0;
}
