#include "ranks/acquire.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "bundle/bundle_meta.h"
#include "bundle/fidelity.h"
#include "bundle/format.h"
#include "bundle/hardware.h"
#include "comm/collectives.h"
#include "core/checked_call.h"
#include "core/contract.h"
#include "core/files.h"
#include "core/planner.h"
#include "core/refinement.h"
#include "core/timestamp.h"
#include "kernels/gate_rows.h"
#include "kernels/native_tile_rule.h"
#include "ranks/collectives_phase.h"
#include "ranks/colocate.h"
#include "ranks/elapsed.h"
#include "ranks/families.h"
#include "ranks/git_revision.h"
#include "ranks/protocol.h"
#include "ranks/rank_context.h"
#include "ranks/watchdog.h"
#include "store/acquisition_file.h"
#include "store/campaign.h"
#include "store/mpi_gather.h"

namespace moe {

using nlohmann::json;

// Points of one cell per target and component that the calibration measures (not stored).
constexpr std::size_t kCalibrationPoints = 8;

namespace {

std::string load_average() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

// One cell: a target's component grid, its held-out set, or what a refinement stage added to
// either. Cell i belongs to rank i % size.
struct Cell {
  const TargetPlan* target;
  Component component;
  CellRole role;
  CellInfo info;
  std::vector<std::int8_t> rounds_done;
  [[nodiscard]] bool done(int round) const {
    return rounds_done[static_cast<std::size_t>(round)] != 0;
  }
  [[nodiscard]] std::int64_t points() const {
    return static_cast<std::int64_t>(info.points.size());
  }
};

// Refinement stages per acquisition at most: each bisects the intervals that missed, so this
// resolves steps narrower than 2^-32 of the token range before the point cap does.

}  // namespace

double wave_load(std::int64_t points, double predicted_seconds) {
  return std::max(static_cast<double>(points) / static_cast<double>(kWavePoints),
                  predicted_seconds / kWaveSeconds);
}

double time_limit_margin(const std::vector<WaveWall>& waves, double next_predicted_s) {
  if (waves.empty() || !(next_predicted_s > 0)) return kReservationMargin;
  double margin = kTimeLimitMinMargin;
  const auto recent =
      waves.size() > kTimeLimitWaves ? waves.end() - kTimeLimitWaves : waves.begin();
  for (auto w = recent; w != waves.end(); ++w) {
    if (!(w->predicted_s > 0)) continue;
    margin = std::max(margin, w->predicted_s >= next_predicted_s
                                  ? w->measured_s / w->predicted_s
                                  : 1 + (w->measured_s - w->predicted_s) / next_predicted_s);
  }
  return margin;
}

std::vector<std::size_t> wave_bounds(const std::vector<double>& cell_load, int ranks) {
  std::vector<std::size_t> bounds{0};
  std::vector<double> load(static_cast<std::size_t>(std::max(1, ranks)), 0);
  for (std::size_t c = 0; c < cell_load.size(); ++c) {
    auto& owner = load[c % load.size()];
    if (owner > 0 && owner + cell_load[c] > 1) {
      bounds.push_back(c);
      std::fill(load.begin(), load.end(), 0);
    }
    owner += cell_load[c];
  }
  if (bounds.back() != cell_load.size()) bounds.push_back(cell_load.size());
  return bounds;
}

namespace {

// What one rank measured in one wave, before it is committed.
struct WaveResult {
  std::vector<CellRound> rounds;
  std::vector<int> cells;
  std::int64_t points = 0;
};

// An acquisition as named phases (docs/design.md): agree on the contract and open the file, resume
// from what it holds, measure wave by wave (one round of every cell), commit each wave, then the
// collectives. Every phase is collective over the job's communicator.
class Acquisition {
 public:
  Acquisition(MPI_Comm comm, const JobSpec& job, const AcquireOptions& options)
      : comm_(comm),
        job_(job),
        options_(options),
        ctx_(make_rank_context(comm, job.backend, options.keep_launcher_binding)),
        watchdog_(ctx_->rank, options.watchdog) {}

  // Rank 0 records the run's outcome in campaign.json (a failure with its reason).
  AcquireSummary run() {
    try {
      auto summary = measure_all();
      if (campaign_)
        campaign_->set_outcome(summary.stopped_by.empty() ? "complete" : summary.stopped_by,
                               summary.stop_reason);
      return summary;
    } catch (const std::exception& e) {
      if (campaign_) campaign_->set_outcome("failed", e.what());
      throw;
    }
  }

 private:
  AcquireSummary measure_all() {
    const auto t0 = SteadyClock::now();
    agree();
    resume();
    adopt_cost_ratios();
    calibrate();
    bool complete = false;
    {
      // Every step of the waves is watched, the collectives between them too (the wave plan, a
      // reservation, the stop checks, a refinement evaluation: expected 0, so the watchdog's
      // floor): a rank that stalls there would otherwise leave its peers waiting with no deadline.
      const WatchdogScope watch(&watchdog_, "wave", "the wave plan", 0);
      complete = measure_waves();
    }
    if (!complete) return finish(t0, false);
    collectives();
    return finish(t0, true);
  }

  // The waves of every round, then refinement stages until none adds cells (collective, inside
  // the "wave" watch, which each step re-arms). False when the budget or the time limit stopped it.
  bool measure_waves() {
    const auto measure_start = SteadyClock::now();
    const auto watch = [&](const std::string& operation, double expected_s) {
      watchdog_.expect("wave", operation, expected_s);
    };
    do {
      watch("the wave plan", 0);
      const auto bounds = wave_bounds(wave_loads(), size_);
      for (int r = 0; r < job_.rounds && !stopped(); ++r)
        for (std::size_t w = 0; w + 1 < bounds.size(); ++w) {
          const Wave wave{r, bounds[w], bounds[w + 1]};
          const std::string name = "the wave of round " + std::to_string(r);
          watch(name + " (its reservation)", 0);
          const auto go = reserve(wave);
          if (!go) break;
          if (*go == 0) continue;  // every cell of this wave is complete
          const auto wave_start = SteadyClock::now();
          watch(name + " (measure and commit)", wave_wall_estimate_);
          commit(r, measure(wave), wave_start, measure_start);
          if (wave_predicted_wall_ > 0)
            wave_walls_.push_back({wave_predicted_wall_, seconds_since(wave_start)});
          watch(name + " (the checks after it)", 0);
        }
      if (stopped()) return false;
      watch("the refinement evaluation", 0);
    } while (refine());
    return true;
  }

