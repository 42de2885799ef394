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
#include <set>
#include <sstream>
#include <thread>

#include "comm/collectives.h"
#include "core/checked_call.h"
#include "core/files.h"
#include "core/planner.h"
#include "core/roofline.h"
#include "core/statistics.h"
#include "core/timestamp.h"
#include "ranks/elapsed.h"
#include "ranks/protocol.h"
#include "ranks/rank_context.h"
#include "store/campaign.h"
#include "store/colocation_file.h"
#include "store/mpi_gather.h"

namespace moe {

using nlohmann::json;

PhaseFigures combine_intervals(const std::vector<IntervalFigures>& intervals) {
  if (intervals.empty()) throw std::invalid_argument("a gate phase needs at least one interval");
  PhaseFigures p;
  std::vector<double> t;
  std::map<std::string, std::vector<double>> shares;
  std::map<std::string, double> other_us;
  for (const auto& i : intervals) {
    t.push_back(i.throughput);
    for (const auto& [family, share] : i.shares) shares[family];
    for (const auto& [name, us] : i.other_us) other_us[name] += us;
  }
  double total_us = 0;
  for (const auto& i : intervals) {
    for (auto& [family, values] : shares) {
      const auto it = i.shares.find(family);
      values.push_back(it == i.shares.end() ? 0.0 : it->second);  // absent from a window: 0
    }
  }
  p.throughput = median(t);
  p.throughput_min = *std::min_element(t.begin(), t.end());
  p.throughput_max = *std::max_element(t.begin(), t.end());
  for (const auto& [family, values] : shares) p.shares.shares[family] = median(values);
  p.shares.total_us = 1;
  for (const auto& [name, us] : other_us) total_us += us;
  // Unmatched kernels as a share of the `other` median: scaled so the list adds up to it.
  std::vector<std::pair<std::string, double>> unmatched(other_us.begin(), other_us.end());
  std::sort(unmatched.begin(), unmatched.end(), [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  });
  if (unmatched.size() > 20) unmatched.resize(20);
  for (auto& [name, us] : unmatched) us = total_us > 0 ? us / total_us * p.shares.other() : 0.0;
  p.unmatched = std::move(unmatched);
  return p;
}

std::vector<std::string> contamination(const json& samples, const std::vector<long>& node_pids,
                                       int busy_ranks, const ContaminationLimits& limits) {
  std::set<std::string> found;
  for (const auto& s : samples) {
    const auto& device = s.value("device", json::object());
    const auto number = [&](const char* key) -> std::optional<double> {
      if (!device.contains(key)) return std::nullopt;
      const auto& v = device[key];
      return v.is_string() ? std::stod(v.get<std::string>()) : v.get<double>();
    };
    const auto clock = number("sm_clock_mhz"), max_clock = number("sm_clock_max_mhz");
    if (clock && max_clock && *max_clock > 0 && *clock < limits.min_clock_fraction * *max_clock)
      found.insert("SM clock " + std::to_string(std::lround(*clock)) + " MHz below " +
                   std::to_string(std::lround(100 * limits.min_clock_fraction)) + "% of its " +
                   std::to_string(std::lround(*max_clock)) + " MHz maximum");
    if (device.contains("gpu_processes")) {
      std::vector<long> on_gpu;
      std::stringstream list(device["gpu_processes"].get<std::string>());
      for (std::string pid; std::getline(list, pid, ',');)
        if (!pid.empty()) on_gpu.push_back(std::stol(pid));
      std::vector<long> foreign;
      for (long pid : on_gpu)
        if (std::find(node_pids.begin(), node_pids.end(), pid) == node_pids.end())
          foreign.push_back(pid);
      // In a container the driver may list host-namespace pids that match none of ours: then
      // only the count can tell, and one process (the rank that owns the GPU) is ours.
      const bool comparable = foreign.size() < on_gpu.size();
      const std::size_t extra = comparable ? foreign.size() : on_gpu.size() - 1;
      if (!on_gpu.empty() && extra > 0) {
        std::string pids;
        for (long pid : foreign) pids += (pids.empty() ? "" : ",") + std::to_string(pid);
        found.insert(std::to_string(extra) + " foreign GPU process(es) (" +
                     (comparable ? "pids " + pids : "by count; pids not comparable: " + pids) +
                     ")");
      }
    }
    const auto& load = s.value("load_average", json::array());
    const int cpus = s.value("online_cpus", 0);
    if (!load.empty() && cpus > 0) {
      const double foreign_load = load[0].get<double>() - busy_ranks;
      if (foreign_load > limits.max_foreign_load_per_cpu * cpus)
        found.insert("host load " + std::to_string(load[0].get<double>()) + " exceeds the gate's " +
                     std::to_string(busy_ranks) + " busy ranks by more than " +
                     std::to_string(limits.max_foreign_load_per_cpu) + " per CPU of " +
                     std::to_string(cpus));
    }
  }
  return {found.begin(), found.end()};
}

RegimeVerdict decide(const RegimeFigures& f) {
  RegimeVerdict v;
  v.regime = f.regime;
  v.throughput_ratio = f.solo.throughput > 0 ? f.coloc.throughput / f.solo.throughput : 0.0;
  std::vector<std::pair<std::string, double>> solo(f.solo.shares.shares.begin(),
                                                   f.solo.shares.shares.end());
  std::erase_if(solo, [](const auto& p) { return p.first == "other"; });
  std::sort(solo.begin(), solo.end(), [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  });
  if (solo.size() > 3) solo.resize(3);
  bool shares_ok = true;
  for (const auto& [family, share] : solo) {
    auto it = f.coloc.shares.shares.find(family);
    const double c = it == f.coloc.shares.shares.end() ? 0.0 : it->second;
    FamilyCheck fc{family, share, c, std::fabs(c - share),
                   std::fabs(c - share) < kColocationTolerance};
    shares_ok = shares_ok && fc.pass;
    v.f3.push_back(fc);
  }
  const bool throughput_ok = std::fabs(v.throughput_ratio - 1.0) < kColocationTolerance;
  const auto joined = [](const std::vector<std::string>& reasons) {
    std::string out;
    for (const auto& r : reasons) out += (out.empty() ? "" : "; ") + r;
    return out;
  };
  if (!f.solo.shares.classifiable()) {
    v.stop = true;
    v.reason = "unclassifiable solo window (" + std::to_string(100 * f.solo.shares.other()) +
               "% of kernel time in `other`); top unmatched kernels:";
    for (const auto& [name, share] : f.solo.unmatched)
      v.reason += " " + name + " (" + std::to_string(100 * share) + "%)";
  } else if (!f.solo.contamination.empty()) {
    v.reason = "solo phase contaminated: " + joined(f.solo.contamination);
  } else if (!f.coloc.contamination.empty()) {
    v.reason = "co-located phase contaminated: " + joined(f.coloc.contamination);
  } else if (!f.coloc.shares.classifiable()) {
    v.reason = "unclassifiable co-located window (more than 30% of kernel time in `other`)";
  } else if (!throughput_ok) {
    v.reason = "throughput changed by " + std::to_string(100 * (v.throughput_ratio - 1)) + "%";
  } else if (!shares_ok) {
    v.reason = "an F3 family share moved by 3 points or more";
  }
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
    if (g.tried.back().stop) break;
  }
  return g;
}

