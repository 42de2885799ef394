// harness colocate: the co-location validity gate on every node of the allocation.
#include <filesystem>
#include <iostream>

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
  jo.add_to(desc);
  desc.add_options()("out", po::value(&o.out_dir),
                     "directory of colocation.h5 (default: <out_root>/acquisitions/<variant>)")(
      "out-root", po::value(&jo.out_root), "bundle root receiving <variant>/colocation.yaml")(
      "interval", po::value(&o.interval_s)->default_value(2.0),
      "clean interval of the throughput measurement, s")(
      "calibration", po::value(&o.calibration_s)->default_value(0.5),
      "calibration run before each interval, s")("window",
                                                 po::value(&o.window_forwards)->default_value(50),
                                                 "reference forwards in the family-share window")(
      "quiet", po::bool_switch(&o.quiet), "no progress lines")(
      "keep-launcher-binding", po::bool_switch(&o.keep_launcher_binding),
      "bind each rank within the CPU mask mpirun/srun gave it, not the job's whole cpuset");
  po::positional_options_description pos;
  pos.add("job", 1);
  if (!parse(args, desc, pos)) return 0;  // --help was printed
  const auto job = jo.load();
  if (o.out_dir.empty()) o.out_dir = default_acquisition_dir(job);
  MpiSession mpi;
  return mpi.run_or_abort("colocate", [&](int rank) {
    const auto verdict = moe::colocate(MPI_COMM_WORLD, job, o);
    if (rank != 0) return;
    const auto variant_dir = std::filesystem::path(job.out_root) / job.variant;
    publish_colocation(variant_dir, verdict);
    std::cout << "colocate: " << verdict["label"].get<std::string>() << "\n"
              << "  verdict: " << (verdict["passed"].get<bool>() ? "passed" : "FAILED (stop)")
              << ", allowed regime "
              << (verdict["allowed_regime"].is_null() ? std::string("none")
                                                      : verdict["allowed_regime"].dump())
              << "\n";
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
                << " reference forwards/s, shares";
      for (const auto& [family, share] : solo["shares"].items())
        std::cout << " " << family << "=" << share.get<double>();
      std::cout << "\n";
    }
    std::cout << "  written: " << (std::filesystem::path(o.out_dir) / "colocation.h5").string()
              << ", " << (variant_dir / bundle_format::kColocationFile).string() << "\n";
  });
}

}  // namespace moe::cli