  // Agree: every rank computes the contract from the one plan; all must match rank 0's. Rank 0
  // takes writer.lock, and the shared file is opened (or checked against the contract) and its
  // cells declared.
  // Why the ranks' contracts differ, for every rank's error: the ranks whose backend or device
  // (its SM count and cache size set the grid) differ from rank 0's, or, where none does, the job.
  std::string contract_mismatch() const {
    constexpr int kWidth = 160;
    const auto& b = *ctx_->backend;
    std::string mine = b.name() + " (" + b.timing() + ", " + std::to_string(b.sm_count()) +
                       " SMs, " + std::to_string(b.cache_bytes() >> 20) + " MiB cache)";
    mine.resize(kWidth - 1);
    mine.resize(kWidth, '\0');
    std::string all(static_cast<std::size_t>(kWidth) * static_cast<std::size_t>(size_), '\0');
    HARNESS_CHECK_MPI(
        MPI_Allgather(mine.data(), kWidth, MPI_CHAR, all.data(), kWidth, MPI_CHAR, comm_));
    const auto of = [&](int r) { return std::string(all.c_str() + std::size_t{kWidth} * r); };
    std::string differ;
    int count = 0;
    for (int r = 1; r < size_; ++r)
      if (of(r) != of(0) && ++count <= 3) differ += ", rank " + std::to_string(r) + " " + of(r);
    if (count > 3) differ += " and " + std::to_string(count - 3) + " more ranks";
    if (count == 0)
      return "ranks disagree on the contract although every rank plans for " + of(0) +
             ": the job differs between ranks (another file or harness version on some node)";
    return "ranks disagree on the contract: rank 0 plans for " + of(0) + differ +
           " (the grid follows the backend, the SM count and the cache size); run one device "
           "kind per acquisition";
  }

  void agree() {
    HARNESS_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    HARNESS_CHECK_MPI(MPI_Comm_size(comm_, &size_));
    const auto& device = *ctx_->backend;
    plan_ =
        make_plan(job_, device.cache_bytes(), expert_time_steps(device.name(), job_),
                  gate_time_steps(device.name(), device.sm_count(), job_.max_num_batched_tokens));
    require_device_memory();
    choose_regime();  // before anything is written: a refused placement leaves no trace
    const auto contract_text = Contract::of(plan_, ctx_->backend->name(), ctx_->timer->method(),
                                            ctx_->backend->cache_bytes(), ctx_->backend->version())
                                   .dump();
    const auto sha = sha256_hex(contract_text);
    std::string root_sha = sha;
    root_sha.resize(64);
    HARNESS_CHECK_MPI(MPI_Bcast(root_sha.data(), 64, MPI_CHAR, 0, comm_));
    int mismatch = root_sha != sha ? 1 : 0, any = 0;
    HARNESS_CHECK_MPI(MPI_Allreduce(&mismatch, &any, 1, MPI_INT, MPI_MAX, comm_));
    if (any) throw std::runtime_error(contract_mismatch());

    // 0: locked; 1: another acquisition holds the lock; 2: the directory or its lock file cannot
    // be made (not a directory, permissions, name too long: rank 0 says which).
    int state = 0;
    std::string why;
    if (rank_ == 0) {
      try {
        std::filesystem::create_directories(options_.out_dir);
        writer_ = std::make_unique<FileLock>(
            std::filesystem::path(options_.out_dir) / bundle_format::kWriterLock,
            FileLock::Mode::try_once);
      } catch (const LockHeldError&) {
        state = 1;
      } catch (const std::filesystem::filesystem_error& e) {
        state = 2;
        why = e.code().message();  // "Not a directory", "File name too long", ...
      } catch (const std::exception& e) {
        state = 2;
        why = e.what();
      }
    }
    HARNESS_CHECK_MPI(MPI_Bcast(&state, 1, MPI_INT, 0, comm_));
    if (state == 1)
      throw std::runtime_error("another acquisition holds " + options_.out_dir +
                               "/writer.lock; wait for it or choose another --out");
    if (state == 2)
      throw std::runtime_error("cannot use " + options_.out_dir + " as the acquisition directory" +
                               (why.empty() ? std::string(" (see rank 0)") : ": " + why));
    path_ = (std::filesystem::path(options_.out_dir) / kAcquisitionFile).string();
    const auto& backend = *ctx_->backend;
    FileIdentity identity{contract_text,
                          {{"harness_revision", git_revision()},
                           {"backend", backend.name()},
                           {"timing", ctx_->timer->method()},
                           {"geometry", geometry_json(job_.geometry).dump()},
                           {"job", job_.source},
                           {"variant", job_.variant},
                           {"out_root", job_.out_root},
                           {"planner_version", std::to_string(kPlannerVersion)}}};
    identity_ = identity;
    restore_torn_file();
    // Refinement stages an earlier run of this acquisition added (their points live only in the
    // file): read before the collective open, declared after the planned cells.
    const auto earlier_stages = stage_cells_in_file();
    require_campaign_state();
    file_ = std::make_unique<AcquisitionFile>(comm_, path_, identity_);
    if (const auto raise = file_->refinement_cap_raised(); raise && rank_ == 0)
      std::cerr << "acquire: fidelity.max_added_points raised from " << raise->first << " to "
                << raise->second
                << " (the only change to the stored contract): refinement goes "
                   "on where it stopped at the cap, nothing measured is measured again; the file "
                   "records the raise (refinement_cap_raises). A bundle published with the "
                   "earlier cap is never overwritten: publish this one into another --out-root "
                   "(with --out naming this acquisition) or variant\n";

    for (const auto& t : plan_.targets)
      for (const auto& g : t.components) {
        add_cells(t, g.component, {0, false}, g.points);
        add_cells(t, g.component, {0, true}, g.held_out);
      }
    for (const auto& info : earlier_stages) add_stored_cell(info);
    declare();
    write_provenance();
    add_anchor_cells();
  }

  // A run on a device the campaign has not measured on measures a spread of each table's
  // published rows again (anchor cells, measured after the cells left), so that how far this
  // device lies from those that measured the table is measured, not inferred
  // (docs/measurement.md#fidelity). Collective.
  void add_anchor_cells() {
    int new_device = rank_ == 0 && !device_change_.added.empty() ? 1 : 0;  // rank 0 knows
    HARNESS_CHECK_MPI(MPI_Bcast(&new_device, 1, MPI_INT, 0, comm_));
    if (!new_device) return;
    std::string text = "[]";
    count_snapshots();
    file_.reset();  // read serially on rank 0, reopened collectively
    if (rank_ == 0) {
      const auto acq = read_acquisition(path_);
      json out = json::array();
      std::size_t rows = 0;
      for (const auto& f : evaluate_fidelity(acq, summarize(acq), {})) {
        const auto t = std::find_if(plan_.targets.begin(), plan_.targets.end(),
                                    [&](const TargetPlan& p) { return p.target == f.target; });
        if (t == plan_.targets.end()) continue;
        // Rows with a complete round: each measured on the earlier devices only.
        std::vector<GridPoint> published;
        for (const auto& p : f.table)
          if (p.bank_check_passed && p.time_us) published.push_back(p.point);
        if (published.empty()) continue;
        int set = 1;
        for (const auto index : f.cells)
          set = std::max(set, cell_role(json::parse(acq.cells[index].info.json)).anchors + 1);
        const auto anchors = anchor_rows(published);
        rows += anchors.size();
        for (const auto& info : cell_parts(*t, f.component, CellRole{0, false, 0, set}, anchors))
          out.push_back(cell_info_json(info));
      }
      if (rows > 0 && !options_.quiet)
        std::cerr << "acquire: this device is new to the campaign: " << rows
                  << " published rows measured again (up to " << kAnchorRows
                  << " per table, after the cells left) to measure how far it lies from the "
                     "devices that measured them\n";
      text = out.dump();
    }
    for (const auto& j : json::parse(broadcast_string(comm_, text)))
      add_stored_cell(cell_info_of(j));
    file_ = std::make_unique<AcquisitionFile>(comm_, path_, identity_);
    declare();
  }

