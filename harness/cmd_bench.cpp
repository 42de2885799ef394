// harness bench experts: the CUDA backends against this device's own roofline.
//
// Rerun (on a GPU node, from a build with CUDA):
//   harness bench experts                        # 3 models x N in {1,16,64,256,1024,4096}
//   harness bench experts --models qwen3-30b-a3b --tokens 1,1024 --csv my.csv
// It first measures this device's copy bandwidth and bf16 GEMM rate, then for every model, N and
// backend: builds the workload with balanced routing (A = expected distinct experts of N tokens
// choosing k of E, M = N*k, EP1), checks it against the CPU reference, and times it with CUPTI
// (sum of the device activities of one forward, the value `acquire` records) over forwards
// that rotate through enough weight banks that no bank stays in L2. Reported: median µs, the
// floor max((weight + activation bytes) / bandwidth, flops / GEMM rate), the ratio to the
// floor and native/cublas_grouped. gate_routing and finalize_copy rows use their byte floors.
//
//   harness bench experts --components experts --tokens 1024 --activated 8,9,16,17
//                                                # off balanced routing: A experts, M = N*k
//   harness bench experts --sweep                # 64 N from 1 to 8192, native, Qwen3-30B-A3B
// prints every point with its kernel configuration and ratio to the floor, then the checks of
// docs/native-backend.md#the-sweep: time close to monotone in N, and no cliff between neighbours.
#include <cxxabi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "bundle/format.h"
#include "core/files.h"
#include "core/hf_config.h"
#include "core/job_spec.h"
#include "core/planner.h"
#include "core/roofline.h"
#include "core/statistics.h"
#include "core/sweep.h"
#include "harness/commands.h"
#include "kernels/device_peaks.h"
#include "kernels/native_tile_rule.h"
#include "kernels/workload.h"
#include "ranks/forward_timer.h"
#include "ranks/protocol.h"

namespace po = boost::program_options;

