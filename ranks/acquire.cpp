#include "ranks/acquire.h"
#include "bundle/format.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "comm/collectives.h"
#include "store/acquisition_file.h"
#include "bundle/bundle_meta.h"
#include "core/describe.h"
#include "core/files.h"
#include "kernels/workload.h"
#include "ranks/campaign.h"
#include "ranks/collectives_phase.h"
#include "ranks/colocate.h"
#include "core/planner.h"
#include "ranks/protocol.h"
#include "ranks/rank_context.h"

#ifndef HARNESS_GIT_REVISION
#define HARNESS_GIT_REVISION "unknown"
#endif

namespace moe {

using nlohmann::json;

std::string resolve_backend(const std::string& requested) {
  if (requested != "auto") return requested;
  return cuda_device_count() > 0 ? "native" : "cpu_reference";
}

namespace {

std::string cell_id(const Target& t, Component c) {
  return t.cell_id() + "." + std::string(to_string(c));
}

std::string load_average() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

}  // namespace

std::string contract_json(const JobSpec& job, const std::string& backend, const std::string& timing,
                          std::int64_t cache_bytes) {
  const auto plan = make_plan(job, cache_bytes);
  json targets = json::array();
  for (const auto& t : plan.targets) {
    json grids = json::object();
    for (const auto& g : t.components) {
      std::string pts;
      for (const auto& p : g.points)
        pts += std::to_string(p.tokens) + "," + std::to_string(p.activated) + "," +
               std::to_string(p.assignments) + ";";
      grids[std::string(to_string(g.component))] = {{"points", g.points.size()},
                                                    {"sha256", sha256_hex(pts)}};
    }
    targets.push_back({{"target", t.target.to_json()},
                       {"expert_ownership",
                        {{"first_expert", t.ownership.first_expert},
                         {"local_experts", t.ownership.local_experts},
                         {"placement", "linear"}}},
                       {"weight_banks", t.weight_banks},
                       {"grids", grids}});
  }
  const json c = {{"geometry", geometry_json(job.geometry)},
                  {"backend", backend},
                  {"timing", timing},
                  {"mode", "eager"},
                  {"planner_version", kPlannerVersion},
                  {"grid",
                   {{"factor", job.grid_factor},
                    {"max_num_batched_tokens", job.max_num_batched_tokens},
                    {"max_num_seqs", job.max_num_seqs},
                    {"graph_mode", to_string(job.graph_mode)},
                    {"capture_sizes", job.capture_sizes},
                    {"capture_sizes_derived", job.capture_sizes_derived}}},
                  {"conditioning",
                   {{"rounds", job.rounds},
                    {"iterations", job.iterations},
                    {"bank_tolerance", kBankTolerance},
                    {"cache_bytes", cache_bytes},
                    {"seed", job.seed}}},
                  {"targets", targets}};
  return c.dump();
}

AcquireSummary acquire(MPI_Comm comm, const JobSpec& job, const AcquireOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const auto ctx = make_rank_context(comm, job.backend);
  auto& backend = ctx->backend;
  auto& timer = ctx->timer;
  const auto& binding = ctx->binding;
  const std::string backend_name = backend->name();

  // Every rank must agree on the contract (same backend and cache size class).
  const auto contract =
      contract_json(job, backend->name(), timer->method(), backend->cache_bytes());
  const auto sha = sha256_hex(contract);
  std::string root_sha = sha;
  root_sha.resize(64);
  MPI_Bcast(root_sha.data(), 64, MPI_CHAR, 0, comm);
  int mismatch = root_sha != sha ? 1 : 0, any = 0;
  MPI_Allreduce(&mismatch, &any, 1, MPI_INT, MPI_MAX, comm);
  if (any)
    throw std::runtime_error(
        "ranks disagree on the contract (different backends or device cache "
        "sizes across nodes); run one device kind per acquisition");

  const auto plan = make_plan(job, backend->cache_bytes());
  // One acquisition per directory: rank 0 holds writer.lock for the whole run.
  std::unique_ptr<FileLock> writer;
  int locked = 1;
  if (rank == 0) {
    try {
      std::filesystem::create_directories(options.out_dir);
      writer = std::make_unique<FileLock>(std::filesystem::path(options.out_dir) / bundle_format::kWriterLock,
                                          FileLock::Mode::try_once);
    } catch (const std::exception&) {
      locked = 0;
    }
  }
  MPI_Bcast(&locked, 1, MPI_INT, 0, comm);
  if (!locked)
    throw std::runtime_error("another acquisition holds " + options.out_dir +
                             "/writer.lock; wait for it or choose another --out");
  const auto path = (std::filesystem::path(options.out_dir) / "acquisition.h5").string();
  FileIdentity identity{contract,
                        {{"harness_revision", HARNESS_GIT_REVISION},
                         {"backend", backend->name()},
                         {"timing", timer->method()},
                         {"geometry", geometry_json(job.geometry).dump()},
                         {"job", job.source},
                         {"variant", job.variant},
                         {"out_root", job.out_root},
                         {"planner_version", std::to_string(kPlannerVersion)}}};
  AcquisitionFile file(comm, path, identity);

  // Cells in plan order; cell i belongs to rank i % size.
  struct Cell {
    const TargetPlan* target;
    const ComponentGrid* grid;
  };
  std::vector<Cell> cells;
  std::vector<CellInfo> infos;
  for (const auto& t : plan.targets)
    for (const auto& g : t.components) {
      cells.push_back({&t, &g});
      infos.push_back(
          {cell_id(t.target, g.component),
           json{{"target", t.target.to_json()},
                {"component", to_string(g.component)},
                {"rounds", job.rounds},
                {"weight_banks", g.component == Component::experts ? t.weight_banks : 0}}
               .dump(),
           g.points, job.rounds});
    }
  file.declare_cells(infos);

  struct utsname un {};
  uname(&un);
  json prov = {{"rank", rank},
               {"node_local_rank", ctx->node_rank},
               {"gpu_numa_locality", ctx->locality},
               {"host", un.nodename},
               {"pid", static_cast<long>(getpid())},
               {"cpu_binding", binding.describe()},
               {"load_average", load_average()},
               {"started_utc", utc_now()},
               {"harness_revision", HARNESS_GIT_REVISION},
               {"device", backend->device_properties()},
               {"nccl", nccl_version()},
               {"timer", timer->method()}};
  file.write_provenance(prov.dump());

  std::vector<std::vector<std::int8_t>> done(cells.size());
  std::int64_t total_points = 0, done_points = 0;
  AcquireSummary summary;
  for (std::size_t c = 0; c < cells.size(); ++c) {
    done[c] = file.rounds_done(static_cast<int>(c));
    for (int r = 0; r < job.rounds; ++r) {
      total_points += static_cast<std::int64_t>(cells[c].grid->points.size());
      if (done[c][static_cast<std::size_t>(r)]) {
        ++summary.rounds_resumed;
        done_points += static_cast<std::int64_t>(cells[c].grid->points.size());
      }
    }
  }
  if (rank == 0 && !options.quiet) {
    std::cerr << "acquire: " << cells.size() << " cells on " << size << " ranks, backend "
              << backend->name() << ", " << total_points << " point-rounds";
    if (summary.rounds_resumed)
      std::cerr << ", resuming (" << summary.rounds_resumed << " cell rounds already complete)";
    std::cerr << "\n";
  }

  // The co-location verdict of this variant (harness colocate) decides how many ranks of a node
  // measure at once; without one, every rank measures (recorded as unverified).
  int regime = ctx->node_size;
  summary.colocation = "unverified (no colocation.yaml for this backend)";
  const auto verdict_path = std::filesystem::path(job.out_root) / job.variant / bundle_format::kColocationFile;
  if (std::filesystem::exists(verdict_path)) {
    const auto verdict = yaml_to_json(read_file(verdict_path));
    if (verdict.value("backend", "") == backend->name()) {
      const auto allowed = allowed_regime(verdict);
      if (!allowed && ctx->node_size > 1)
        throw std::runtime_error(
            "the co-location gate stopped (" + verdict_path.string() +
            "): run one rank per node, or fix the node and run harness colocate again");
      regime = std::clamp(allowed.value_or(1), 1, ctx->node_size);
      summary.colocation = "regime " + std::to_string(regime) + " from " + verdict_path.string();
    }
  }
  const int slots = (ctx->node_size + regime - 1) / regime;

  // Campaign state and the GPU-hour budget (rank 0 decides, every rank follows).
  std::unique_ptr<CampaignState> campaign;
  if (rank == 0) {
    const std::string job_text =
        job.source == "<embedded default>" ? default_job_yaml() : read_file(job.source);
    campaign = std::make_unique<CampaignState>(options.out_dir, options.command, job_text,
                                               job.gpu_hours * 3600.0);
  }
  const auto rows_in_file = file.complete_rows();
  if (rank == 0) campaign->reconcile(rows_in_file);
  // Conservative estimate of one wave: the slowest rank's cells (plan's held-time model) times
  // every device held while it runs.
  const auto wave_estimate = [&](int r) {
    std::vector<double> per_rank(static_cast<std::size_t>(size), 0.0);
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (done[c][static_cast<std::size_t>(r)]) continue;
      per_rank[c % static_cast<std::size_t>(size)] +=
          plan.estimate(*cells[c].target, cells[c].grid->component).held_seconds / job.rounds;
    }
    return *std::max_element(per_rank.begin(), per_rank.end()) * size * slots;
  };
  const auto measure_start = std::chrono::steady_clock::now();
  const std::int64_t resumed_points = done_points;
  for (int r = 0; r < job.rounds; ++r) {
    const double estimate = wave_estimate(r);
    if (estimate <= 0) continue;  // every cell of this round is complete
    int go = 1;
    if (rank == 0) {
      try {
        campaign->reserve("round " + std::to_string(r), estimate);
      } catch (const BudgetError& e) {
        summary.budget_stop = e.what();
        go = 0;
      }
    }
    MPI_Bcast(&go, 1, MPI_INT, 0, comm);
    if (!go) break;
    const auto wave_start = std::chrono::steady_clock::now();
    std::vector<CellRound> measured;
    std::vector<int> measured_cells;
    // Placement regime: at most `regime` ranks of a node measure at the same time.
    for (int slot = 0; slot < slots; ++slot) {
      if (slot > 0) MPI_Barrier(ctx->node);
      if (ctx->node_rank / regime != slot) continue;
      for (std::size_t c = static_cast<std::size_t>(rank); c < cells.size();
           c += static_cast<std::size_t>(size)) {
        if (done[c][static_cast<std::size_t>(r)]) continue;
        const auto& cell = cells[c];
        CellRoundSpec spec;
        spec.base.geometry = job.geometry;
        spec.base.target = cell.target->target;
        spec.base.component = cell.grid->component;
        spec.points = cell.grid->points;
        spec.round = r;
        spec.iterations = job.iterations;
        spec.weight_banks = cell.target->weight_banks;
        spec.seed = mix_seed({job.seed, c, static_cast<std::uint64_t>(r)});
        // On a terminal, rank 0 shows its current cell and point in place; batch logs get one
        // line per committed round.
        std::size_t point_done = 0;
        const auto live = [&] {
          ++point_done;
          std::cerr << "\racquire: round " << r << ", cell " << infos[c].id << ", point "
                    << point_done << "/" << spec.points.size() << "   " << std::flush;
        };
        const bool show = rank == 0 && !options.quiet && isatty(STDERR_FILENO);
        measured.push_back(measure_cell_round(*backend, *timer, spec,
                                              show ? std::function<void()>(live) : nullptr));
        if (show) std::cerr << "\n";
        measured_cells.push_back(static_cast<int>(c));
      }
    }
    std::vector<std::pair<int, const CellRound*>> mine;
    std::int64_t my_points = 0;
    double phases[3] = {0, 0, 0}, slowest[3] = {0, 0, 0};
    for (const auto& m : measured) {
      phases[0] += m.phases.setup;
      phases[1] += m.phases.verify;
      phases[2] += m.phases.timing;
    }
    MPI_Allreduce(phases, slowest, 3, MPI_DOUBLE, MPI_MAX, comm);
    for (std::size_t i = 0; i < measured.size(); ++i) {
      mine.emplace_back(measured_cells[i], &measured[i]);
      my_points += static_cast<std::int64_t>(
          cells[static_cast<std::size_t>(measured_cells[i])].grid->points.size());
    }
    RecordCounts mine_rows, all_rows;
    for (const auto& m : measured)
      mine_rows +=
          {static_cast<std::int64_t>(m.samples.size()), static_cast<std::int64_t>(m.medians.size()),
           static_cast<std::int64_t>(m.checks.size())};
    std::int64_t send[3] = {mine_rows.samples, mine_rows.medians, mine_rows.checks},
                 recv[3] = {0, 0, 0};
    MPI_Allreduce(send, recv, 3, MPI_INT64_T, MPI_SUM, comm);
    all_rows = {recv[0], recv[1], recv[2]};
    if (rank == 0) campaign->encoded(all_rows);
    file.commit(mine);
    if (rank == 0) campaign->written(all_rows);
    int my_rounds = static_cast<int>(measured.size()), all_rounds = 0;
    MPI_Allreduce(&my_rounds, &all_rounds, 1, MPI_INT, MPI_SUM, comm);
    summary.rounds_measured += all_rounds;
    std::int64_t all_points = 0;
    MPI_Allreduce(&my_points, &all_points, 1, MPI_INT64_T, MPI_SUM, comm);
    done_points += all_points;
    if (rank == 0)
      campaign->consume(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - wave_start).count(),
          size, all_rounds);
    if (rank == 0 && !options.quiet && all_rounds > 0) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - measure_start).count();
      const double rate =
          static_cast<double>(done_points - resumed_points) / std::max(elapsed, 1e-9);
      const double eta = rate > 0 ? static_cast<double>(total_points - done_points) / rate : 0;
      std::cerr << "acquire: committed round " << r << ": " << done_points << "/" << total_points
                << " point-rounds, elapsed " << static_cast<int>(elapsed) << " s, ETA "
                << static_cast<int>(eta) << " s (slowest rank: setup "
                << static_cast<int>(slowest[0]) << " s, verify " << static_cast<int>(slowest[1])
                << " s, timing " << static_cast<int>(slowest[2]) << " s), device time "
                << campaign->consumed_seconds() / 3600 << " of "
                << campaign->budget_seconds() / 3600 << " GPU-hours\n";
    }
  }
  int stopped = summary.budget_stop.empty() ? 0 : 1;
  MPI_Bcast(&stopped, 1, MPI_INT, 0, comm);
  if (stopped) {
    summary.file = path;
    summary.backend = backend->name();
    summary.cells = static_cast<int>(cells.size());
    summary.device_seconds_consumed = campaign ? campaign->consumed_seconds() : 0;
    return summary;
  }
  const auto coll = measure_collectives(comm, plan, ctx->gpu() ? ctx->node_rank : -1, file);
  if (campaign) {
    campaign->set_phase("complete");
    summary.device_seconds_consumed = campaign->consumed_seconds();
  }
  summary.collective_tables = coll.tables;
  summary.collectives_skipped = coll.skipped;
  summary.file = path;
  summary.backend = backend->name();
  summary.cells = static_cast<int>(cells.size());
  summary.points = total_points / std::max(1, job.rounds);
  summary.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace moe