  // Refuses, before the file is opened, a campaign whose state is gone while the file holds
  // complete rounds: the device time they consumed would be lost from the budget. (A file without
  // complete rounds is what a kill before the first commit leaves: that resumes.)
  void require_campaign_state() const {
    const auto state = std::filesystem::path(options_.out_dir) / kCampaignFile;
    std::int64_t rows = 0;
    if (rank_ == 0 && std::filesystem::exists(path_) && !std::filesystem::exists(state))
      rows = read_acquisition(path_).complete_rows().samples;
    HARNESS_CHECK_MPI(MPI_Bcast(&rows, 1, MPI_INT64_T, 0, comm_));
    if (rows > 0)
      throw std::runtime_error(
          state.string() + " is missing although " + path_ + " holds " + std::to_string(rows) +
          " samples in complete rounds: the device time this campaign consumed is unknown; "
          "restore it, or start a new campaign in another --out");
  }

  // Refuses, before anything is written, a plan whose largest target needs more device memory per
  // rank than this GPU has (harness plan prints the estimate).
  void require_device_memory() const {
    const auto props = ctx_->backend->device_properties();
    const auto it = props.find("memory_bytes");
    if (it == props.end()) return;  // host backends
    const auto have = std::stoll(it->second);
    for (const auto& t : plan_.targets)
      if (const auto need = estimate_memory(job_, t); need.total() > have) {
        const auto gib = [](std::int64_t b) {
          return std::to_string(static_cast<double>(b) / (1LL << 30)).substr(0, 5);
        };
        throw std::runtime_error(
            "target " + t.target.label() + " needs about " + gib(need.total()) +
            " GiB of device memory per rank (weights " + gib(need.weight_bytes) +
            " GiB; harness plan), this GPU has " + gib(have) +
            " GiB: use a deployment with more experts ranks (EP) or fewer tokens");
      }
  }

  // The file's description of a cell of target `t`.
  [[nodiscard]] CellInfo cell_info(const TargetPlan& t, Component c, CellRole role,
                                   std::vector<GridPoint> points) const {
    const int banks = c == Component::experts ? t.weight_banks : 0;
    return {fidelity_cell_id(t.target, c, role),
            fidelity_cell_json(t.target, c, role, job_.rounds, banks).dump(), std::move(points),
            job_.rounds};
  }

  // The cells of target `t`'s points of component `c` in `role`: parts of at most kCellPoints.
  [[nodiscard]] std::vector<CellInfo> cell_parts(const TargetPlan& t, Component c, CellRole role,
                                                 const std::vector<GridPoint>& points) const {
    std::vector<CellInfo> out;
    for (std::size_t first = 0; first < points.size(); first += kCellPoints) {
      role.part = static_cast<int>(first / kCellPoints);
      const auto last = std::min(points.size(), first + kCellPoints);
      out.push_back(cell_info(t, c, role,
                              {points.begin() + static_cast<std::ptrdiff_t>(first),
                               points.begin() + static_cast<std::ptrdiff_t>(last)}));
    }
    return out;
  }

  // Appends the planned cells of target `t` (not yet declared in the file).
  void add_cells(const TargetPlan& t, Component c, CellRole role,
                 const std::vector<GridPoint>& points) {
    for (auto& info : cell_parts(t, c, role, points))
      cells_.push_back({&t, c, cell_role(json::parse(info.json)), std::move(info), {}});
  }

  // Appends a refinement-stage cell as stored in the file; its target must be in the plan.
  void add_stored_cell(const CellInfo& info) {
    const auto j = json::parse(info.json);
    const auto target = Target::from_json(j.at("target"));
    const auto c = parse_component(j.at("component").get<std::string>());
    for (const auto& t : plan_.targets)
      if (t.target == target && c) {
        cells_.push_back({&t, *c, cell_role(j), info, {}});
        return;
      }
    throw std::runtime_error("the acquisition file holds cell " + info.id +
                             " of a target this job does not plan");
  }

  // Declares every cell (collective) and reads the rounds each one already holds.
  void declare() {
    std::vector<CellInfo> infos;
    for (const auto& c : cells_) infos.push_back(c.info);
    file_->declare_cells(infos);
    for (std::size_t c = 0; c < cells_.size(); ++c)
      cells_[c].rounds_done = file_->rounds_done(static_cast<int>(c));
  }