int gate_exit_status(const json& verdict) {
  if (verdict.value("passed", false)) return kGatePassed;
  for (const auto& n : verdict.value("nodes", json::array()))
    if (n.value("unclassifiable", false)) return kGateUnclassified;
  return kGateStopped;
}

GateDecision check_verdict(const std::optional<json>& verdict, const GateRequirement& req) {
  const auto fail = [](std::string why) { return GateDecision{std::nullopt, std::move(why)}; };
  if (!verdict) return fail("there is no co-location verdict");
  const auto& v = *verdict;
  if (v.value("backend", "") != req.backend)
    return fail("the verdict is for backend " + v.value("backend", "?") + ", not " + req.backend);
  const auto family = v.value("family_table", json::object()).value("sha256", "");
  if (family != req.family_table_sha256)
    return fail("the verdict was made with another operator-family table (sha256 " +
                family.substr(0, 12) + ", this harness has " +
                req.family_table_sha256.substr(0, 12) + ")");
  const auto created = parse_utc(v.value("created_utc", ""));
  if (!created) return fail("the verdict records no valid created_utc");
  const double age_h = std::difftime(req.now, *created) / 3600.0;
  if (age_h > req.max_age_hours)
    return fail("the verdict is " + std::to_string(std::lround(age_h)) +
                " hours old, older than the maximum of " +
                std::to_string(std::lround(req.max_age_hours)) + " hours (--verdict-max-age)");
  const auto nodes = v.value("nodes", json::array());
  const auto node = std::find_if(nodes.begin(), nodes.end(),
                                 [&](const json& n) { return n.value("host", "") == req.host; });
  if (node == nodes.end()) return fail("the verdict holds no entry for host " + req.host);
  auto uuids = node->value("gpu_uuids", std::vector<std::string>{});
  std::sort(uuids.begin(), uuids.end());
  if (uuids != req.gpu_uuids)
    return fail("the verdict for host " + req.host +
                " was made on other GPUs (UUIDs differ: the node's GPUs changed)");
  if (!node->contains("allowed_regime") || (*node)["allowed_regime"].is_null())
    return fail("the co-location gate stopped on host " + req.host + " (no regime passed)");
  return {(*node)["allowed_regime"].get<int>(), ""};
}

