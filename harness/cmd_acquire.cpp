// harness acquire: measures a job's grid on every MPI rank into one shared HDF5 file.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <vector>

#include "bundle/summary.h"
#include "core/checked_call.h"
#include "core/statistics.h"
#include "harness/commands.h"
#include "harness/mpi_session.h"
#include "ranks/acquire.h"
#include "ranks/elapsed.h"

namespace po = boost::program_options;

namespace moe::cli {

namespace {

// Where the run's time went: rank-seconds per phase (summed over ranks) and their shares of the
// ranks' wall time, and the rate of the timed part.
void print_time_shares(const AcquireSummary& s, double publish_s, int ranks, std::ostream& os) {
  const double held = s.wall_s * ranks + publish_s;
  const double named = s.phases.setup + s.phases.verify + s.phases.timing + s.calibration_s +
                       s.refinement_s + s.collectives_s + publish_s;
  const auto line = [&](const char* what, double seconds) {
    os << "    " << std::left << std::setw(13) << what << std::right << std::setw(9)
       << std::setprecision(1) << seconds << " s " << std::setw(6)
       << (held > 0 ? 100.0 * seconds / held : 0.0) << " %\n";
  };
  os << std::fixed << "  time (rank-seconds over " << ranks << " ranks, wall "
     << std::setprecision(1) << s.wall_s << " s; shares of " << held << " rank-seconds):\n";
  line("setup", s.phases.setup);
  line("verification", s.phases.verify);
  line("timing", s.phases.timing);
  line("calibration", s.calibration_s);
  line("refinement", s.refinement_s);
  line("collectives", s.collectives_s);
  line("publish", publish_s);
  line("other", std::max(0.0, held - named));
  os << "  timed forwards: " << s.timed_forwards << " at " << std::setprecision(0)
     << (s.phases.timing > 0 ? static_cast<double>(s.timed_forwards) / s.phases.timing : 0.0)
     << " forwards per rank-second of timing; calibration: " << s.calibration_points
     << " points, not stored; wave reservations: " << s.cost_model << "\n";
}

void print_summary(const AcquireSummary& s, const StoredAcquisition& acq, std::ostream& os) {
  const auto cells = summarize(acq);
  int complete = 0, checked = 0, failed = 0, unsteady = 0;
  double max_change = 0, max_spread = 0;
  std::vector<double> clocks;
  std::size_t points = 0;
  for (const auto& c : cells) {
    complete += c.complete() ? 1 : 0;
    checked += c.checked_points;
    failed += c.failed_points;
    max_change = std::max(max_change, c.max_relative_change);
    unsteady += c.unsteady_points;
    max_spread = std::max(max_spread, c.max_run_spread);
    for (const auto& p : c.points) {
      points += p.time_us ? 1 : 0;
      if (p.sm_clock_mean_mhz) clocks.push_back(*p.sm_clock_mean_mhz);
    }
  }
  std::ostringstream clock;
  if (const auto range = spread(clocks))
    clock << "the points ran at " << std::lround(range->min) << "-" << std::lround(range->max)
          << " MHz (median " << std::lround(range->median)
          << "; SM 0's mean over each point's forwards), recorded at " << clocks.size() << " of "
          << points << " measured points";
  else
    clock << "not recorded (the backend has no device clock)";
  os << "acquire: " << s.file << "\n"
     << "  backend " << s.backend << ", " << s.cells << " cells (" << complete << " complete), "
     << s.points << " points\n"
     << "  cell rounds measured now " << s.rounds_measured << ", resumed " << s.rounds_resumed
     << ", wall " << std::fixed << std::setprecision(1) << s.wall_s << " s\n"
     << "  B/2B weight-bank control: " << checked << " expert points checked, " << failed
     << " failed, max relative change " << std::setprecision(4) << max_change
     << unsteady_runs(unsteady, max_spread) << "\n"
     << "  settle: extended at " << s.settles_extended << " of " << s.point_rounds_measured
     << " point-rounds measured now (the power or thermal policy held the clocks down)\n"
     << "  clock: " << clock.str() << "\n"
     << "  placement: " << s.colocation << "\n"
     << "  device time consumed (campaign): " << s.device_seconds_consumed / 3600 << " GPU-hours\n"
     << "  collectives: " << s.collective_tables << " target tables measured now\n";
  for (const auto& skip : s.collectives_skipped) os << "  collectives skipped: " << skip << "\n";
  os << "  crash snapshots: " << s.snapshots << " taken, " << std::setprecision(2) << s.snapshot_s
     << " s copying on rank 0 (every rank waits)\n";
  if (!s.restored.empty()) os << "  restored: " << s.restored << "\n";
  os << sanity_of(acq, cells).to_text();
}

}  // namespace

int acquire(const Args& args) {
  JobOptions jo;
  std::string out;
  bool quiet = false, no_publish = false, samples = false, resume = false, accept = false,
       keep_binding = false, unverified = false, raise_budget = false;
  double max_age_h = 168, time_limit_s = 0;
  WatchdogLimits watchdog;
  po::options_description desc("mpirun -np N harness acquire [JOB] [options]");
  jo.add_to(desc);
  desc.add_options()("out", po::value(&out),
                     "acquisition directory (default: <out_root>/acquisitions/<variant>)")(
      "quiet", po::bool_switch(&quiet), "no progress lines")(
      "out-root", po::value(&jo.out_root), "bundle root for the publisher (overrides the job)")(
      "no-publish", po::bool_switch(&no_publish),
      "do not publish bundles after a complete acquisition")("samples", po::bool_switch(&samples),
                                                             "publish samples.jsonl per target")(
      "resume", po::bool_switch(&resume), "require an interrupted campaign in --out to continue")(
      "accept-failures", po::bool_switch(&accept),
      "publish tables that miss the fidelity gate, recorded as accepted-with-failures")(
      "keep-launcher-binding", po::bool_switch(&keep_binding),
      "bind each rank within the CPU mask mpirun/srun gave it, not the job's whole cpuset")(
      "unverified", po::bool_switch(&unverified),
      "measure several ranks per node without a co-location verdict (every entry is marked)")(
      "verdict-max-age", po::value(&max_age_h)->default_value(168),
      "hours after which a co-location verdict is refused as stale")(
      "raise-budget", po::bool_switch(&raise_budget),
      "accept a GPU-hour budget larger than the one the campaign started with (recorded)")(
      "time-limit", po::value(&time_limit_s),
      "seconds this run may take: no wave starts that would end later (exit 4; the same command "
      "resumes), for a call's or an allocation's wall-time limit")(
      "watchdog-factor", po::value(&watchdog.factor)->default_value(10),
      "abort the job when a point, collective or wave takes this many times its expected time")(
      "watchdog-floor", po::value(&watchdog.floor_s)->default_value(300),
      "seconds no point, collective or wave is aborted before");
  po::positional_options_description pos;
  pos.add("job", 1);
  if (!parse(args, desc, pos)) return 0;  // --help was printed
  const auto job = jo.load();             // bad input fails here, before MPI or any device work
  if (out.empty()) out = default_acquisition_dir(job);
  if (!(max_age_h > 0)) throw JobError("--verdict-max-age must be a positive number of hours");
  if (!(watchdog.factor >= 1) || !(watchdog.floor_s > 0))
    throw JobError("--watchdog-factor must be >= 1 and --watchdog-floor > 0 seconds");
  if (!(time_limit_s >= 0)) throw JobError("--time-limit must be a positive number of seconds");

  // Re-running the same command always resumes; --resume also insists that there is a campaign.
  if (resume && !std::filesystem::exists(std::filesystem::path(out) / "campaign.json"))
    throw JobError("--resume: there is no campaign to resume in " + out + " (no campaign.json)");
  std::string command = "harness acquire";
  for (const auto& a : args) command += " " + a;
  int status = 0;
  MpiSession mpi;
  mpi.run_or_abort("acquire", [&](int rank) {
    const auto summary = moe::acquire(MPI_COMM_WORLD, job,
                                      {out, quiet, command, keep_binding, unverified, max_age_h,
                                       raise_budget, time_limit_s, watchdog});
    HARNESS_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (!summary.stopped_by.empty()) {  // exit 3: the budget, 4: the time limit (docs/cli.md)
      if (rank == 0) std::cerr << "harness acquire: " << summary.stop_reason << "\n";
      status = summary.stopped_by == "time_limit" ? 4 : 3;
      return;
    }
    if (rank != 0) return;
    // The rank-0 publisher: every rank's rounds are committed and the file is closed; it is read
    // once for the summary and the bundles.
    const auto acq = read_acquisition(summary.file);
    print_summary(summary, acq, std::cout);
    const auto publish_start = moe::SteadyClock::now();
    if (!no_publish)
      print_publish_report(
          moe::publish(acq, summary.file,
                       {job.out_root, job.variant, samples, accept || job.fidelity.accept_failures,
                        stored_expert_waves}),
          std::cout);
    const double publish_s = moe::seconds_since(publish_start);
    int ranks = 1;
    HARNESS_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
    print_time_shares(summary, publish_s, ranks, std::cout);
  });
  return status;
}

}  // namespace moe::cli
