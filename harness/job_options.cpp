#include <iostream>

#include "core/hf_config.h"
#include "harness/commands.h"

namespace po = boost::program_options;

namespace moe::cli {

void JobOptions::add_to(po::options_description& desc, bool measurement) {
  desc.add_options()("job", po::value(&job_path), "job YAML (default: the embedded default job)")(
      "tp", po::value(&tp), "TP degrees, e.g. 1,2 (overrides the job)")(
      "dp", po::value(&dp), "DP degrees, e.g. 1,2 (overrides the job)")(
      "ep", po::value(&ep), "EP filter over TP*DP, e.g. 2")(
      "rank", po::value(&ranks), "rank filter within each deployment, e.g. 0")(
      "backend", po::value(&backend),
      "auto | cpu_reference | cublas_grouped | native | staircase_model (test double)")(
      "model-config", po::value(&model_config),
      "geometry from a Hugging Face config.json (Qwen3-MoE, DeepSeek-V3, Mixtral; overrides the "
      "job's model)");
  if (!measurement) return;
  desc.add_options()("rounds", po::value(&rounds), "independent rounds (overrides the job)")(
      "iterations", po::value(&iterations), "minimum forwards per round (overrides the job)")(
      "grid-factor", po::value(&grid_factor), "geometric grid factor (overrides the job)")(
      "components", po::value(&components),
      "measure only these components, e.g. gate_routing (collectives are measured either way)")(
      "gpu-hours", po::value(&gpu_hours), "device-time budget in GPU-hours (overrides the job)");
}

JobSpec JobOptions::load() const {
  JobSpec job = job_path.empty() ? default_job() : load_job_file(job_path);
  JobOverrides o;
  if (!tp.empty()) o.tp = parse_int_list(tp, "--tp");
  if (!dp.empty()) o.dp = parse_int_list(dp, "--dp");
  if (!ep.empty()) o.ep = parse_int_list(ep, "--ep");
  if (!ranks.empty()) o.ranks = parse_int_list(ranks, "--rank");
  if (rounds != 0) o.rounds = rounds;
  if (iterations != 0) o.iterations = iterations;
  if (grid_factor != 0) o.grid_factor = grid_factor;
  if (!backend.empty()) o.backend = backend;
  if (!components.empty()) o.components = parse_component_list(components, "--components");
  if (!out_root.empty()) o.out_root = out_root;
  if (gpu_hours != 0) o.gpu_hours = gpu_hours;
  if (!model_config.empty()) {
    try {
      o.geometry = geometry_from_hf_config_file(model_config);
    } catch (const std::invalid_argument& e) {
      throw JobError(std::string("--model-config: ") + e.what());
    }
  }
  apply_overrides(job, o);
  return job;
}

std::optional<po::variables_map> parse(const Args& args, po::options_description& desc,
                                       const po::positional_options_description& pos) {
  desc.add_options()("help,h", "show this help");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
  if (vm.count("help")) {
    std::cout << desc;
    return std::nullopt;
  }
  po::notify(vm);
  return vm;
}

}  // namespace moe::cli
