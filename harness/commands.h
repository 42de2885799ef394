// Subcommands of the `harness` executable. Each takes the arguments after its name and returns
// the process exit status; errors are reported as exceptions caught in main().
#pragma once

#include <boost/program_options.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bundle/publisher.h"
#include "core/job_spec.h"
#include "core/refinement.h"
#include "store/acquisition_file.h"

namespace moe::cli {

using Args = std::vector<std::string>;

int plan(const Args& args);
int acquire(const Args& args);
int publish(const Args& args);
int lookup(const Args& args);
int colocate(const Args& args);
int inspect(const Args& args);
int report(const Args& args);
int bench(const Args& args);
int validate(const Args& args);

void print_publish_report(const PublishReport& r, std::ostream& os);

// The launch waves the backend of a stored acquisition declares (kernels' expert_launch_waves)
// for its contract's geometry on the SM count its device recorded: what refinement brackets and
// what the held-out errors are split by (docs/measurement.md#fidelity). Empty where none.
[[nodiscard]] ExpertWaves stored_expert_waves(const StoredAcquisition& acq);

// Options shared by every subcommand that reads a job: [JOB] --tp --dp --ep --rank ...
struct JobOptions {
  std::string job_path;
  std::string tp, dp, ep, ranks, backend, out_root, components, model_config;
  int rounds = 0, iterations = 0;
  double grid_factor = 0, gpu_hours = 0;
  // Every job option (plan, acquire); `measurement` false: only what chooses the geometry, the
  // deployments and the backend (colocate measures one reference forward, not the grid).
  void add_to(boost::program_options::options_description& desc, bool measurement = true);
  [[nodiscard]] JobSpec load() const;
};

// Adds --help to `desc` and parses `args`; prints the help and returns nullopt when asked for it.
// Required options are checked only when no help was asked for.
std::optional<boost::program_options::variables_map> parse(
    const Args& args, boost::program_options::options_description& desc,
    const boost::program_options::positional_options_description& pos);

}  // namespace moe::cli