namespace {

constexpr int kDoneTag = 7701, kStartedTag = 7702;

json environment(const Backend& b) {
  double l[3] = {0, 0, 0};
  getloadavg(l, 3);
  return {{"utc", utc_now()},
          {"load_average", {l[0], l[1], l[2]}},
          {"online_cpus", sysconf(_SC_NPROCESSORS_ONLN)},
          {"device", b.live_state()}};
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

// The phase figures as recorded in the verdict, and back (every rank of the node decides from
// the target rank's figures).
json phase_json(const PhaseFigures& p) {
  json unmatched = json::array();
  for (const auto& [name, share] : p.unmatched) unmatched.push_back({name, share});
  return {{"throughput_per_s", p.throughput},
          {"throughput_min_per_s", p.throughput_min},
          {"throughput_max_per_s", p.throughput_max},
          {"throughput_spread", p.spread()},
          {"shares", p.shares.shares},
          {"other_share", p.shares.other()},
          {"unmatched_kernels", unmatched},
          {"contamination", p.contamination}};
}

PhaseFigures phase_of(const json& j) {
  PhaseFigures p;
  p.throughput = j.at("throughput_per_s").get<double>();
  p.throughput_min = j.at("throughput_min_per_s").get<double>();
  p.throughput_max = j.at("throughput_max_per_s").get<double>();
  p.shares.shares = j.at("shares").get<std::map<std::string, double>>();
  p.shares.total_us = 1;
  for (const auto& u : j.at("unmatched_kernels"))
    p.unmatched.emplace_back(u[0].get<std::string>(), u[1].get<double>());
  p.contamination = j.at("contamination").get<std::vector<std::string>>();
  return p;
}

// Target rank, one phase: warm-up to steady state, then the profile's clean intervals, each a
// throughput run (closed loop, one synchronization at its end) followed by a family-share window;
// the environment is sampled after every throughput run, while the device is still hot.
json measure_target(RankContext& ctx, ReferenceForward& work, const FamilyTable& table,
                    const ColocateOptions& o, const std::vector<long>& node_pids, int busy_ranks) {
  const auto& profile = o.profile;
  auto t = SteadyClock::now();
  long warm = 0;
  while (seconds_since(t) < profile.warmup_s || warm < 3) {
    work.run(static_cast<int>(warm++), nullptr);
    work.synchronize();
  }
  double rate = static_cast<double>(warm) / seconds_since(t);
  const double interval_s = profile.measure_s / profile.intervals;
  std::vector<IntervalFigures> intervals;
  json per_interval = json::array(), samples = json::array({environment(*ctx.backend)});
  for (int i = 0; i < profile.intervals; ++i) {
    const long forwards = std::max<long>(10, std::lround(rate * interval_s));
    t = SteadyClock::now();
    for (long f = 0; f < forwards; ++f) work.run(static_cast<int>(f), nullptr);
    work.synchronize();
    const double elapsed = seconds_since(t);
    samples.push_back(environment(*ctx.backend));
    IntervalFigures figures;
    figures.throughput = rate = static_cast<double>(forwards) / elapsed;
    (void)ctx.timer->collect();
    for (int f = 0; f < profile.window_forwards; ++f) work.run(f, ctx.timer.get());
    work.synchronize();
    std::vector<std::pair<std::string, double>> acts;
    for (const auto& r : ctx.timer->collect())
      acts.insert(acts.end(), r.activities.begin(), r.activities.end());
    const auto shares = family_shares(table, acts);
    figures.shares = shares.shares;
    for (const auto& [name, us] : acts)
      if (table.classify(name) == "other") figures.other_us[name] += us;
    per_interval.push_back({{"forwards", forwards},
                            {"seconds", elapsed},
                            {"throughput_per_s", figures.throughput},
                            {"window_activities", acts.size()},
                            {"shares", figures.shares}});
    intervals.push_back(std::move(figures));
  }
  auto phase = combine_intervals(intervals);
  phase.contamination = contamination(samples, node_pids, busy_ranks, o.limits);
  auto j = phase_json(phase);
  j["warmup_forwards"] = warm;
  j["intervals"] = per_interval;
  j["busy_ranks"] = busy_ranks;
  j["environment"] = samples;
  return j;
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
  const auto start = SteadyClock::now();
  auto ctx = make_rank_context(comm, job.backend, o.keep_launcher_binding);
  const auto& table = FamilyTable::builtin();
  const auto targets = job.targets();
  const Target target = targets.front();
  ReferenceForward work(*ctx->backend, job, target,
                        mix_seed({job.seed, 0xc010ULL, static_cast<std::uint64_t>(ctx->rank)}));
  HARNESS_CHECK_MPI(MPI_Barrier(comm));

  std::vector<long> node_pids(static_cast<std::size_t>(ctx->node_size));
  const long pid = getpid();
  HARNESS_CHECK_MPI(MPI_Allgather(&pid, 1, MPI_LONG, node_pids.data(), 1, MPI_LONG, ctx->node));

  std::optional<json> solo_json;
  std::map<int, json> coloc_json;
  const auto measure = [&](int regime) -> RegimeFigures {
    // Solo once (everything else on the node idle), then this regime's co-located run.
    if (!solo_json) {
      json mine;
      if (ctx->node_rank == 0) {
        mine = measure_target(*ctx, work, table, o, node_pids, 1);
        announce_done(ctx->node, ctx->node_size);
      } else {
        wait_for_done(ctx->node);
      }
      solo_json = json::parse(broadcast_string(ctx->node, ctx->node_rank == 0 ? mine.dump() : ""));
    }
    MPI_Comm bg = MPI_COMM_NULL;
    const bool background = ctx->node_rank >= 1 && ctx->node_rank < regime;
    HARNESS_CHECK_MPI(
        MPI_Comm_split(ctx->node, background ? 1 : MPI_UNDEFINED, ctx->node_rank, &bg));
    json co;
    if (ctx->node_rank == 0) {
      int started = 0;
      if (regime > 1)
        HARNESS_CHECK_MPI(
            MPI_Recv(&started, 1, MPI_INT, 1, kStartedTag, ctx->node, MPI_STATUS_IGNORE));
      co = measure_target(*ctx, work, table, o, node_pids, regime);
      announce_done(ctx->node, ctx->node_size);
    } else if (background) {
      int bg_rank = 0;
      HARNESS_CHECK_MPI(MPI_Comm_rank(bg, &bg_rank));
      background_loop(*ctx, work, bg, bg_rank);
    } else {
      wait_for_done(ctx->node);
    }
    if (bg != MPI_COMM_NULL) HARNESS_CHECK_MPI(MPI_Comm_free(&bg));
    // Everyone on the node needs the figures to agree on the decision.
    co = json::parse(broadcast_string(ctx->node, ctx->node_rank == 0 ? co.dump() : ""));
    RegimeFigures f{regime, phase_of(*solo_json), phase_of(co)};
    coloc_json[regime] = co;
    if (ctx->rank == 0 && !o.quiet)
      std::cerr << "colocate: node of rank 0, " << regime << "-way: T_solo " << f.solo.throughput
                << "/s (spread " << 100 * f.solo.spread() << "%), T_coloc " << f.coloc.throughput
                << "/s (spread " << 100 * f.coloc.spread() << "%)\n";
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
                   {"solo", *solo_json},
                   {"repeat", coloc_json[1]}};
  } else {
    gate = run_gate(regimes, measure);
    json tried = json::array();
    for (const auto& v : gate.tried)
      tried.push_back(regime_json(v, *solo_json, coloc_json[v.regime]));
    node_result = {
        {"ranks_on_node", ctx->node_size},
        {"regimes_tried", tried},
        {"allowed_regime", gate.allowed ? json(*gate.allowed) : json(nullptr)},
        {"largest_available_regime", regimes.front()},
        {"unclassifiable", !gate.tried.empty() && gate.tried.back().stop},
        {"note", regimes.front() < 8
                     ? "fewer than 8 ranks on this node: the largest available regime was used"
                     : ""}};
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  node_result["host"] = host;
  node_result["gpu_uuids"] = ctx->node_gpu_uuids;
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
                  {"profile",
                   {{"name", o.profile.name},
                    {"warmup_s", o.profile.warmup_s},
                    {"measure_s", o.profile.measure_s},
                    {"intervals", o.profile.intervals},
                    {"window_forwards", o.profile.window_forwards}}},
                  {"contamination_limits",
                   {{"min_clock_fraction", o.limits.min_clock_fraction},
                    {"max_foreign_load_per_cpu", o.limits.max_foreign_load_per_cpu}}},
                  {"family_table",
                   {{"version", table.version()},
                    {"sha256", table.sha256()},
                    {"max_other_share", kMaxOtherShare}}},
                  {"geometry", job.geometry.name},
                  {"created_utc", utc_now()},
                  {"nodes", nodes}};
  write_colocation_file(o.out_dir, verdict, table.sha256());
  // The gate held every device of the job: charged to the campaign of this acquisition directory.
  charge_campaign(o.out_dir, "co-location gate (" + o.profile.name + " profile)",
                  seconds_since(start) * ctx->size);
  return verdict;
}

}  // namespace moe