  // Before anything reads the file: a file that HDF5 cannot read whole, or whose complete rounds
  // the campaign's counters cannot explain, is what a kill inside an HDF5 flush leaves
  // (docs/measurement.md#crash-consistency-and-resume). When its snapshot has neither problem,
  // the file is moved aside and the snapshot takes its place; the rounds after the snapshot are
  // measured again. Always said, and recorded in campaign.json.
  void restore_torn_file() {
    if (rank_ == 0) {
      const auto problem = [&](const std::string& file) -> std::optional<std::string> {
        if (auto damage = hdf5_damage(file)) return damage;
        try {
          const auto acq = read_acquisition(file);
          if (auto text = unparsable_json(acq)) return text;
          return unexplained_rows(options_.out_dir, acq.complete_rows());
        } catch (const SchemaVersionError& e) {
          // Another harness's file is not damage: the collective open below refuses it by name
          // and nothing is moved. A snapshot of another version cannot stand in for the file.
          if (file == path_) return std::nullopt;
          return std::string(e.what());
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      };
      restored_ = restore_snapshot_if_damaged(path_, problem);
      if (restored_) {
        summary_.restored = path_ + " was damaged (" + restored_->problem + "); it is kept as " +
                            restored_->damaged_copy + ", and the acquisition resumed from " +
                            snapshot_path(path_);
        std::cerr << "acquire: " << summary_.restored
                  << ": rounds committed after that snapshot are measured again\n";
      }
    }
  }

  // Rank 0 reads the refinement-stage and anchor cells of an existing file (descriptions only),
  // in stage order, and broadcasts them. Collective.
  std::vector<CellInfo> stage_cells_in_file() {
    std::string text = "[]";
    if (rank_ == 0 && std::filesystem::exists(path_)) {
      try {
        std::vector<std::pair<int, CellInfo>> staged;
        for (auto& info : read_cell_infos(path_))
          if (const auto role = cell_role(json::parse(info.json));
              role.stage > 0 || role.anchors > 0)
            staged.emplace_back(role.stage, std::move(info));
        std::stable_sort(staged.begin(), staged.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        json list = json::array();
        for (const auto& [stage, info] : staged) list.push_back(cell_info_json(info));
        text = list.dump();
      } catch (const FileError&) {
        // The collective open below names the problem and leaves the file untouched.
      }
    }
    std::vector<CellInfo> out;
    for (const auto& j : json::parse(broadcast_string(comm_, text))) out.push_back(cell_info_of(j));
    return out;
  }

  static json cell_info_json(const CellInfo& info) {
    json points = json::array();
    for (const auto& p : info.points) points.push_back({p.tokens, p.activated, p.assignments});
    return {{"id", info.id}, {"json", info.json}, {"rounds", info.rounds}, {"points", points}};
  }
  static CellInfo cell_info_of(const json& j) {
    CellInfo info{j.at("id"), j.at("json"), {}, j.at("rounds")};
    for (const auto& p : j.at("points")) info.points.push_back({p.at(0), p.at(1), p.at(2)});
    return info;
  }

  // Refine (collective): evaluates the held-out sets from the file and, where a component
  // misses the tolerance or a grid point failed B/2B, declares the next stage's cells: the
  // bisecting rows (refinement_step), the failed points again (up to the re-measure limit), and
  // fresh held-out points. False when nothing is added: the tables are final. Its wall time is
  // charged to the budget.
  bool refine() {
    const auto start = SteadyClock::now();
    const std::size_t before = cells_.size();
    std::string text = "[]";
    count_snapshots();
    file_.reset();  // the file is read serially on rank 0 and reopened collectively
    if (rank_ == 0) text = next_stage().dump();
    for (const auto& j : json::parse(broadcast_string(comm_, text)))
      add_stored_cell(cell_info_of(j));
    file_ = std::make_unique<AcquisitionFile>(comm_, path_, identity_);
    declare();
    for (std::size_t c = before; c < cells_.size(); ++c)
      total_points_ += cells_[c].points() * job_.rounds;
    // Every rank is held while rank 0 evaluates: charged like a wave.
    const double held = seconds_since(start);
    summary_.refinement_s += held * size_;
    if (rank_ == 0) campaign_->charge(held, size_);
    calibrate();  // predicts the new cells; measures only a kind this run has no ratio for
    return cells_.size() > before;
  }

  // Rank 0: the cells of the next refinement stage (as cell_info_json), empty when none. The
  // evaluation it is derived from is appended to the file (the last one is the final one).
  json next_stage() {
    json out = json::array();
    const auto& fid = job_.fidelity;
    const auto acq = read_acquisition(path_);
    json evaluation = {{"utc", utc_now()}, {"tables", json::array()}};
    const auto waves =
        expert_launch_waves(ctx_->backend->name(), job_.geometry, ctx_->backend->sm_count());
    for (const auto& f : evaluate_fidelity(acq, summarize(acq), waves)) {
      evaluation["tables"].push_back({{"target", f.target.to_json()},
                                      {"component", to_string(f.component)},
                                      {"fidelity", f.to_json(fid.tolerance)}});
      const auto t = std::find_if(plan_.targets.begin(), plan_.targets.end(),
                                  [&](const TargetPlan& p) { return p.target == f.target; });
      if (t == plan_.targets.end()) continue;
      // Rows measured again on devices new to the campaign: each pair's offset, once per run.
      if (const auto anchored = device_anchors_json(f.anchors, fid.tolerance);
          !options_.quiet && !anchored.is_null() &&
          anchors_reported_.insert(f.target.label(f.component)).second) {
        const auto label = t->target.label() + " " + std::string(to_string(f.component));
        for (const auto& p : anchored["device_pairs"])
          std::cerr << "acquire: anchors of " << label << ": " << anchor_pair_summary(p)
                    << " (harness inspect numbers the devices)\n";
        if (const auto off = anchor_clock_off_summary(anchored); !off.empty())
          std::cerr << "acquire: anchors of " << label << ": " << off << "\n";
      }
      const auto next = next_stage_of(job_, f, plan_.expert_time_steps, waves);
      const auto& step = next.step;
      const auto& misses = next.misses;
      const auto& again = next.remeasure;
      const int within_movement = next.within_movement;
      const bool last_stage = next.stage_limit;
      std::set<GridPoint> stage_grid(step.grid.begin(), step.grid.end());
      stage_grid.insert(again.begin(), again.end());
      const CellRole grid_role{f.stages + 1, false}, held_role{f.stages + 1, true};
      const auto cell = [&](CellRole role, const std::vector<GridPoint>& points) {
        for (const auto& info : cell_parts(*t, f.component, role, points))
          out.push_back(cell_info_json(info));
      };
      if (!stage_grid.empty()) cell(grid_role, {stage_grid.begin(), stage_grid.end()});
      if (!step.held_out.empty()) cell(held_role, step.held_out);
      if (!options_.quiet && (!stage_grid.empty() || !step.held_out.empty()))
        std::cerr << "acquire: refinement stage " << f.stages + 1 << " of " << t->target.label()
                  << " " << to_string(f.component) << ": held-out p95 " << f.statistics.p95 * 100
                  << "%, max " << f.statistics.max * 100 << "% over " << f.statistics.count
                  << " points; +" << step.grid.size() << " grid points, " << again.size()
                  << " re-measured, " << step.held_out.size() << " new held-out"
                  << (step.wave_brackets ? "; " + std::to_string(step.wave_brackets) +
                                               " misses bracketed at launch-wave steps"
                                         : "")
                  << (within_movement ? "; " + std::to_string(within_movement) +
                                            " misses within their runs' movement, not refined"
                                      : "")
                  << (f.kernel_changes.empty()
                          ? ""
                          : "; kernels change between " + std::to_string(f.kernel_changes.size()) +
                                " pairs of consecutive rows")
                  << "\n";
      // A table that stays outside the tolerance says why refinement stopped (the publisher
      // then refuses it, or records it as accepted-with-failures).
      if (!options_.quiet && stage_grid.empty() && step.held_out.empty() &&
          (!misses.empty() || within_movement || !f.failed.empty()) &&
          refinement_ended_.insert(f.target.label(f.component)).second)
        std::cerr << "acquire: refinement of " << t->target.label() << " " << to_string(f.component)
                  << " ends with " << misses.size() + within_movement << " held-out points above "
                  << fid.tolerance * 100 << "%"
                  << (within_movement ? " (" + std::to_string(within_movement) +
                                            " within their runs' movement, not refined)"
                                      : "")
                  << " and " << f.failed.size() << " points failing B/2B: "
                  << (misses.empty() && f.failed.empty() ? "they are within their runs' movement"
                      : !fid.refine                      ? "fidelity.refine is false"
                      : last_stage                       ? "the stage limit is reached"
                      : next.cap_spent                   ? "fidelity.max_added_points is spent"
                                       : "no interval can be split within the remaining points")
                  << (f.failed.empty() ? "" : " (B/2B re-measures are spent)") << "\n";
    }
    append_fidelity_evaluation(path_, evaluation.dump());
    return out;
  }

  // Adds the snapshots the open file object took to the summary (before it is replaced).
  void count_snapshots() {
    summary_.snapshots += file_->snapshots();
    summary_.snapshot_s += file_->snapshot_seconds();
  }

  void write_provenance() {
    struct utsname un {};
    uname(&un);
    const auto& backend = *ctx_->backend;
    const json prov = {{"rank", rank_},
                       {"node_local_rank", ctx_->node_rank},
                       {"cuda_device", ctx_->device},
                       {"gpu_numa_locality", ctx_->locality},
                       {"host", un.nodename},
                       {"pid", static_cast<long>(getpid())},
                       {"cpu_binding", ctx_->binding.describe()},
                       {"load_average", load_average()},
                       {"started_utc", utc_now()},
                       {"harness_revision", git_revision()},
                       {"device", backend.device_properties()},
                       {"device_state_before", backend.live_state()},
                       {"nccl", nccl_version()},
                       {"timer", ctx_->timer->method()},
                       {"placement", placement_}};
    auto mine = prov;
    if (rank_ == 0) {  // once per run: what was run, with which binary and family table
      mine["command"] = options_.command;
      mine["job_text"] =
          job_.source == "<embedded default>" ? default_job_yaml() : read_file(job_.source);
      mine["harness_binary_sha256"] = executable_sha256();
      mine["family_table_sha256"] = FamilyTable::builtin().sha256();
    }
    file_->write_provenance(mine.dump());
    const auto starts = file_->provenance_starts();
    if (rank_ == 0) device_change_ = device_change(starts);
  }

  // Resume: which cell rounds the file already holds, the placement regime from the variant's
  // co-location verdict, and the campaign state (budget, record counters) on rank 0.
  void resume() {
    for (std::size_t c = 0; c < cells_.size(); ++c) {
      const auto& cell = cells_[c];
      for (int r = 0; r < job_.rounds; ++r) {
        total_points_ += cell.points();
        if (cell.done(r)) {
          ++summary_.rounds_resumed;
          done_points_ += cell.points();
        }
      }
    }
    resumed_points_ = done_points_;
    if (rank_ == 0 && !options_.quiet) {
      std::cerr << "acquire: " << cells_.size() << " cells on " << size_ << " ranks, backend "
                << ctx_->backend->name() << ", " << total_points_ << " point-rounds";
      if (summary_.rounds_resumed)
        std::cerr << ", resuming (" << summary_.rounds_resumed << " cell rounds already complete)";
      std::cerr << "\n";
      // A campaign resumed on other GPUs of the kind: the table will hold both (docs/cli.md).
      if (!device_change_.added.empty())
        std::cerr << "acquire: this run measures on " << device_change_.added
                  << ", which no earlier run of this campaign used (they measured on "
                  << device_change_.earlier
                  << "); its tables will mix the devices' measurements, and their hardware "
                     "identity lists every device\n";
    }
    if (rank_ == 0) {
      const std::string job_text =
          job_.source == "<embedded default>" ? default_job_yaml() : read_file(job_.source);
      const auto out = std::filesystem::path(options_.out_dir);
      campaign_ = std::make_unique<CampaignState>(out, options_.command, job_text,
                                                  FamilyTable::builtin().sha256(),
                                                  job_.gpu_hours * 3600.0, options_.raise_budget);
      watchdog_.beat_into(out / kHeartbeatFile);
      if (restored_) campaign_->record_restore(restored_->problem, restored_->damaged_copy);
      campaign_->reconcile(file_->complete_rows(), [&](const std::string& id, int round) {
        const auto cell = std::find_if(cells_.begin(), cells_.end(),
                                       [&](const auto& c) { return c.info.id == id; });
        return cell != cells_.end() && round >= 0 && round < job_.rounds && cell->done(round);
      });
      // Work a kill threw away is said, not only charged: the wave in flight is measured again.
      if (const auto& w = campaign_->interrupted(); w && !options_.quiet) {
        std::cerr << "acquire: the previous run stopped inside the wave of " << w->wave << " after "
                  << std::llround(w->held_seconds) << " s";
        if (w->from_heartbeat)
          std::cerr << " (charged " << std::llround(w->charged_device_seconds)
                    << " device-seconds to the budget, from its last heartbeat)";
        else
          std::cerr << " (no heartbeat file: nothing charged)";
        std::cerr << "; its unfinished cell rounds are measured again\n";
      }
    }
  }

  // The co-location verdict of this variant (harness colocate) decides how many ranks of a node
  // measure at once (docs/colocation.md#the-gate-gates): a node with several ranks needs a
  // passing verdict of this backend, node and family table, younger than the maximum age, or the
  // explicit --unverified. Collective: every rank refuses together, with every node's reason.
  void choose_regime() {
    const auto variant_dir = std::filesystem::path(job_.out_root) / job_.variant;
    const auto where = (variant_dir / bundle_format::kColocationFile).string();
    std::string problem;
    if (ctx_->node_size == 1) {
      regime_ = 1;
      placement_ = {{"regime", 1}, {"gate", "not needed (one rank on the node)"}};
    } else if (options_.unverified) {
      regime_ = ctx_->node_size;
      placement_ = {{"regime", regime_}, {"gate", "unverified (--unverified)"}};
    } else {
      GateRequirement req{
          ctx_->backend->name(), FamilyTable::builtin().sha256(), ctx_->host,
          ctx_->node_gpu_uuids,  options_.verdict_max_age_hours,  std::time(nullptr)};
      const auto verdict = load_colocation(variant_dir);
      const auto decision = check_verdict(verdict, req);
      if (decision.regime) {
        regime_ = std::clamp(*decision.regime, 1, ctx_->node_size);
        placement_ = {{"regime", regime_},
                      {"gate", "verified"},
                      {"verdict", where},
                      {"verdict_created_utc", verdict->value("created_utc", "")},
                      {"verdict_profile",
                       verdict->value("profile", nlohmann::json::object()).value("name", "")}};
      } else if (ctx_->node_rank == 0) {
        problem = "host " + ctx_->host + " (" + std::to_string(ctx_->node_size) +
                  " ranks): " + decision.problem;
      }
    }
    std::string refusal;
    for (const auto& p : gather_strings(comm_, problem, 0))
      if (!p.empty()) refusal += "\n  " + p;
    refusal = broadcast_string(comm_, refusal);
    if (!refusal.empty())
      throw std::runtime_error(
          "several ranks per node measure only with a passing co-location verdict (" + where +
          "):" + refusal + "\nget one on this allocation with `mpirun -np " +
          std::to_string(size_) + " harness colocate " + job_.source +
          "` (same --out-root), run one rank per node, or pass --unverified (every entry is then "
          "marked unverified)");
    slots_ = (ctx_->node_size + regime_ - 1) / regime_;
    placement_["ranks_on_node"] = ctx_->node_size;
    summary_.colocation = "regime " + std::to_string(regime_) + ", " +
                          placement_["gate"].get<std::string>() +
                          (placement_.contains("verdict") ? " from " + where : "");
  }

  [[nodiscard]] bool mine(std::size_t c) const {
    return c % static_cast<std::size_t>(size_) == static_cast<std::size_t>(rank_);
  }
  // Cells [first, end) of cells_ in round `round`.
  struct Wave {
    int round;
    std::size_t first, end;
  };
  [[nodiscard]] bool left(const Wave& w) const {
    for (std::size_t c = w.first; c < w.end; ++c)
      if (!cells_[c].done(w.round)) return true;
    return false;
  }

  // A cell's kind: its target and component. Cells of one kind share a cost ratio.
  using Kind = std::pair<const TargetPlan*, Component>;
  [[nodiscard]] static Kind kind_of(const Cell& cell) { return {cell.target, cell.component}; }
  [[nodiscard]] static std::string kind_key(const Kind& k) {
    return k.first->target.label(k.second);
  }

  // Records every rank's latest cost ratios in campaign.json (collective); where several ranks
  // measure cells of one kind, the largest, so that a resume's reservations stay conservative.
  void share_cost_ratios() {
    json mine = json::object();
    for (const auto& [kind, ratio] : cost_ratio_) mine[kind_key(kind)] = ratio;
    const auto all = gather_strings(comm_, mine.dump(), 0);
    if (rank_ != 0) return;
    std::map<std::string, double> merged;
    for (const auto& text : all) {
      const auto ratios = json::parse(text);  // items() refers to it
      for (const auto& [key, ratio] : ratios.items())
        merged[key] = std::max(merged[key], ratio.get<double>());
    }
    campaign_->record_cost_ratios(merged);
  }

  // A resumed run predicts from the cost ratios its campaign's earlier runs recorded, so the
  // calibration measures only a component none of them did (collective).
  void adopt_cost_ratios() {
    const auto stored = json::parse(
        broadcast_string(comm_, rank_ == 0 ? json(campaign_->cost_ratios()).dump() : "{}"));
    std::set<std::string> adopted;  // the same on every rank: kinds are the plan's
    for (std::size_t c = 0; c < cells_.size(); ++c) {
      const auto kind = kind_of(cells_[c]);
      const auto it = stored.find(kind_key(kind));
      if (it == stored.end()) continue;
      adopted.insert(kind_key(kind));
      if (mine(c)) cost_ratio_.emplace(kind, it->get<double>());
    }
    if (rank_ == 0 && !adopted.empty() && !options_.quiet)
      std::cerr << "acquire: predicting " << adopted.size()
                << " components' cells from the cost ratios earlier runs of this campaign "
                   "measured (campaign.json); calibrating only the others\n";
  }

  // Nominal seconds of one round of `points` of a cell of kind `k` (core/planner.h's device
  // model of this backend): the shape of the cost over the grid, which the measured ratios scale.
  [[nodiscard]] double nominal_seconds(const Kind& k, const std::vector<GridPoint>& points) const {
    return nominal_round_seconds(job_, ctx_->backend->name(), k.first->weight_banks, k.second,
                                 points);
  }

  // Predicts every cell of this rank not measured by this run: its nominal cost times its kind's
  // measured ratio (1 until one is measured).
  void predict_unmeasured() {
    for (std::size_t c = 0; c < cells_.size(); ++c) {
      if (!mine(c) || cell_measured_[c]) continue;
      const auto ratio = cost_ratio_.find(kind_of(cells_[c]));
      cell_cost_[c] = cell_nominal_[c] * (ratio == cost_ratio_.end() ? 1.0 : ratio->second);
    }
  }

  // Calibration (collective): for each kind of this rank's cells with a round left to measure
  // and no cost ratio yet (none adopted from campaign.json either), a short measurement of a
  // systematic sample of at most kCalibrationPoints points of its first such cell (not stored, but
  // charged) gives the ratio of measured to nominal cost; every cell not measured yet is then
  // predicted from it. Later waves update the ratios from what they measured (commit), so one
  // sample per kind suffices (docs/measurement.md#time-estimates). Runs before the first wave, and
  // after a refinement stage, where it measures only a kind this run has no ratio for.
  void calibrate() {
    summary_.cost_model =
        "each cell's nominal cost (roofline, overheads, settle) times the measured/nominal ratio "
        "of its component, from a calibration sample, then from each wave";
    cell_cost_.resize(cells_.size(), 0.0);
    cell_measured_.resize(cells_.size(), 0);
    for (std::size_t c = cell_nominal_.size(); c < cells_.size(); ++c)
      cell_nominal_.push_back(nominal_seconds(kind_of(cells_[c]), cells_[c].info.points));
    const auto start = SteadyClock::now();
    std::int64_t sampled = 0;
    for (std::size_t c = 0; c < cells_.size(); ++c) {
      const auto& cell = cells_[c];
      if (!mine(c) || cost_ratio_.count(kind_of(cell)) ||
          std::count(cell.rounds_done.begin(), cell.rounds_done.end(), 0) == 0)
        continue;
      CellRoundSpec spec = cell_spec(c, 0);
      const std::size_t n = spec.points.size(), take = std::min(n, kCalibrationPoints);
      std::vector<GridPoint> sample;  // the middles of `take` equal slices of the cell
      for (std::size_t k = 0; k < take; ++k)
        sample.push_back(spec.points[(2 * k + 1) * n / (2 * take)]);
      spec.points = sample;
      spec.seed = mix_seed({job_.seed, c, 0xca11b4a7eULL});
      const auto measured = measure_cell_round(*ctx_->backend, *ctx_->timer, spec);
      const double nominal = nominal_seconds(kind_of(cell), sample);
      cost_ratio_[kind_of(cell)] =
          nominal > 0
              ? (measured.phases.setup + measured.phases.verify + measured.phases.timing) / nominal
              : 1.0;
      sampled += static_cast<std::int64_t>(sample.size());
    }
    predict_unmeasured();
    double spent = seconds_since(start), total = 0;
    std::int64_t all_sampled = 0;
    HARNESS_CHECK_MPI(MPI_Allreduce(&spent, &total, 1, MPI_DOUBLE, MPI_SUM, comm_));
    HARNESS_CHECK_MPI(MPI_Allreduce(&sampled, &all_sampled, 1, MPI_INT64_T, MPI_SUM, comm_));
    if (all_sampled == 0) return;
    share_cost_ratios();
    summary_.calibration_s += total;
    summary_.calibration_points += all_sampled;
    if (rank_ != 0) return;
    campaign_->charge(total / size_, size_);
    if (!options_.quiet)
      std::cerr << "acquire: calibrated the cost model on " << all_sampled
                << " points (a sample of one cell per component and target; not stored) in "
                << std::fixed << std::setprecision(1) << total / size_ << " s\n"
                << std::defaultfloat;
  }

  // Each cell's wave load from its points and its owner's predicted cost, the same on every
  // rank. Collective.
  [[nodiscard]] std::vector<double> wave_loads() const {
    std::vector<double> cost = cell_cost_;  // each rank knows its own cells' costs
    HARNESS_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, cost.data(), static_cast<int>(cost.size()),
                                    MPI_DOUBLE, MPI_MAX, comm_));
    std::vector<double> load;
    for (std::size_t c = 0; c < cells_.size(); ++c)
      load.push_back(wave_load(cells_[c].points(), cost[c]));
    return load;
  }