namespace moe::cli {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

struct Row {
  std::string component, model, backend;
  GridPoint point;
  int banks = 1;
  double median_us = 0, min_us = 0, max_us = 0, max_error = 0;
  std::string kernels;        // "name=us;..." of the forward closest to the median, in start order
  std::string configuration;  // the kernel configuration the workload chose (native: its tile)
  // experts: the launch waves the backend declares for the point ("W13;W2"; empty: none)
  std::string launch_waves;
  // The device during the timed forwards: NVML's SM clock after them, the mean SM clock the
  // device counted over them (clock_stamp, as `acquire` counts it; the two differ under load), and
  // the time the power or thermal policy held the clocks down while they ran
  // ("sm_clock_mhz=1980;sm_clock_mean_mhz=1742;...;power_capped_ms=0").
  std::string device_state;
  Floor floor;
  std::optional<double> native_over_cublas;
};

// "moe::cuda::(anonymous namespace)::expert_gemm<...>(moe::cuda::GemmArgs)" -> "expert_gemm<...>".
std::string short_kernel_name(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && d ? d : mangled;
  std::free(d);
  for (const std::string noise :
       {"moe::cuda::(anonymous namespace)::", "(anonymous namespace)::", "moe::", "void "})
    for (std::size_t at; (at = name.find(noise)) != std::string::npos;)
      name.erase(at, noise.size());
  if (auto paren = name.find('('); paren != std::string::npos && paren > 0) name.resize(paren);
  return name;
}

// What `Row::device_state` says, from the live state before and after the timed forwards and
// the device's clock over them.
std::string device_state_during(const std::map<std::string, std::string>& before,
                                const std::map<std::string, std::string>& after,
                                const std::optional<double>& sm_clock_mhz) {
  std::ostringstream s;
  const auto put = [&](const std::string& key, const std::string& value) {
    s << (s.tellp() > 0 ? ";" : "") << key << "=" << value;
  };
  if (after.contains("sm_clock_mhz")) put("sm_clock_mhz", after.at("sm_clock_mhz"));
  if (sm_clock_mhz)
    put("sm_clock_mean_mhz", std::to_string(static_cast<long>(std::lround(*sm_clock_mhz))));
  for (const char* key : {"power_w", "temperature_c"})
    if (after.contains(key)) put(key, after.at(key));
  for (const char* policy : {"power", "thermal"}) {
    const std::string key = std::string(policy) + "_capped_ns";
    if (before.contains(key) && after.contains(key))
      put(std::string(policy) + "_capped_ms",
          std::to_string((std::stoull(after.at(key)) - std::stoull(before.at(key))) / 1000000));
  }
  return s.str();
}

Row measure(Backend& backend, ForwardTimer& timer, const WorkloadSpec& spec,
            std::shared_ptr<const WeightSet> weights, int iterations, const Settle& settle) {
  Row row;
  row.component = to_string(spec.component);
  row.model = spec.geometry.name;
  row.backend = backend.name();
  row.point = spec.point;
  row.banks = spec.banks;
  auto w = backend.make(spec, std::move(weights));
  row.configuration = w->configuration();
  if (const auto waves = expert_launch_waves(backend.name(), spec.geometry, backend.sm_count());
      waves && spec.component == Component::experts && spec.point.activated > 0)
    row.launch_waves =
        bundle_format::launch_waves_field(waves(spec.point.activated, spec.point.assignments));
  // Correct first: a backend that does not match the reference gets no time.
  for (double e : w->verify()) row.max_error = std::max(row.max_error, e);
  if (!(row.max_error <= backend.tolerance()))
    throw std::runtime_error(backend.name() + " " + row.component + " " + row.model +
                             " N=" + std::to_string(spec.point.tokens) + ": relative error " +
                             std::to_string(row.max_error) + " exceeds the tolerance");
  // The protocol's loop: one rotation of warm-up, then whole rotations of timed forwards, back
  // to back.
  const std::string label = "bench_" + row.component;
  const auto settled =
      settle_forwards(*w, timer, spec.banks, settle, held_down_clock(backend), label);
  const int forwards =
      (std::max(iterations, spec.banks) + spec.banks - 1) / spec.banks * spec.banks;
  const ForwardSegment segments[] = {{spec.banks, spec.banks, false}, {forwards, spec.banks, true}};
  const auto before = backend.live_state();
  const auto run = run_forwards(*w, timer, segments, label, clock_stamps(backend));
  row.device_state = device_state_during(before, backend.live_state(), run.sm_clock_mhz) +
                     ";settle_extended=" + (settled.extended ? "1" : "0") +
                     ";settle_ms=" + std::to_string(std::lround(settled.ms));
  const auto& records = run.records;
  std::vector<double> us;
  for (const auto& r : records) us.push_back(r.value_us);
  if (settled.route_errors + run.route_errors > 0)
    throw std::runtime_error("route flag raised on a valid stimulus");
  if (timer.dropped() != 0) throw std::runtime_error("CUPTI dropped activity records");
  row.median_us = median(us);  // the same median `acquire` publishes
  // Kernel breakdown of the forward closest to the median.
  const auto& typical = *std::min_element(records.begin(), records.end(), [&](auto& a, auto& b) {
    return std::abs(a.value_us - row.median_us) < std::abs(b.value_us - row.median_us);
  });
  std::ostringstream k;
  k << std::fixed << std::setprecision(1);
  for (const auto& [name, t] : typical.activities)
    k << (k.tellp() > 0 ? ";" : "") << short_kernel_name(name) << "=" << t;
  row.kernels = k.str();
  row.min_us = *std::min_element(us.begin(), us.end());
  row.max_us = *std::max_element(us.begin(), us.end());
  return row;
}

// "experts qwen3-30b-a3b N=16 A=82 native": the point and backend a progress or failure line is
// about.
std::string point_label(std::string_view component, const std::string& model, const GridPoint& p,
                        bool with_activated, const std::string& backend) {
  return std::string(component) + " " + model + " N=" + std::to_string(p.tokens) +
         (with_activated ? " A=" + std::to_string(p.activated) : "") + " " + backend;
}

// The CSV's folder, checked before anything is measured: a bench of minutes is not thrown away
// at the end for a mistyped path.
void require_csv_folder(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  const std::string folder = parent.empty() ? "." : parent.string();
  if (!std::filesystem::is_directory(folder))
    throw std::invalid_argument("--csv " + path + ": the folder '" + folder + "' does not exist");
  if (::access(folder.c_str(), W_OK) != 0)
    throw std::invalid_argument("--csv " + path + ": the folder '" + folder + "' is not writable");
}

// Written whole (a temporary file renamed), so a failed write leaves an earlier CSV as it was.
// `device_uuid` names the GPU itself: GPUs of one kind differ by a few percent
// (docs/measurement.md#validating-a-published-bundle), so tools that compare runs check it.
void write_csv(const std::string& path, const std::vector<Row>& rows, const DevicePeaks& peaks,
               const std::string& device, const std::string& device_uuid) {
  std::ostringstream os;
  os << "component,model,backend,tokens,activated,assignments,banks,median_us,min_us,max_us,"
        "floor_us,floor_bound,floor_bytes,floor_flops,ratio_to_floor,native_over_cublas,"
        "max_rel_error,copy_gbps,gemm_tflops,device,kernels,configuration,device_state,"
        "gemm_sm_clock_mhz,launch_waves,device_uuid\n";
  os << std::setprecision(6);
  for (const auto& r : rows) {
    os << r.component << ',' << r.model << ',' << r.backend << ',' << r.point.tokens << ','
       << r.point.activated << ',' << r.point.assignments << ',' << r.banks << ',' << r.median_us
       << ',' << r.min_us << ',' << r.max_us << ',' << r.floor.us << ',' << r.floor.bound << ','
       << r.floor.bytes << ',' << r.floor.flops << ',' << r.median_us / r.floor.us << ',';
    if (r.native_over_cublas) os << *r.native_over_cublas;
    os << ',' << r.max_error << ',' << peaks.copy_bytes_per_s / 1e9 << ','
       << peaks.bf16_flops_per_s / 1e12 << ',' << device << ",\"" << r.kernels << "\",\""
       << r.configuration << "\",\"" << r.device_state << "\",";
    if (peaks.gemm_sm_clock_mhz > 0) os << std::lround(peaks.gemm_sm_clock_mhz);  // else unknown
    os << ",\"" << r.launch_waves << "\"," << device_uuid << "\n";
  }
  write_file_atomic(path, os.str());
}

void print_table(const std::vector<Row>& rows, std::ostream& os) {
  os << std::left << std::setw(14) << "component" << std::setw(17) << "model" << std::setw(16)
     << "backend" << std::right << std::setw(6) << "N" << std::setw(5) << "A" << std::setw(11)
     << "us" << std::setw(11) << "floor_us" << std::setw(7) << "bound" << std::setw(8) << "ratio"
     << std::setw(14) << "native/cublas"
     << "\n";
  for (const auto& r : rows) {
    os << std::left << std::setw(14) << r.component << std::setw(17) << r.model << std::setw(16)
       << r.backend << std::right << std::setw(6) << r.point.tokens << std::setw(5)
       << r.point.activated << std::fixed << std::setprecision(1) << std::setw(11) << r.median_us
       << std::setw(11) << r.floor.us << std::setw(7) << r.floor.bound << std::setprecision(2)
       << std::setw(8) << r.median_us / r.floor.us << std::setw(14);
    if (r.native_over_cublas)
      os << std::setprecision(3) << *r.native_over_cublas;
    else
      os << "";
    os << "\n" << std::defaultfloat;
  }
}

// The sweep's checks (core/sweep.h) per model and backend, with every point's configuration.
bool print_sweep(const std::vector<Row>& rows, std::ostream& os) {
  std::map<std::pair<std::string, std::string>, std::vector<const Row*>> series;
  for (const auto& r : rows)
    if (r.component == "experts") series[{r.model, r.backend}].push_back(&r);
  bool passed = true;
  for (const auto& [key, points] : series) {
    os << "\nsweep " << key.first << " " << key.second << ":\n";
    std::vector<SweepPoint> sweep;
    for (const auto* r : points) {
      const double per_expert =
          r->point.activated ? static_cast<double>(r->point.assignments) / r->point.activated : 0.0;
      sweep.push_back({r->point.tokens, r->median_us, r->floor.us, per_expert, r->configuration});
    }
    const auto check = check_sweep(sweep);
    passed = passed && check.passed();
    print_sweep(sweep, check, os);
  }
  return passed;
}

int bench_experts(const Args& args) {
  std::string models = "qwen3-30b-a3b,qwen3-235b-a22b,deepseek-v3",
              tokens = "1,16,64,256,1024,4096", backends = "native,cublas_grouped",
              components = "experts,gate_routing,finalize_copy", csv = "bench-experts.csv";
  int iterations = 20, device = 0;
  // What `acquire` does on a GPU, so the two agree.
  double settle_ms = kGpuSettleMs, capped_settle_ms = kGpuCappedSettleMs;
  std::string activated;  // experts at these A (every route local) instead of balanced routing
  std::string model_config;
  bool sweep = false, under_profiler = false;
  po::options_description desc("harness bench experts [options]");
  desc.add_options()("models", po::value(&models), "comma-separated model presets")(
      "model-config", po::value(&model_config),
      "one more model from a Hugging Face config.json (Qwen3-MoE, DeepSeek-V3, Mixtral); alone "
      "where --models is not given")("tokens", po::value(&tokens), "comma-separated N")(
      "activated", po::value(&activated),
      "comma-separated A: experts at each N and A with M = N k (every route local) instead of "
      "balanced routing")("backends", po::value(&backends), "comma-separated CUDA backends")(
      "components", po::value(&components), "experts, gate_routing, finalize_copy")(
      "iterations", po::value(&iterations), "timed forwards per point (at least one rotation)")(
      "settle-ms", po::value(&settle_ms),
      "untimed forwards for this long before each point's warm-up (sustained load; default: "
      "acquire's on a GPU)")("capped-settle-ms", po::value(&capped_settle_ms),
                             "the settle's length when the power or thermal policy held the "
                             "clocks down during it (default: acquire's on a GPU)")(
      "device", po::value(&device), "CUDA device index")("csv", po::value(&csv), "CSV output")(
      "sweep", po::bool_switch(&sweep),
      "64 token counts from 1 to 8192 (native, experts, Qwen3-30B-A3B unless given) and the "
      "monotonicity and cliff checks")(
      "under-profiler", po::bool_switch(&under_profiler),
      "run the forwards without the CUPTI tracer, for a profiler (Nsight Compute or Systems) that "
      "needs CUPTI to itself: no times are reported and no CSV is written");
  const auto parsed = parse(args, desc, {});
  if (!parsed) return 0;  // --help was printed
  const auto& given = *parsed;
  if (sweep) {
    if (given.count("tokens") || given.count("activated"))
      throw std::invalid_argument(
          "--sweep chooses the token counts at balanced routing; leave out --tokens and "
          "--activated");
    tokens.clear();
    for (const auto n : sweep_tokens(1, 8192, 64)) tokens += std::to_string(n) + ",";
    if (!given.count("models")) models = "qwen3-30b-a3b";
    if (!given.count("backends")) backends = "native";
    if (!given.count("components")) components = "experts";
  }
  if (under_profiler && (sweep || given.count("csv")))
    throw std::invalid_argument(std::string("--under-profiler measures no time: leave out ") +
                                (sweep ? "--sweep" : "--csv"));
  if (iterations < 1) throw std::invalid_argument("--iterations must be at least 1");
  for (const auto& [value, option] :
       {std::pair{settle_ms, "--settle-ms"}, std::pair{capped_settle_ms, "--capped-settle-ms"}})
    if (!(value >= 0 && value <= job_limits::kSettleMs))
      throw std::invalid_argument(std::string(option) + " must be between 0 and " +
                                  std::to_string(job_limits::kSettleMs));
  std::vector<ModelGeometry> geometries;
  if (given.count("models") || model_config.empty())
    for (const auto& m : split_list(models)) {
      auto g = find_preset(m);
      if (!g) throw std::invalid_argument("unknown model preset '" + m + "'");
      geometries.push_back(*g);
    }
  if (!model_config.empty()) {
    try {
      geometries.push_back(geometry_from_hf_config_file(model_config));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--model-config: ") + e.what());
    }
  }
  // The CSV and the sweep's checks tell the models apart by name.
  for (auto g = geometries.begin(); g != geometries.end(); ++g)
    if (std::any_of(geometries.begin(), g, [&](const auto& e) { return e.name == g->name; }))
      throw std::invalid_argument("model '" + g->name + "' is given twice" +
                                  (!model_config.empty() && g + 1 == geometries.end()
                                       ? " (--models and --model-config " + model_config + ")"
                                       : std::string()));
  const auto ns = parse_int_list(tokens, "--tokens");
  for (const int n : ns)
    if (n < 1) throw std::invalid_argument("--tokens: token counts must be positive");
  const auto as = activated.empty() ? std::vector<int>{} : parse_int_list(activated, "--activated");
  for (const auto& g : geometries)
    for (const int n : ns) {
      // Every route local (L = E), so M = N k: the planner's feasible A, k <= A <= min(E, N k).
      const auto range = feasible_activated(n, g.experts, g.experts, g.top_k);
      for (const int a : as)
        if (!range || a < range->lo || a > range->hi)
          throw std::invalid_argument(
              "--activated " + std::to_string(a) + ": " + g.name + " at N=" + std::to_string(n) +
              " with every route local needs k <= A <= min(E, N k), here " +
              (range ? std::to_string(range->lo) + " <= A <= " + std::to_string(range->hi)
                     : std::string("no A")));
    }
  const auto cs = parse_component_list(components, "--components");
  if (std::find(cs.begin(), cs.end(), Component::wrapper) != cs.end())
    throw std::invalid_argument("--components takes experts, gate_routing, finalize_copy");
  const auto backend_names = split_list(backends);
  if (backend_names.empty()) throw std::invalid_argument("--backends is empty");
  if (!under_profiler) require_csv_folder(csv);
  if (cuda_device_count() <= device)
    throw std::runtime_error("no CUDA device " + std::to_string(device) +
                             ": harness bench measures GPU backends");
  std::vector<std::unique_ptr<Backend>> bs;
  for (const auto& b : backend_names) bs.push_back(make_cuda_backend(b, device));

  const auto peaks = measure_device_peaks(device);
  const auto props = bs.front()->device_properties();
  const std::string device_name = props.count("device") ? props.at("device") : "?",
                    device_uuid = props.count("uuid") ? props.at("uuid") : "";
  std::cout << "device " << device_name << ": copy " << std::fixed << std::setprecision(0)
            << peaks.copy_bytes_per_s / 1e9 << " GB/s (read+write of 1 GiB), bf16 GEMM "
            << peaks.bf16_flops_per_s / 1e12 << " TFLOP/s (" << peaks.gemm_size << "^3";
  if (peaks.gemm_sm_clock_mhz > 0) std::cout << " at " << peaks.gemm_sm_clock_mhz << " MHz";
  std::cout << ")\n" << std::defaultfloat;

  // CUPTI takes one subscriber: under a profiler the forwards run on a host clock, whose spans
  // are launch times, not device time, so they are not reported.
  auto timer = under_profiler ? make_host_clock_timer() : make_cupti_timer();
  if (under_profiler)
    std::cout << "--under-profiler: no CUPTI tracer; the forwards run (each checked against the "
                 "reference) but are not timed\n";
  std::vector<Row> rows;
  // A point that fails (a backend over its tolerance, memory the device cannot give, a CUDA
  // error) gets no time but does not cost the points measured before or after it: each is named
  // with its reason at the end, and the bench then exits 1.
  std::vector<std::string> failed;
  const auto fail = [&](std::string_view component, const ModelGeometry& g, const GridPoint& p,
                        const std::string& backend, const std::string& reason) {
    failed.push_back(point_label(component, g.name, p, component == "experts", backend) + ": " +
                     reason);
    std::cerr << "  " << failed.back() << "\n";
  };
  const Target ep1{1, 1, 1, 0, false};
  for (const auto c : cs)
    for (const auto& g : geometries) {
      const bool experts = c == Component::experts;
      const int banks = experts ? 2 * weight_bank_count(static_cast<std::int64_t>(g.experts) *
                                                            g.expert_weight_bytes(),
                                                        bs.front()->cache_bytes())
                                : 1;
      WorkloadSpec round{g, ep1, c, {}, banks, 0x5eedULL};
      std::vector<GridPoint> points;
      for (const auto n : ns) {
        const std::int64_t all_local = std::int64_t{n} * g.top_k;  // M with every route local
        if (!experts)
          points.push_back({n, 0, 0});
        else if (as.empty())
          points.push_back({n, balanced_activated(g, n), all_local});
        else
          for (const int a : as) points.push_back({n, a, all_local});
      }
      std::shared_ptr<const WeightSet> weights;
      try {
        weights = bs.front()->make_weights(round);
      } catch (const std::exception& e) {
        for (const auto& point : points)
          for (const auto& b : bs)
            fail(to_string(c), g, point, b->name(),
                 std::string("its weights (") + std::to_string(banks) + " banks): " + e.what());
        continue;
      }
      for (const auto& point : points) {
        const auto n = point.tokens;
        WorkloadSpec spec = round;
        spec.point = point;
        spec.seed = 0x5eedULL + static_cast<std::uint64_t>(n) +
                    (as.empty() ? 0 : static_cast<std::uint64_t>(point.activated) << 32);
        std::map<std::string, double> by_backend;
        const std::size_t first = rows.size();
        for (auto& b : bs) {
          try {
            rows.push_back(
                measure(*b, *timer, spec, weights, iterations, {settle_ms, capped_settle_ms}));
          } catch (const std::exception& e) {
            fail(to_string(c), g, point, b->name(), e.what());
            continue;
          }
          rows.back().floor =
              floor_of(g, c, spec.point, {peaks.copy_bytes_per_s, peaks.bf16_flops_per_s});
          by_backend[b->name()] = rows.back().median_us;
          if (!under_profiler)
            std::cerr << "  "
                      << point_label(rows.back().component, g.name, point, !as.empty(), b->name())
                      << ": " << rows.back().median_us << " us\n";
        }
        if (by_backend.count("native") && by_backend.count("cublas_grouped"))
          for (std::size_t i = first; i < rows.size(); ++i)
            if (rows[i].backend == "native")
              rows[i].native_over_cublas = by_backend["native"] / by_backend["cublas_grouped"];
      }
    }
  const auto report_failed = [&] {
    if (failed.empty()) return 0;
    std::cout << "\n"
              << failed.size() << " point" << (failed.size() == 1 ? "" : "s")
              << " failed (measured no time, not in the CSV):\n";
    for (const auto& f : failed) std::cout << "  " << f << "\n";
    std::cerr << "harness bench: " << failed.size() << " of " << failed.size() + rows.size()
              << " points failed (listed at the end of the output)\n";
    return 1;
  };
  if (under_profiler) {
    for (const auto& r : rows)
      std::cout << "  " << r.component << " " << r.model << " N=" << r.point.tokens << " "
                << r.backend << ": " << r.configuration << "\n";
    return report_failed();
  }
  print_table(rows, std::cout);
  std::cout << "\nkernels of the median forward (us):\n";
  for (const auto& r : rows)
    if (r.component == "experts")
      std::cout << "  " << r.model << " N=" << r.point.tokens << " " << r.backend << ": "
                << r.kernels << "\n";
  if (rows.empty()) {
    std::cout << "no point measured: " << csv << " not written\n";  // an earlier one stays
  } else {
    write_csv(csv, rows, peaks, device_name, device_uuid);
    std::cout << "wrote " << csv << "\n";
  }
  const bool sweep_passed = !sweep || rows.empty() || print_sweep(rows, std::cout);
  if (report_failed() != 0) return 1;
  return sweep_passed ? 0 : 3;  // 3: the sweep's checks failed (docs/cli.md)
}

}  // namespace

int bench(const Args& args) {
  if (args.empty() || args.front() == "--help" || args.front() == "-h") {
    std::cout << "usage: harness bench experts [options]   (harness bench experts --help)\n";
    return args.empty() ? 2 : 0;
  }
  if (args.front() != "experts")
    throw std::invalid_argument("unknown benchmark '" + args.front() + "' (experts)");
  return bench_experts(Args(args.begin() + 1, args.end()));
}

}  // namespace moe::cli
