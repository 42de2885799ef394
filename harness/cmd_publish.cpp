// harness publish: turns an acquisition file into bundles (meta.yaml + CSV per target).
#include <algorithm>
#include <iostream>

#include "bundle/publisher.h"
#include "harness/commands.h"

namespace po = boost::program_options;

namespace moe::cli {

void print_publish_report(const PublishReport& r, std::ostream& os) {
  const auto collectives =
      std::count_if(r.published.begin(), r.published.end(),
                    [](const std::string& t) { return t.ends_with(" collectives"); });
  os << "publish: " << r.variant_dir << ": " << r.published.size() - collectives
     << " component tables and " << collectives << " collective tables published, "
     << r.unchanged.size() << " already published (unchanged)";
  if (!r.anchored.empty())
    os << ", " << r.anchored.size() << " already published with device anchors added";
  if (!r.reanchored.empty())
    os << ", " << r.reanchored.size() << " already published with their device anchors replaced";
  os << "\n";
  for (const auto& t : r.published) os << "  + " << t << "\n";
  for (const auto& t : r.anchored) os << "  + " << t << " (device anchors)\n";
  for (const auto& t : r.reanchored) os << "  ~ " << t << " (device anchors replaced)\n";
}

int publish(const Args& args) {
  std::string h5, out_root, variant;
  bool samples = false, force = false, accept = false;
  po::options_description desc("harness publish ACQUISITION.h5 [options]");
  desc.add_options()("file", po::value(&h5), "acquisition file written by acquire")(
      "out-root", po::value(&out_root), "bundle root (default: the job's out_root)")(
      "variant", po::value(&variant), "variant name (default: the job's variant)")(
      "samples", po::bool_switch(&samples), "also write samples.jsonl per target")(
      "accept-failures", po::bool_switch(&accept),
      "publish tables that miss the fidelity gate, recorded as accepted-with-failures")(
      "force", po::bool_switch(&force), "rejected: published tables are never overwritten");
  po::positional_options_description pos;
  pos.add("file", 1);
  if (!parse(args, desc, pos)) return 0;  // --help was printed
  if (force)
    throw PublishError(
        "--force is not supported: published tables are never overwritten or relabelled; "
        "publish into another --out-root (or --variant) instead");
  if (h5.empty())
    throw PublishError("name the acquisition file to publish (harness publish FILE.h5)");
  print_publish_report(moe::publish(h5, {out_root, variant, samples, accept, stored_expert_waves}),
                       std::cout);
  return 0;
}

}  // namespace moe::cli