  // The device-seconds one wave is predicted to hold: the slowest rank's predicted cell costs
  // times every device held while it runs. Collective.
  [[nodiscard]] double wave_prediction(const Wave& w) const {
    double my_cost = 0, slowest = 0;
    for (std::size_t c = w.first; c < w.end; ++c)
      if (mine(c) && !cells_[c].done(w.round)) my_cost += cell_cost_[c];
    HARNESS_CHECK_MPI(MPI_Allreduce(&my_cost, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm_));
    return slowest * size_ * slots_;
  }

  // Reserves wave `w` against the budget on rank 0. nullopt: the time limit or the budget stops
  // the campaign; 0: nothing left to measure in this wave; 1: go.
  std::optional<int> reserve(const Wave& w) {
    if (!left(w)) return 0;
    const double predicted = wave_prediction(w), estimate = predicted * kReservationMargin;
    wave_wall_estimate_ = estimate / size_;
    wave_predicted_wall_ = predicted / size_;
    int go = 1;
    const double margin = time_limit_margin(wave_walls_, wave_predicted_wall_);
    const double ends_at = seconds_since(started_) + wave_predicted_wall_ * margin;
    if (rank_ == 0 && options_.time_limit_s > 0 && ends_at > options_.time_limit_s) {
      char text[384];
      std::snprintf(text, sizeof(text),
                    "time limit: the next wave of round %d would end about %.0f s into this run "
                    "(%.0f s predicted x %.2f, %s), after --time-limit %.0f s; stopping before it "
                    "(everything measured stays; the same command resumes)",
                    w.round, ends_at, wave_predicted_wall_, margin,
                    wave_walls_.empty() ? "no wave of this run measured yet"
                                        : "the largest overrun of this run's recent waves",
                    options_.time_limit_s);
      summary_.stopped_by = "time_limit", summary_.stop_reason = text;
      campaign_->set_phase("stopped: time limit");
      go = 0;
    } else if (rank_ == 0) {
      try {
        campaign_->reserve("round " + std::to_string(w.round), estimate, size_);
      } catch (const BudgetError& e) {
        summary_.stopped_by = "budget_stop", summary_.stop_reason = e.what();
        go = 0;
      }
    }
    HARNESS_CHECK_MPI(MPI_Bcast(&go, 1, MPI_INT, 0, comm_));
    return go ? std::optional<int>(1) : std::nullopt;
  }

