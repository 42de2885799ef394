// harness colocate: the co-location validity gate on every node of the allocation.
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>

#include "bundle/bundle_meta.h"
#include "bundle/format.h"
#include "harness/commands.h"
#include "harness/mpi_session.h"
#include "ranks/colocate.h"

namespace po = boost::program_options;

namespace moe::cli {

int colocate(const Args& args) {
  JobOptions jo;
  ColocateOptions o;
  po::options_description desc("mpirun -np N harness colocate [JOB] [options]");
  jo.add_to(desc, false);
  bool quick = false;
  const GateProfile defaults;
  std::optional<double> warmup, measure;
  std::optional<int> intervals, window;
  desc.add_options()("out", po::value(&o.out_dir),
                     "directory of colocation.h5 (default: <out_root>/acquisitions/<variant>)")(
      "out-root", po::value(&jo.out_root), "bundle root receiving <variant>/colocation.yaml")(
      "quick", po::bool_switch(&quick),
      "the quick profile (0.5 s warm-up, 2 s in 4 intervals) for CI and smoke runs")(
      "warmup", po::value<double>()->notifier([&](double v) { warmup = v; }),
      "warm-up before each phase's intervals, s (default 60)")(
      "measure", po::value<double>()->notifier([&](double v) { measure = v; }),
      "clean measurement of each phase, s (default 240)")(
      "intervals", po::value<int>()->notifier([&](int v) { intervals = v; }),
      "intervals the clean measurement is split into (default 8)")(
      "window", po::value<int>()->notifier([&](int v) { window = v; }),
      "reference forwards in each interval's family-share window (default 50)")(
      "min-clock-fraction", po::value(&o.limits.min_clock_fraction)->default_value(0.80),
      "contaminated when the SM clock is below this fraction of its maximum")(
      "max-foreign-load", po::value(&o.limits.max_foreign_load_per_cpu)->default_value(0.5),
      "contaminated when the host load beyond the gate's busy ranks exceeds this per CPU")(
      "quiet", po::bool_switch(&o.quiet), "no progress lines")(
      "keep-launcher-binding", po::bool_switch(&o.keep_launcher_binding),
      "bind each rank within the CPU mask mpirun/srun gave it, not the job's whole cpuset");
  po::positional_options_description pos;
  pos.add("job", 1);
  if (!parse(args, desc, pos)) return 0;  // --help was printed
  o.profile = quick ? GateProfile::quick() : defaults;
  if (warmup || measure || intervals || window) o.profile.name = "custom";
  if (warmup) o.profile.warmup_s = *warmup;
  if (measure) o.profile.measure_s = *measure;
  if (intervals) o.profile.intervals = *intervals;
  if (window) o.profile.window_forwards = *window;
  if (o.profile.warmup_s < 0 || o.profile.measure_s <= 0 || o.profile.intervals < 1 ||
      o.profile.window_forwards < 1)
    throw std::invalid_argument(
        "colocate: --warmup must be >= 0, --measure > 0, --intervals and --window >= 1");
  if (o.limits.min_clock_fraction < 0 || o.limits.min_clock_fraction > 1 ||
      o.limits.max_foreign_load_per_cpu < 0)
    throw std::invalid_argument(
        "colocate: --min-clock-fraction must be in [0, 1] and --max-foreign-load >= 0");
  const auto job = jo.load();
  if (o.out_dir.empty()) o.out_dir = default_acquisition_dir(job);
  MpiSession mpi;
  int status = kGatePassed;
  mpi.run_or_abort("colocate", [&](int rank) {
    const auto verdict = moe::colocate(MPI_COMM_WORLD, job, o);
    if (rank == 0) status = gate_exit_status(verdict);
    HARNESS_CHECK_MPI(MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (rank != 0) return;
    const auto variant_dir = std::filesystem::path(job.out_root) / job.variant;
    publish_colocation(variant_dir, verdict);
    std::cout << "colocate: " << verdict["label"].get<std::string>() << "\n"
              << "  verdict: " << (verdict["passed"].get<bool>() ? "passed" : "FAILED (stop)")
              << ", allowed regime "
              << (verdict["allowed_regime"].is_null() ? std::string("none")
                                                      : verdict["allowed_regime"].dump())
              << " (profile " << o.profile.name << ")\n";
    for (const auto& n : verdict["nodes"]) {
      std::cout << "  node " << n["host"].get<std::string>() << ": " << n["ranks_on_node"]
                << " ranks";
      if (n.contains("regimes_tried"))
        for (const auto& r : n["regimes_tried"])
          std::cout << "; " << r["regime"] << "-way " << (r["passed"].get<bool>() ? "pass" : "fail")
                    << " (T ratio " << r["throughput_ratio"].get<double>()
                    << (r["reason"].get<std::string>().empty()
                            ? ""
                            : ", " + r["reason"].get<std::string>())
                    << ")";
      std::cout << "\n";
      const auto& solo = n.contains("solo") ? n["solo"] : n["regimes_tried"][0]["solo"];
      std::cout << "    solo: T " << solo["throughput_per_s"].get<double>()
                << " reference forwards/s (interval spread "
                << 100 * solo["throughput_spread"].get<double>() << "%), shares";
      for (const auto& [family, share] : solo["shares"].items())
        std::cout << " " << family << "=" << share.get<double>();
      std::cout << "\n";
    }
    std::cout << "  written: " << (std::filesystem::path(o.out_dir) / "colocation.h5").string()
              << ", " << (variant_dir / bundle_format::kColocationFile).string() << "\n";
    if (status != kGatePassed)
      std::cout << "  exit status " << status
                << (status == kGateUnclassified
                        ? ": a solo window is unclassifiable; extend ranks/operator_families.yaml "
                          "with the kernels named above"
                        : ": the gate stopped; acquire refuses several ranks per node with this "
                          "verdict (run one rank per node, or fix the node and run colocate again)")
                << "\n";
  });
  return status;
}

}  // namespace moe::cli
