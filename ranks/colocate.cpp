#include "ranks/colocate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include "comm/collectives.h"
#include "core/checked_call.h"
#include "core/files.h"
#include "core/planner.h"
#include "core/roofline.h"
#include "core/timestamp.h"
#include "ranks/protocol.h"
#include "ranks/rank_context.h"
#include "store/colocation_file.h"
#include "store/mpi_gather.h"

namespace moe {

using nlohmann::json;

RegimeVerdict decide(const RegimeFigures& f) {
  RegimeVerdict v;
  v.regime = f.regime;
  v.throughput_ratio = f.throughput_solo > 0 ? f.throughput_coloc / f.throughput_solo : 0.0;
  std::vector<std::pair<std::string, double>> solo(f.solo.shares.begin(), f.solo.shares.end());
  std::erase_if(solo, [](const auto& p) { return p.first == "other"; });
  std::sort(solo.begin(), solo.end(), [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  });
  if (solo.size() > 3) solo.resize(3);
  bool shares_ok = true;
  for (const auto& [family, share] : solo) {
    auto it = f.coloc.shares.find(family);
    const double c = it == f.coloc.shares.end() ? 0.0 : it->second;
    FamilyCheck fc{family, share, c, std::fabs(c - share),
                   std::fabs(c - share) < kColocationTolerance};
    shares_ok = shares_ok && fc.pass;
    v.f3.push_back(fc);
  }
  const bool throughput_ok = std::fabs(v.throughput_ratio - 1.0) < kColocationTolerance;
  if (!f.solo.classifiable() || !f.coloc.classifiable())
    v.reason = "unclassifiable window (more than 30% of kernel time in `other`)";
  else if (!throughput_ok)
    v.reason = "throughput changed by " + std::to_string(100 * (v.throughput_ratio - 1)) + "%";
  else if (!shares_ok)
    v.reason = "an F3 family share moved by 3 points or more";
  v.passed = v.reason.empty();
  return v;
}

std::vector<int> candidate_regimes(int ranks_on_node) {
  std::vector<int> out;
  for (int r : {8, 4})
    if (r <= ranks_on_node) out.push_back(r);
  if (out.empty() && ranks_on_node >= 2) out.push_back(ranks_on_node);
  return out;
}

GateVerdict run_gate(const std::vector<int>& regimes,
                     const std::function<RegimeFigures(int)>& measure) {
  GateVerdict g;
  for (int r : regimes) {
    g.tried.push_back(decide(measure(r)));
    if (g.tried.back().passed) {
      g.allowed = r;
      break;
    }
  }
  return g;
}

std::optional<int> allowed_regime(const json& verdict) {
  if (!verdict.contains("allowed_regime") || verdict["allowed_regime"].is_null())
    return std::nullopt;
  return verdict["allowed_regime"].get<int>();
}

namespace {

using clock_type = std::chrono::steady_clock;
constexpr int kDoneTag = 7701, kStartedTag = 7702;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

json environment(const Backend& b) {
  double l[3] = {0, 0, 0};
  getloadavg(l, 3);
  return {{"utc", utc_now()}, {"load_average", {l[0], l[1], l[2]}}, {"device", b.live_state()}};
}

// One reference MoE forward of the target cell: its components at a fixed reference point.
class ReferenceForward {
 public:
  ReferenceForward(Backend& backend, const JobSpec& job, const Target& t, std::uint64_t seed) {
    const auto& g = job.geometry;
    const TokenDomains dom(t.tp, t.dp, t.sp);
    const std::int64_t n = std::min<std::int64_t>(256, job.max_num_batched_tokens);
    const std::int64_t rows = dom.local_rows(n), expert_rows = dom.uniform_expert_rows(n);
    const auto own = ExpertOwnership::of(g, t);
    // Expected distinct local experts and the balanced assignment total, clamped to feasibility.
    std::int64_t a = std::clamp<std::int64_t>(
        std::llround(expected_distinct_experts(g, own.local_experts, expert_rows)), 1,
        own.local_experts);
    std::optional<MRange> m;
    for (; a <= own.local_experts &&
           !(m = feasible_assignments(expert_rows, a, own.local_experts, g.experts, g.top_k));
         ++a) {
    }
    if (!m) throw std::runtime_error("no feasible reference experts point");
    const auto balanced = std::clamp<std::int64_t>(
        std::llround(static_cast<double>(expert_rows) * g.top_k * own.local_experts / g.experts),
        m->lo, m->hi);
    for (auto c : component_set(g, t)) {
      WorkloadSpec s{
          g,
          t,
          c,
          c == Component::experts ? GridPoint{expert_rows, a, balanced} : GridPoint{rows, 0, 0},
          c == Component::experts ? 2 : 1,
          mix_seed({seed, static_cast<std::uint64_t>(c)})};
      auto w = backend.make(s, backend.make_weights(s));
      for (double e : w->verify())
        if (e > backend.tolerance())
          throw std::runtime_error("reference workload " + std::string(to_string(c)) +
                                   " failed its correctness check");
      parts_.push_back({"cpu_" + std::string(to_string(c)), std::move(w)});
      point_[std::string(to_string(c))] = s.point;
    }
  }