  // Wave: this rank's cells of the wave; at most `regime_` ranks of a node measure at a time.
  WaveResult measure(const Wave& wave) {
    const int r = wave.round;
    WaveResult out;
    for (int slot = 0; slot < slots_; ++slot) {
      if (slot > 0) HARNESS_CHECK_MPI(MPI_Barrier(ctx_->node));
      if (ctx_->node_rank / regime_ != slot) continue;
      for (std::size_t c = wave.first; c < wave.end; ++c) {
        const auto& cell = cells_[c];
        if (!mine(c) || cell.done(r)) continue;
        const auto spec = cell_spec(c, r);
        // On a terminal, rank 0 shows its current cell and point in place; batch logs get one
        // line per committed round.
        std::size_t point_done = 0;
        const auto live = [&] {
          ++point_done;
          std::cerr << "\racquire: round " << r << ", cell " << cell.info.id << ", point "
                    << point_done << "/" << spec.points.size() << "   " << std::flush;
        };
        const bool show = rank_ == 0 && !options_.quiet && isatty(STDERR_FILENO);
        // Each point is watched for what this cell's points cost so far.
        const double per_point =
            cell_cost_[c] / static_cast<double>(std::max<std::int64_t>(1, cell.points()));
        const auto watch_point = [&] {
          watchdog_.expect("operation",
                           "cell " + cell.info.id + " round " + std::to_string(r) + " point " +
                               std::to_string(point_done) + " of " +
                               std::to_string(spec.points.size()),
                           per_point);
        };
        watch_point();
        out.rounds.push_back(measure_cell_round(*ctx_->backend, *ctx_->timer, spec, [&] {
          if (show)
            live();
          else
            ++point_done;
          watch_point();
        }));
        watchdog_.done("operation");
        if (show) std::cerr << "\n";
        out.cells.push_back(static_cast<int>(c));
        out.points += cell.points();
      }
    }
    return out;
  }

