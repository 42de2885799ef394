// harness: measurement harness for Mixture-of-Experts layers. See README.md and docs/cli.md.
#include <algorithm>
#include <boost/program_options/errors.hpp>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>

#include "core/files.h"
#include "harness/commands.h"
#include "ranks/git_revision.h"

namespace {

const std::map<std::string, std::pair<std::function<int(const moe::cli::Args&)>, const char*>>&
commands() {
  static const std::map<std::string,
                        std::pair<std::function<int(const moe::cli::Args&)>, const char*>>
      all = {
          {"plan", {moe::cli::plan, "print the grid, forward counts and device-time estimate"}},
          {"acquire",
           {moe::cli::acquire,
            "measure the grid on every MPI rank into one HDF5 file, then publish"}},
          {"publish",
           {moe::cli::publish, "turn an acquisition file into bundles (meta.yaml + CSV)"}},
          {"lookup", {moe::cli::lookup, "query a bundle: component time in microseconds"}},
          {"colocate", {moe::cli::colocate, "run the co-location validity gate on every node"}},
          {"report", {moe::cli::report, "one self-contained HTML page with plots of a bundle"}},
          {"bench",
           {moe::cli::bench,
            "GPU backends against this device's measured roofline (bench experts)"}},
          {"validate",
           {moe::cli::validate,
            "re-measure fresh random held-out points of a bundle on this machine"}},
          {"inspect",
           {moe::cli::inspect,
            "coverage, failed points, verdict and sanity block of a file or bundle"}},
      };
  return all;
}

void usage(std::ostream& os) {
  os << "usage: harness <command> [options]   (harness <command> --help)\n\ncommands:\n";
  std::size_t width = 0;
  for (const auto& [name, entry] : commands()) width = std::max(width, name.size());
  for (const auto& [name, entry] : commands())
    os << "  " << std::left << std::setw(static_cast<int>(width) + 2) << name << entry.second
       << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(std::cout);
    return 0;
  }
  if (name == "--version") {
    std::cout << "harness " << moe::git_revision() << "\n";
    return 0;
  }
  auto it = commands().find(name);
  if (it == commands().end()) {
    std::cerr << "harness: unknown command '" << name << "'\n";
    usage(std::cerr);
    return 2;
  }
  try {
    return it->second.first(moe::cli::Args(argv + 2, argv + argc));
  } catch (const boost::program_options::error& e) {
    std::cerr << "harness " << name << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "harness " << name << ": error: " << moe::printable_text(e.what()) << "\n";
    return 1;
  }
}