  void run(int i, ForwardTimer* timer) {
    for (auto& [label, w] : parts_) {
      if (timer) timer->begin(label);
      w->forward(i % 2);
      if (timer) timer->end();
    }
  }
  void synchronize() {
    for (auto& [label, w] : parts_) w->synchronize();
  }
  [[nodiscard]] json describe() const {
    json j = json::object();
    for (const auto& [c, p] : point_) j[c] = {p.tokens, p.activated, p.assignments};
    return j;
  }

 private:
  std::vector<std::pair<std::string, std::unique_ptr<Workload>>> parts_;
  std::map<std::string, GridPoint> point_;
};

// Idle ranks wait for the end of a phase without spinning on a core.
void wait_for_done(MPI_Comm node) {
  int flag = 0, msg = 0;
  MPI_Request req;
  HARNESS_CHECK_MPI(MPI_Irecv(&msg, 1, MPI_INT, 0, kDoneTag, node, &req));
  while (!flag) {
    HARNESS_CHECK_MPI(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
    if (!flag) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void announce_done(MPI_Comm node, int node_size) {
  int msg = 1;
  for (int r = 1; r < node_size; ++r)
    HARNESS_CHECK_MPI(MPI_Send(&msg, 1, MPI_INT, r, kDoneTag, node));
}

// Background rank: closed-loop component forwards and collectives among the background ranks
// until the target announces the end of the phase.
void background_loop(RankContext& ctx, ReferenceForward& work, MPI_Comm bg, int bg_rank) {
  auto comm = ctx.gpu() ? make_nccl_communicator(bg, ctx.device) : make_mpi_communicator(bg);
  const std::int64_t bytes = ctx.gpu() ? (32LL << 20) : (256LL << 10);
  int stop_msg = 0, stop = 0, arrived = 0;
  MPI_Request req = MPI_REQUEST_NULL;
  if (bg_rank == 0)
    HARNESS_CHECK_MPI(MPI_Irecv(&stop_msg, 1, MPI_INT, 0, kDoneTag, ctx.node, &req));
  for (long i = 0; !stop; ++i) {
    work.run(static_cast<int>(i), nullptr);
    work.synchronize();
    comm->run(CollectiveOp::all_reduce, bytes);
    if (i == 0 && bg_rank == 0) {
      int started = 1;
      HARNESS_CHECK_MPI(MPI_Send(&started, 1, MPI_INT, 0, kStartedTag, ctx.node));
    }
    if (bg_rank == 0) HARNESS_CHECK_MPI(MPI_Test(&req, &arrived, MPI_STATUS_IGNORE));
    int mine = arrived;
    HARNESS_CHECK_MPI(MPI_Allreduce(&mine, &stop, 1, MPI_INT, MPI_MAX, bg));
  }
}

struct TargetFigures {
  double throughput = 0;
  FamilyShares shares;
  json detail;
};

// Target rank: calibrate, then the clean interval (throughput), then the family-share window.
TargetFigures measure_target(RankContext& ctx, ReferenceForward& work, const FamilyTable& table,
                             const ColocateOptions& o) {
  TargetFigures f;
  const json before = environment(*ctx.backend);
  auto t = clock_type::now();
  long calib = 0;
  while (seconds_since(t) < o.calibration_s) {
    work.run(static_cast<int>(calib++), nullptr);
    work.synchronize();
  }
  const double rate = static_cast<double>(calib) / seconds_since(t);
  const long forwards = std::max<long>(10, std::lround(rate * o.interval_s));
  t = clock_type::now();
  for (long i = 0; i < forwards; ++i) work.run(static_cast<int>(i), nullptr);
  work.synchronize();
  const double elapsed = seconds_since(t);
  f.throughput = static_cast<double>(forwards) / elapsed;
  const json after = environment(*ctx.backend);
  (void)ctx.timer->collect();
  for (int i = 0; i < o.window_forwards; ++i) work.run(i, ctx.timer.get());
  work.synchronize();
  std::vector<std::pair<std::string, double>> acts;
  for (const auto& r : ctx.timer->collect())
    acts.insert(acts.end(), r.activities.begin(), r.activities.end());
  f.shares = family_shares(table, acts);
  f.detail = {{"calibration_forwards_per_s", rate},
              {"interval_forwards", forwards},
              {"interval_s", elapsed},
              {"throughput_per_s", f.throughput},
              {"window_forwards", o.window_forwards},
              {"window_activities", acts.size()},
              {"shares", f.shares.shares},
              {"other_share", f.shares.other()},
              {"environment_before", before},
              {"environment_after", after}};
  return f;
}

json regime_json(const RegimeVerdict& v, const json& solo, const json& coloc) {
  json f3 = json::array();
  for (const auto& c : v.f3)
    f3.push_back({{"family", c.family},
                  {"solo", c.solo},
                  {"colocated", c.coloc},
                  {"delta", c.delta},
                  {"pass", c.pass}});
  return {{"regime", v.regime}, {"passed", v.passed}, {"throughput_ratio", v.throughput_ratio},
          {"f3", f3},           {"reason", v.reason}, {"solo", solo},
          {"colocated", coloc}};
}

}  // namespace

json colocate(MPI_Comm comm, const JobSpec& job, const ColocateOptions& o) {
  auto ctx = make_rank_context(comm, job.backend, o.keep_launcher_binding);
  const auto& table = FamilyTable::builtin();
  const auto targets = job.targets();
  const Target target = targets.front();
  ReferenceForward work(*ctx->backend, job, target,
                        mix_seed({job.seed, 0xc010ULL, static_cast<std::uint64_t>(ctx->rank)}));
  HARNESS_CHECK_MPI(MPI_Barrier(comm));

  std::optional<TargetFigures> solo;
  json solo_json;
  std::map<int, json> coloc_json;
  const auto measure = [&](int regime) -> RegimeFigures {
    // Solo once (everything else on the node idle), then this regime's co-located run.
    if (!solo) {
      if (ctx->node_rank == 0) {
        solo = measure_target(*ctx, work, table, o);
        announce_done(ctx->node, ctx->node_size);
      } else {
        wait_for_done(ctx->node);
        solo = TargetFigures{};
      }
      solo_json = solo->detail;
    }
    MPI_Comm bg = MPI_COMM_NULL;
    const bool background = ctx->node_rank >= 1 && ctx->node_rank < regime;
    HARNESS_CHECK_MPI(
        MPI_Comm_split(ctx->node, background ? 1 : MPI_UNDEFINED, ctx->node_rank, &bg));
    TargetFigures co;
    if (ctx->node_rank == 0) {
      int started = 0;
      if (regime > 1)
        HARNESS_CHECK_MPI(
            MPI_Recv(&started, 1, MPI_INT, 1, kStartedTag, ctx->node, MPI_STATUS_IGNORE));
      co = measure_target(*ctx, work, table, o);
      announce_done(ctx->node, ctx->node_size);
    } else if (background) {
      int bg_rank = 0;
      HARNESS_CHECK_MPI(MPI_Comm_rank(bg, &bg_rank));
      background_loop(*ctx, work, bg, bg_rank);
    } else {
      wait_for_done(ctx->node);
    }
    if (bg != MPI_COMM_NULL) HARNESS_CHECK_MPI(MPI_Comm_free(&bg));
    HARNESS_CHECK_MPI(MPI_Barrier(ctx->node));
    // Everyone on the node needs the figures to agree on the decision.
    double t[2] = {solo->throughput, co.throughput};
    HARNESS_CHECK_MPI(MPI_Bcast(t, 2, MPI_DOUBLE, 0, ctx->node));
    const auto sj = json::parse(broadcast_string(
        ctx->node, ctx->node_rank == 0
                       ? json({{"s", solo->shares.shares}, {"c", co.shares.shares}}).dump()
                       : ""));
    RegimeFigures f{regime, t[0], t[1], {}, {}};
    f.solo.shares = sj["s"].get<std::map<std::string, double>>();
    f.coloc.shares = sj["c"].get<std::map<std::string, double>>();
    f.solo.total_us = f.coloc.total_us = 1;
    coloc_json[regime] = co.detail;
    if (ctx->rank == 0 && !o.quiet)
      std::cerr << "colocate: node of rank 0, " << regime << "-way: T_solo " << t[0]
                << "/s, T_coloc " << t[1] << "/s\n";
    return f;
  };
  const auto regimes = candidate_regimes(ctx->node_size);
  GateVerdict gate;
  json node_result;
  if (regimes.empty()) {
    // A node with one rank has nothing to co-locate: its cells run alone.
    (void)measure(1);
    node_result = {{"ranks_on_node", 1},
                   {"allowed_regime", 1},
                   {"note", "one rank on this node: solo only (measured twice: solo and repeat)"},
                   {"solo", solo_json},
                   {"repeat", coloc_json[1]}};
  } else {
    gate = run_gate(regimes, measure);
    json tried = json::array();
    for (const auto& v : gate.tried)
      tried.push_back(regime_json(v, solo_json, coloc_json[v.regime]));
    node_result = {
        {"ranks_on_node", ctx->node_size},
        {"regimes_tried", tried},
        {"allowed_regime", gate.allowed ? json(*gate.allowed) : json(nullptr)},
        {"largest_available_regime", regimes.front()},
        {"note", regimes.front() < 8
                     ? "fewer than 8 ranks on this node: the largest available regime was used"
                     : ""}};
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  node_result["host"] = host;
  node_result["target"] = {{"tp", target.tp},
                           {"dp", target.dp},
                           {"ep", target.ep},
                           {"rank", target.rank},
                           {"sp", target.sp}};
  node_result["reference_point"] = work.describe();
  node_result["gpu_numa_locality"] = ctx->locality;
  node_result["cpu_binding"] = ctx->binding.describe();

  // Node leaders report to rank 0.
  const auto reports = gather_strings(comm, ctx->node_rank == 0 ? node_result.dump() : "", 0);
  if (ctx->rank != 0) return nullptr;
  json nodes = json::array();
  std::optional<int> allowed;
  bool stopped = false;
  for (const auto& report : reports)
    if (!report.empty()) {
      auto n = json::parse(report);
      if (n["allowed_regime"].is_null())
        stopped = true;
      else
        allowed = std::min(allowed.value_or(1 << 30), n["allowed_regime"].get<int>());
      nodes.push_back(std::move(n));
    }
  const bool cpu = !ctx->gpu();
  json verdict = {{"schema", "colocation"},
                  {"passed", !stopped},
                  {"allowed_regime", stopped ? json(nullptr) : json(*allowed)},
                  {"backend", ctx->backend->name()},
                  {"timing", ctx->timer->method()},
                  {"cpu_run", cpu},
                  {"label", cpu ? "CPU RUN: host-clock figures on the cpu_reference backend; not a "
                                  "GPU co-location verdict"
                                : "GPU run"},
                  {"tolerance", kColocationTolerance},
                  {"family_table",
                   {{"version", table.version()},
                    {"sha256", table.sha256()},
                    {"max_other_share", kMaxOtherShare}}},
                  {"geometry", job.geometry.name},
                  {"created_utc", utc_now()},
                  {"nodes", nodes}};
  write_colocation_file(o.out_dir, verdict, table.sha256());
  return verdict;
}

}  // namespace moe