  [[nodiscard]] CellRoundSpec cell_spec(std::size_t c, int r) const {
    const auto& cell = cells_[c];
    CellRoundSpec spec;
    spec.base.geometry = job_.geometry;
    spec.base.target = cell.target->target;
    spec.base.component = cell.component;
    spec.points = cell.info.points;
    spec.round = r;
    spec.iterations = job_.iterations;
    spec.settle = {static_cast<double>(settle_ms_for(job_, ctx_->backend->name())),
                   static_cast<double>(capped_settle_ms_for(job_, ctx_->backend->name()))};
    spec.weight_banks = cell.target->weight_banks;
    spec.seed = mix_seed({job_.seed, c, static_cast<std::uint64_t>(r)});
    return spec;
  }

  // Commit: every rank writes its cell rounds of the wave; rank 0 accounts records, device time
  // and measured costs in the campaign state and prints progress.
  void commit(int r, const WaveResult& wave, SteadyClock::time_point wave_start,
              SteadyClock::time_point measure_start) {
    double phases[3] = {0, 0, 0}, slowest[3] = {0, 0, 0}, total[3] = {};  // setup, verify, timing
    // What each of this rank's rounds cost, for the campaign's accounting (rank 0's).
    struct RoundCost {
      int cell, round, experts;
      double seconds;
      std::int64_t point_rounds;
    };
    std::vector<RoundCost> round_costs;
    RecordCounts mine_rows;
    std::vector<std::pair<int, const CellRound*>> mine;
    std::map<Kind, std::pair<double, double>> wave_ratio;  // measured and nominal seconds
    for (std::size_t i = 0; i < wave.rounds.size(); ++i) {
      const auto& m = wave.rounds[i];
      const auto c = static_cast<std::size_t>(wave.cells[i]);
      const double cost = m.phases.setup + m.phases.verify + m.phases.timing;
      cell_cost_[c] = cost;  // the next wave of this cell costs what this one did
      cell_measured_[c] = 1;
      auto& ratio = wave_ratio[kind_of(cells_[c])];
      ratio.first += cost;
      ratio.second += cell_nominal_[c];
      round_costs.push_back({wave.cells[i], r, cells_[c].component == Component::experts ? 1 : 0,
                             cost, cells_[c].points()});
      phases[0] += m.phases.setup;
      phases[1] += m.phases.verify;
      phases[2] += m.phases.timing;
      mine_rows +=
          {static_cast<std::int64_t>(m.samples.size()), static_cast<std::int64_t>(m.medians.size()),
           static_cast<std::int64_t>(m.checks.size())};
      mine.emplace_back(wave.cells[i], &m);
    }
    // The cells not measured yet are predicted from this wave's cost ratio of their kind: the
    // cells of a round run in order, so the next ones lie closest to this wave's.
    for (const auto& [kind, seconds] : wave_ratio)
      if (seconds.second > 0) cost_ratio_[kind] = seconds.first / seconds.second;
    predict_unmeasured();
    share_cost_ratios();
    HARNESS_CHECK_MPI(MPI_Allreduce(phases, slowest, 3, MPI_DOUBLE, MPI_MAX, comm_));
    HARNESS_CHECK_MPI(MPI_Allreduce(phases, total, 3, MPI_DOUBLE, MPI_SUM, comm_));
    summary_.phases.setup += total[0];
    summary_.phases.verify += total[1];
    summary_.phases.timing += total[2];
    std::int64_t send[3] = {mine_rows.samples, mine_rows.medians, mine_rows.checks},
                 recv[3] = {0, 0, 0};
    HARNESS_CHECK_MPI(MPI_Allreduce(send, recv, 3, MPI_INT64_T, MPI_SUM, comm_));
    const RecordCounts all_rows{recv[0], recv[1], recv[2]};
    summary_.timed_forwards += all_rows.samples;
    // Activity records the tracer dropped since the last wave, summed over ranks.
    std::int64_t my_dropped = static_cast<std::int64_t>(ctx_->timer->dropped() - dropped_seen_),
                 all_dropped = 0;
    dropped_seen_ = ctx_->timer->dropped();
    HARNESS_CHECK_MPI(MPI_Allreduce(&my_dropped, &all_dropped, 1, MPI_INT64_T, MPI_SUM, comm_));
    if (rank_ == 0) campaign_->dropped(all_dropped);
    const auto all_costs = gather_vectors(comm_, round_costs, 0);
    if (rank_ == 0) {
      std::vector<CampaignState::WaveRound> rounds;
      for (const auto& part : all_costs)
        for (const auto& rc : part)
          rounds.push_back({cells_[static_cast<std::size_t>(rc.cell)].info.id, rc.round,
                            rc.experts != 0, rc.seconds, rc.point_rounds});
      campaign_->encoded(all_rows, rounds);
    }
    file_->commit(mine);
    for (const int c : wave.cells)
      cells_[static_cast<std::size_t>(c)].rounds_done[static_cast<std::size_t>(r)] = 1;
    const double left = predicted_seconds_left();
    int my_rounds = static_cast<int>(wave.rounds.size()), all_rounds = 0;
    HARNESS_CHECK_MPI(MPI_Allreduce(&my_rounds, &all_rounds, 1, MPI_INT, MPI_SUM, comm_));
    summary_.rounds_measured += all_rounds;
    // Point-rounds of the wave, and those whose settle was extended (clocks held down).
    std::int64_t my_points[2] = {wave.points, 0}, all_points[2] = {0, 0};
    for (const auto& m : wave.rounds) my_points[1] += m.settles_extended;
    HARNESS_CHECK_MPI(MPI_Allreduce(my_points, all_points, 2, MPI_INT64_T, MPI_SUM, comm_));
    done_points_ += all_points[0];
    summary_.settles_extended += all_points[1];
    if (rank_ != 0) return;
    campaign_->committed(seconds_since(wave_start), size_);
    if (options_.quiet || all_rounds == 0) return;
    std::cerr << "acquire: committed round " << r << ": " << done_points_ << "/" << total_points_
              << " point-rounds, elapsed " << static_cast<int>(seconds_since(measure_start))
              << " s, ETA " << static_cast<int>(left) << " s (slowest rank: setup "
              << static_cast<int>(slowest[0]) << " s, verify " << static_cast<int>(slowest[1])
              << " s, timing " << static_cast<int>(slowest[2]) << " s), device time "
              << campaign_->consumed_seconds() / 3600 << " of "
              << campaign_->budget_seconds() / 3600 << " GPU-hours\n";
  }

