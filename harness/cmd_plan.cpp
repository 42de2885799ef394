// harness plan: prints the grid per target and component without touching a GPU.
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "bundle/fidelity.h"
#include "bundle/summary.h"
#include "core/contract.h"
#include "core/planner.h"
#include "harness/commands.h"
#include "kernels/gate_rows.h"
#include "kernels/native_tile_rule.h"
#include "ranks/rank_context.h"
#include "store/acquisition_file.h"
#include "store/campaign.h"

namespace po = boost::program_options;
using nlohmann::json;

namespace moe::cli {

namespace {

// The gate's grid rows that its declared steps added to the local token axis.
std::vector<std::int64_t> gate_step_rows(const TargetPlan& t, const ComponentGrid& gate) {
  std::vector<std::int64_t> out;
  for (const auto& p : gate.points)
    if (!std::binary_search(t.local_tokens.begin(), t.local_tokens.end(), p.tokens))
      out.push_back(p.tokens);
  return out;
}

// Point-rounds the plan measures (grid and held-out points times rounds): experts, then the
// other components.
std::pair<std::int64_t, std::int64_t> planned_point_rounds(const Plan& plan) {
  std::pair<std::int64_t, std::int64_t> n{0, 0};
  for (const auto& t : plan.targets)
    for (const auto& grid : t.components)
      (grid.component == Component::experts ? n.first : n.second) +=
          plan.estimate(t, grid.component).points * plan.job.rounds;
  return n;
}

// The refinement stage each table would get next, from the held-out errors the file holds now (as
// acquire derives it when the stage before has ended; `provisional` while cells of the table are
// left, whose points can change it).
struct StagePreview {
  std::string table;  // target label with component
  std::int64_t grid = 0, remeasure = 0, held_out = 0;
  int stage = 0, misses = 0, within_movement = 0, wave_brackets = 0;
  bool provisional = false;
  std::int64_t point_rounds = 0;
  double held_s = 0;
};

// What a campaign has left: the cell rounds its acquisition file has not committed, each point
// predicted as acquire predicts a cell it has not measured yet (the nominal cost of its backend
// times the campaign's measured/nominal ratio of its kind; nominal where none was measured), and
// the next refinement stage of each table; later stages come on top.
struct CampaignLeft {
  std::int64_t point_rounds = 0;
  int cells = 0;
  double held_s = 0;
  std::vector<StagePreview> next_stage;
  // Tables whose refinement stopped at fidelity.max_added_points with misses it could still
  // refine: a job that raises the cap resumes them (docs/measurement.md#fidelity).
  struct AtCap {
    std::string table;
    std::int64_t added = 0;
    int misses = 0, within_movement = 0;
  };
  std::vector<AtCap> at_cap;
  // What the power cap could add on top: every settle left run on to the capped settle. A ratio
  // measured where the cap did not bite does not contain it (nominal_point_round_seconds).
  double capped_settle_upper_s = 0;
  int capped_settle_ms = 0;
  std::set<std::string> kinds_without_ratio;
};

// StagePreview of every table of `acq` that would get points; each stage's cells cost as acquire
// predicts a cell it has not measured (its nominal cost times the measured ratio of its kind).
void preview_next_stages(const StoredAcquisition& acq, const JobSpec& job,
                         const std::string& backend, const std::map<std::string, double>& ratios,
                         CampaignLeft& left) {
  const auto waves = stored_expert_waves(acq);
  const auto time_steps = expert_time_steps(backend, job);
  // The weight banks of each table's cells (the planned cell's, which its stages share).
  std::map<std::string, int> banks;
  for (const auto& cell : acq.cells) {
    const auto j = json::parse(cell.info.json);
    if (const auto c = parse_component(j.at("component").get<std::string>()))
      banks.try_emplace(Target::from_json(j.at("target")).label(*c), j.value("weight_banks", 2));
  }
  for (const auto& f : evaluate_fidelity(acq, summarize(acq), waves)) {
    const auto next = next_stage_of(job, f, time_steps, waves);
    if (next.empty()) {
      if (!next.misses.empty() && job.fidelity.refine && !next.stage_limit && next.cap_spent)
        left.at_cap.push_back({f.target.label(f.component), f.added_points,
                               static_cast<int>(next.misses.size()), next.within_movement});
      continue;
    }
    StagePreview p;
    p.table = f.target.label(f.component);
    p.stage = f.stages + 1;
    p.grid = static_cast<std::int64_t>(next.step.grid.size());
    p.remeasure = static_cast<std::int64_t>(next.remeasure.size());
    p.held_out = static_cast<std::int64_t>(next.step.held_out.size());
    p.misses = static_cast<int>(next.misses.size());
    p.within_movement = next.within_movement;
    p.wave_brackets = next.step.wave_brackets;
    p.provisional = !f.complete;
    std::vector<GridPoint> points(next.step.grid);
    points.insert(points.end(), next.remeasure.begin(), next.remeasure.end());
    points.insert(points.end(), next.step.held_out.begin(), next.step.held_out.end());
    const auto b = banks.find(p.table);
    const auto ratio = ratios.find(p.table);
    p.point_rounds = static_cast<std::int64_t>(points.size()) * job.rounds;
    p.held_s =
        job.rounds *
        nominal_round_seconds(job, backend, b == banks.end() ? 2 : b->second, f.component, points) *
        (ratio == ratios.end() ? 1.0 : ratio->second);
    left.next_stage.push_back(p);
  }
}

std::optional<CampaignLeft> campaign_left(const std::filesystem::path& dir, const JobSpec& job,
                                          const std::map<std::string, double>& ratios) {
  const auto file = dir / kAcquisitionFile;
  if (!std::filesystem::exists(file)) return std::nullopt;
  const auto acq = read_acquisition(file.string());
  // The backend the campaign measures with, whatever this machine would resolve "auto" to.
  const auto backend = json::parse(acq.contract_json).value("backend", job.backend);
  const double capped_extra_s =
      std::max(0.0, (capped_settle_ms_for(job, backend) - settle_ms_for(job, backend)) / 1000.0);
  CampaignLeft left;
  left.capped_settle_ms = capped_settle_ms_for(job, backend);
  for (const auto& cell : acq.cells) {
    const auto j = json::parse(cell.info.json);
    const auto component = parse_component(j.at("component").get<std::string>());
    if (!component) throw FileError("cell " + cell.info.id + " names no known component");
    const auto kind = Target::from_json(j.at("target")).label(*component);
    const auto ratio = ratios.find(kind);
    const auto rounds_left = std::count(cell.rounds_done.begin(), cell.rounds_done.end(), 0);
    if (rounds_left == 0) continue;
    ++left.cells;
    if (ratio == ratios.end()) left.kinds_without_ratio.insert(kind);
    const double seconds = nominal_round_seconds(job, backend, j.value("weight_banks", 2),
                                                 *component, cell.info.points);
    const auto point_rounds = rounds_left * static_cast<std::int64_t>(cell.info.points.size());
    left.point_rounds += point_rounds;
    left.capped_settle_upper_s += static_cast<double>(point_rounds) * capped_extra_s;
    left.held_s +=
        static_cast<double>(rounds_left) * seconds * (ratio == ratios.end() ? 1.0 : ratio->second);
  }
  preview_next_stages(acq, job, backend, ratios, left);
  return left;
}

json next_stage_json(const std::vector<StagePreview>& stages) {
  json out = json::array();
  for (const auto& p : stages)
    out.push_back({{"table", p.table},
                   {"stage", p.stage},
                   {"grid_points", p.grid},
                   {"remeasured_points", p.remeasure},
                   {"held_out_points", p.held_out},
                   {"misses", p.misses},
                   {"misses_within_run_movement", p.within_movement},
                   {"wave_brackets", p.wave_brackets},
                   {"provisional", p.provisional},
                   {"point_rounds", p.point_rounds},
                   {"estimated_held_s", p.held_s}});
  return out;
}

json plan_json(const Plan& plan, const std::string& backend,
               const std::optional<CampaignProgress>& progress,
               const std::optional<CampaignLeft>& left) {
  json targets = json::array();
  for (const auto& t : plan.targets) {
    json comps = json::array();
    for (const auto& grid : t.components) {
      json pts = json::array();
      for (const auto& p : grid.points)
        pts.push_back(
            {{"tokens", p.tokens}, {"activated", p.activated}, {"assignments", p.assignments}});
      const auto e = plan.estimate(t, grid.component);
      json step_rows = json::array();
      if (grid.component == Component::experts)
        step_rows = step_token_rows(plan.job, t.target, plan.expert_time_steps);
      else if (grid.component == Component::gate_routing)
        step_rows = gate_step_rows(t, grid);
      comps.push_back({{"component", to_string(grid.component)},
                       {"points", pts},
                       {"step_token_rows", step_rows},
                       {"forwards", e.forwards},
                       {"estimated_device_s", e.device_seconds}});
    }
    const auto mem = estimate_memory(plan.job, t);
    targets.push_back(
        {{"target", t.target.to_json()},
         {"local_experts", t.ownership.local_experts},
         {"first_expert", t.ownership.first_expert},
         {"weight_banks", t.weight_banks},
         {"memory_per_rank_bytes",
          {{"weights", mem.weight_bytes}, {"buffers", mem.buffer_bytes}, {"total", mem.total()}}},
         {"components", comps}});
  }
  const auto total = plan.estimate();
  json campaign = nullptr;
  if (const auto& m = progress) {
    const auto planned = planned_point_rounds(plan);
    campaign = {{"expert_point_rounds", m->expert_point_rounds},
                {"expert_point_rounds_planned", planned.first},
                {"local_point_rounds", m->local_point_rounds},
                {"local_point_rounds_planned", planned.second},
                {"device_seconds_consumed", m->device_seconds_consumed},
                {"phase", m->phase},
                {"left", nullptr}};
    if (left) {
      json at_cap = json::array();
      for (const auto& c : left->at_cap)
        at_cap.push_back({{"table", c.table},
                          {"added_points", c.added},
                          {"misses", c.misses},
                          {"misses_within_run_movement", c.within_movement}});
      campaign["left"] = {{"point_rounds", left->point_rounds},
                          {"cells", left->cells},
                          {"estimated_held_s", left->held_s},
                          {"capped_settle_upper_s", left->capped_settle_upper_s},
                          {"kinds_without_ratio", left->kinds_without_ratio},
                          {"next_stage", next_stage_json(left->next_stage)},
                          {"refinement_at_cap", at_cap}};
    }
  }
  return {{"job", plan.job.source},
          {"variant", plan.job.variant},
          {"out_root", plan.job.out_root},
          {"planner_version", kPlannerVersion},
          {"geometry", geometry_json(plan.job.geometry)},
          {"backend", plan.job.backend},
          {"resolved_backend", backend},
          {"expert_time_steps", plan.expert_time_steps},
          {"gate_time_steps", plan.gate_time_steps},
          {"rounds", plan.job.rounds},
          {"iterations", plan.job.iterations},
          {"grid_factor", plan.job.grid_factor},
          {"graph_mode", to_string(plan.job.graph_mode)},
          {"capture_sizes", plan.job.capture_sizes},
          {"capture_sizes_derived", plan.job.capture_sizes_derived},
          {"device_model",
           {{"name", plan.device.name},
            {"bytes_per_s", plan.device.bytes_per_s},
            {"flops_per_s", plan.device.flops_per_s},
            {"l2_bytes", plan.device.l2_bytes},
            {"sm_count", plan.device.sm_count}}},
          {"cost_model", cost_model_description(plan)},
          {"campaign", campaign},
          {"targets", targets},
          {"total",
           {{"points", total.points},
            {"forwards", total.forwards},
            {"estimated_device_s", total.device_seconds},
            {"estimated_held_s", total.held_seconds},
            {"capped_settle_upper_s", total.capped_settle_seconds}}}};
}

// "45 s", "12 min 5 s", "3.2 h", "4.1 days": durations a reader takes in at a glance.
std::string human_duration(double seconds) {
  char buf[64];
  if (seconds < 60)
    std::snprintf(buf, sizeof(buf), "%.3g s", seconds);
  else if (seconds < 3600)
    std::snprintf(buf, sizeof(buf), "%d min %d s", static_cast<int>(seconds / 60),
                  static_cast<int>(seconds) % 60);
  else if (seconds < 86400 * 2)
    std::snprintf(buf, sizeof(buf), "%.3g h", seconds / 3600);
  else
    std::snprintf(buf, sizeof(buf), "%.3g days", seconds / 86400);
  return buf;
}

// Every grid point (--verbose): token rows, and the (A, M) pairs of each experts row.
void print_points(const ComponentGrid& grid, std::ostream& os) {
  if (grid.component != Component::experts) {
    os << "    tokens:";
    for (const auto& p : grid.points) os << " " << p.tokens;
    os << "\n";
    return;
  }
  std::map<std::int64_t, std::vector<GridPoint>> by_n;
  for (const auto& p : grid.points) by_n[p.tokens].push_back(p);
  for (const auto& [n, pts] : by_n) {
    os << "    N=" << n << " (A,M):";
    for (const auto& p : pts) os << " (" << p.activated << "," << p.assignments << ")";
    os << "\n";
  }
}

// One line per component grid by default: its token range and rows.
void print_summary(const Plan& plan, const TargetPlan& t, const ComponentGrid& grid,
                   std::ostream& os) {
  std::set<std::int64_t> rows;
  std::int64_t max_a = 0;
  for (const auto& p : grid.points) rows.insert(p.tokens), max_a = std::max(max_a, p.activated);
  if (rows.empty()) return;
  os << "    " << rows.size() << " token rows " << *rows.begin() << ".." << *rows.rbegin();
  if (grid.component == Component::experts) os << ", A up to " << max_a;
  os << "\n";
  const auto step_rows = grid.component == Component::experts
                             ? step_token_rows(plan.job, t.target, plan.expert_time_steps)
                         : grid.component == Component::gate_routing ? gate_step_rows(t, grid)
                                                                     : std::vector<std::int64_t>{};
  if (step_rows.empty()) return;
  os << "    rows around the backend's time steps:";
  for (const auto n : step_rows) os << " " << n;
  os << "\n";
}

void print_text(const Plan& plan, const std::string& backend, bool verbose,
                const std::optional<CampaignProgress>& progress,
                const std::optional<CampaignLeft>& left, std::ostream& os) {
  const auto& g = plan.job.geometry;
  os << "job " << plan.job.source << ": " << g.name << " (H=" << g.hidden << " I=" << g.intermediate
     << " E=" << g.experts << " k=" << g.top_k << ", shared " << g.shared.count << "x"
     << g.shared.intermediate << "), backend " << plan.job.backend << ", rounds " << plan.job.rounds
     << ", iterations " << plan.job.iterations << ", grid factor " << plan.job.grid_factor << "\n";
  if (backend != plan.job.backend)
    os << "backend " << plan.job.backend << " is " << backend << " here\n";
  os << "experts time steps of " << backend << " (rows per active expert):";
  for (const auto b : plan.expert_time_steps) os << " " << b;
  if (plan.expert_time_steps.empty()) os << " none declared (refinement finds them)";
  os << "\n";
  os << "gate_routing time steps of " << backend << " (rows";
  if (!plan.gate_time_steps.empty())
    os << ", for the " << plan.device.sm_count << " SMs of the " << plan.device.name
       << "; acquire uses its device's";
  os << "):";
  for (const auto b : plan.gate_time_steps) os << " " << b;
  if (plan.gate_time_steps.empty()) os << " none declared (refinement finds them)";
  os << "\n";
  os << "graph mode " << to_string(plan.job.graph_mode) << ", capture sizes"
     << (plan.job.capture_sizes_derived ? " (derived)" : "") << ":";
  for (auto c : plan.job.capture_sizes) os << " " << c;
  os << "\n" << plan.targets.size() << " targets\n";
  for (const auto& t : plan.targets) {
    os << "\ntarget " << t.target.label() << "  TP" << t.target.tp << " DP" << t.target.dp << " EP"
       << t.target.ep << "  experts [" << t.ownership.first_expert << ","
       << t.ownership.first_expert + t.ownership.local_experts << ")  weight banks "
       << t.weight_banks << "\n";
    const auto mem = estimate_memory(plan.job, t);
    const auto gib = [](std::int64_t b) { return static_cast<double>(b) / (1LL << 30); };
    os << "  memory per rank (estimate): " << std::setprecision(3) << gib(mem.total())
       << " GiB (weights " << gib(mem.weight_bytes) << ", buffers " << gib(mem.buffer_bytes)
       << "); acquire refuses a GPU with less\n";
    for (const auto& grid : t.components) {
      const auto e = plan.estimate(t, grid.component);
      os << "  " << std::left << std::setw(14) << to_string(grid.component) << std::right
         << grid.points.size() << " points, " << e.forwards << " forwards, ~"
         << human_duration(e.device_seconds) << "\n";
      if (verbose)
        print_points(grid, os);
      else
        print_summary(plan, t, grid, os);
    }
  }
  const auto total = plan.estimate();
  std::int64_t held_out = 0, cells = 0;
  for (const auto& t : plan.targets)
    for (const auto& grid : t.components)
      held_out += static_cast<std::int64_t>(grid.held_out.size()), ++cells;
  os << "\nheld-out validation: " << held_out << " points (in the total below); refinement may add "
     << plan.job.fidelity.max_added_points << " grid points per cell (" << cells
     << " cells), measured only where held-out errors exceed " << plan.job.fidelity.tolerance * 100
     << "%, and with them up to " << plan.job.fidelity.random_points
     << " fresh held-out points per stage; not in this estimate\n";
  os << "total: " << total.points << " points, " << total.forwards << " forwards, estimated "
     << human_duration(total.device_seconds) << " of timed device work and "
     << human_duration(total.held_seconds) << " of device time held (one "
     << plan.device.name.substr(plan.device.name.find(' ') + 1) << ")\n";
  if (total.capped_settle_seconds > 0)
    os << "  plus up to " << human_duration(total.capped_settle_seconds)
       << " where the power cap holds the clocks down during a settle (it then runs on to "
       << capped_settle_ms_for(plan.job, plan.job.backend) << " ms)\n";
  os << "cost model: " << cost_model_description(plan) << "\n";
  if (const auto& m = progress) {
    const auto planned = planned_point_rounds(plan);
    os << "campaign: " << m->expert_point_rounds << " of " << planned.first
       << " planned experts and " << m->local_point_rounds << " of " << planned.second
       << " other point-rounds measured (refinement's included), "
       << human_duration(m->device_seconds_consumed)
       << " of device time consumed; phase: " << m->phase << "\n";
    if (left) {
      os << "  left: " << left->point_rounds << " point-rounds in " << left->cells
         << " cells, about " << human_duration(left->held_s)
         << " of device time held (each cell's nominal cost times its component's measured "
            "ratio, as acquire predicts it; the next refinement stage below, later ones on top)";
      if (left->capped_settle_upper_s > 0)
        os << ", up to " << human_duration(left->held_s + left->capped_settle_upper_s)
           << " if the power cap runs every settle left on to " << left->capped_settle_ms << " ms";
      if (!left->kinds_without_ratio.empty()) {
        os << "; predicted nominally, no ratio measured:";
        for (const auto& k : left->kinds_without_ratio) os << " " << k;
      }
      os << "\n";
      for (const auto& n : left->next_stage) {
        os << "  next: refinement stage " << n.stage << " of " << n.table << ": +" << n.grid
           << " grid points, " << n.remeasure << " re-measured, " << n.held_out << " held-out ("
           << n.misses << " misses";
        if (n.wave_brackets > 0) os << ", " << n.wave_brackets << " at launch-wave steps";
        if (n.within_movement > 0)
          os << ", " << n.within_movement << " within their runs' movement left";
        os << "), " << n.point_rounds << " point-rounds, about " << human_duration(n.held_s)
           << (n.provisional ? "; provisional: the table's cells left can change it" : "") << "\n";
      }
      for (const auto& c : left->at_cap)
        os << "  refinement of " << c.table << " stopped at fidelity.max_added_points (" << c.added
           << " points added) with " << c.misses << " misses it could refine"
           << (c.within_movement > 0
                   ? " (and " + std::to_string(c.within_movement) + " within their runs' movement)"
                   : "")
           << ": a job that only raises the cap resumes it (plan with that job previews the "
              "stage)\n";
    }
  }
  if (!verbose) os << "(--verbose lists every grid point)\n";
}

}  // namespace

int plan(const Args& args) {
  JobOptions jo;
  std::string format = "text";
  po::options_description desc("harness plan [JOB] [options]");
  jo.add_to(desc);
  std::string campaign;
  bool verbose = false;
  desc.add_options()("format", po::value(&format), "text | json")(
      "verbose", po::bool_switch(&verbose), "list every grid point (text)")(
      "campaign", po::value(&campaign),
      "acquisition directory whose measured costs predict the time (default: acquire's --out, "
      "<out_root>/acquisitions/<variant>)");
  po::positional_options_description pos;
  pos.add("job", 1);
  if (!parse(args, desc, pos)) return 0;  // --help was printed
  if (format != "text" && format != "json") throw JobError("--format must be text or json");
  const auto job = jo.load();
  // The steps are the backend's: "auto" resolves as `acquire` would on this machine.
  const auto backend = resolve_backend(job.backend);
  auto p = make_plan(
      job, std::nullopt, expert_time_steps(backend, job),
      gate_time_steps(backend, nominal_device(backend).sm_count, job.max_num_batched_tokens));
  if (campaign.empty()) campaign = default_acquisition_dir(p.job);
  std::optional<CampaignProgress> progress;
  std::optional<CampaignLeft> left;
  try {
    progress = read_campaign_progress(campaign);
    if (progress) p.measured = progress->measured;
  } catch (const std::runtime_error& e) {
    std::cerr << "harness plan: " << e.what() << "; using the nominal model\n";
  }
  if (progress) try {
      left = campaign_left(campaign, p.job, progress->cost_ratios);
    } catch (const std::runtime_error& e) {
      std::cerr << "harness plan: " << e.what()
                << "; what the campaign has left is not estimated\n";
    }
  if (format == "json")
    std::cout << plan_json(p, backend, progress, left).dump(1) << "\n";
  else
    print_text(p, backend, verbose, progress, left, std::cout);
  return 0;
}

}  // namespace moe::cli