  // Wall seconds the cell rounds left take at their predicted costs (collective): the slowest
  // rank's, its node's ranks taking turns as the placement regime says. Refinement comes on top.
  [[nodiscard]] double predicted_seconds_left() const {
    double mine_left = 0, slowest = 0;
    for (std::size_t c = 0; c < cells_.size(); ++c)
      if (mine(c))
        for (int q = 0; q < job_.rounds; ++q)
          if (!cells_[c].done(q)) mine_left += cell_cost_[c];
    HARNESS_CHECK_MPI(MPI_Allreduce(&mine_left, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm_));
    return slowest * slots_;
  }

  // Whether rank 0 stopped the run before a wave (the budget or the time limit). Collective.
  bool stopped() {
    int stopped = summary_.stopped_by.empty() ? 0 : 1;
    HARNESS_CHECK_MPI(MPI_Bcast(&stopped, 1, MPI_INT, 0, comm_));
    return stopped != 0;
  }

  // Collectives: the deployments' NCCL (or MPI host) collectives, from the same plan.
  void collectives() {
    const auto start = SteadyClock::now();
    const auto coll =
        measure_collectives(comm_, plan_, ctx_->device, *file_, *ctx_->timer, &watchdog_);
    double mine = seconds_since(start);
    HARNESS_CHECK_MPI(MPI_Allreduce(&mine, &summary_.collectives_s, 1, MPI_DOUBLE, MPI_SUM, comm_));
    // Every device was held until the last rank finished (the reduction waited for it).
    if (campaign_) campaign_->charge(seconds_since(start), size_);
    summary_.collective_tables = coll.tables;
    summary_.collectives_skipped = coll.skipped;
    if (campaign_) campaign_->set_phase("complete");
  }

  AcquireSummary finish(SteadyClock::time_point t0, bool complete) {
    file_->write_provenance_end(json{{"rank", rank_},
                                     {"ended_utc", utc_now()},
                                     {"complete", complete},
                                     {"device_state_after", ctx_->backend->live_state()}}
                                    .dump());
    count_snapshots();
    summary_.file = path_;
    summary_.backend = ctx_->backend->name();
    summary_.cells = static_cast<int>(cells_.size());
    summary_.point_rounds_measured = done_points_ - resumed_points_;
    summary_.device_seconds_consumed = campaign_ ? campaign_->consumed_seconds() : 0;
    if (complete) {
      summary_.points = total_points_ / std::max(1, job_.rounds);
      summary_.wall_s = seconds_since(t0);
    }
    return summary_;
  }

  MPI_Comm comm_;
  const JobSpec& job_;
  const AcquireOptions& options_;
  // What options_.time_limit_s counts from.
  const SteadyClock::time_point started_ = SteadyClock::now();
  std::unique_ptr<RankContext> ctx_;
  int rank_ = 0, size_ = 1;
  Plan plan_;
  std::unique_ptr<FileLock> writer_;  // rank 0 holds writer.lock for the whole run
  std::string path_;
  FileIdentity identity_;
  std::set<std::string> refinement_ended_;  // rank 0: tables whose end of refinement was reported
  std::set<std::string> anchors_reported_;  // rank 0: tables whose anchors this run reported
  std::unique_ptr<AcquisitionFile> file_;
  std::vector<Cell> cells_;
  std::unique_ptr<CampaignState> campaign_;
  std::optional<SnapshotRestore> restored_;  // rank 0: the file this run replaced by its snapshot
  DeviceChange device_change_;               // rank 0: devices this run adds to the campaign's
  int regime_ = 1, slots_ = 1;
  nlohmann::json placement_;  // how this node's regime was decided (provenance)
  Watchdog watchdog_;
  double wave_wall_estimate_ = 0;           // seconds the reserved wave may take (with margin)
  double wave_predicted_wall_ = 0;          // seconds it is predicted to take
  std::vector<WaveWall> wave_walls_;        // this run's waves: predicted and measured wall time
  std::uint64_t dropped_seen_ = 0;          // the timer's dropped records already accounted
  std::vector<double> cell_cost_;           // seconds of one round of each of this rank's cells
  std::vector<double> cell_nominal_;        // their nominal seconds (the model's shape)
  std::vector<std::int8_t> cell_measured_;  // cell_cost_ measured by this run, not predicted
  std::map<Kind, double> cost_ratio_;       // measured / nominal seconds, latest per kind
  std::int64_t total_points_ = 0, done_points_ = 0, resumed_points_ = 0;
  AcquireSummary summary_;
};

}  // namespace

AcquireSummary acquire(MPI_Comm comm, const JobSpec& job, const AcquireOptions& options) {
  return Acquisition(comm, job, options).run();
}

}  // namespace moe
