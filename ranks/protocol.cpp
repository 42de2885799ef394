#include "ranks/protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "core/planner.h"
#include "ranks/elapsed.h"

namespace moe {

namespace {

std::string where(const CellRoundSpec& s, const GridPoint& p) {
  return std::string(to_string(s.base.component)) + " " + s.base.target.label() +
         " at (N=" + std::to_string(p.tokens) + ", A=" + std::to_string(p.activated) +
         ", M=" + std::to_string(p.assignments) + ") round " + std::to_string(s.round);
}

}  // namespace

ForwardRun run_forwards(Workload& w, ForwardTimer& timer, std::span<const ForwardSegment> segments,
                        const std::string& label, const ClockStamps& stamps) {
  ForwardRun run;
  const auto from = stamps ? stamps() : std::nullopt;
  bool any_timed = false;
  for (const auto& s : segments) {
    any_timed = any_timed || s.timed;
    for (int f = 0; f < s.count; ++f) {
      if (s.timed) timer.begin(label);
      w.forward(f % s.banks);
      if (s.timed) timer.end();
      // The sticky route flag is read once per forward, outside the timed bracket.
      run.route_errors += w.take_route_error() ? 1 : 0;
    }
  }
  if (stamps) run.sm_clock_mhz = mean_sm_clock_mhz(from, stamps());  // after the last forward
  w.synchronize();
  run.records = timer.collect();
  if (!any_timed) run.records.clear();
  return run;
}

ForwardRun run_forwards(Workload& w, ForwardTimer& timer, int count, int banks, bool timed,
                        const std::string& label, const ClockStamps& stamps) {
  const ForwardSegment segment{count, banks, timed};
  return run_forwards(w, timer, std::span(&segment, 1), label, stamps);
}

HeldDownClock held_down_clock(const Backend& backend) {
  return [&backend]() -> std::optional<std::uint64_t> {
    const auto state = backend.live_state();
    std::optional<std::uint64_t> ns;
    for (const char* key : {"power_capped_ns", "thermal_capped_ns"})
      if (const auto it = state.find(key); it != state.end())
        ns = ns.value_or(0) + std::stoull(it->second);
    return ns;
  };
}

ClockStamps clock_stamps(Backend& backend) {
  return [&backend] { return backend.clock_stamp(); };
}

SettleRun settle_forwards(Workload& w, ForwardTimer& timer, int banks, const Settle& settle,
                          const HeldDownClock& held_down, const std::string& label) {
  SettleRun run;
  const auto start = SteadyClock::now();
  const auto elapsed_ms = [&] { return 1000 * seconds_since(start); };
  const auto run_until = [&](double ms) {
    while (elapsed_ms() < ms)
      run.route_errors +=
          run_forwards(w, timer, std::max(2, banks), banks, false, label).route_errors;
  };
  // Only a settle is extended: with ms <= 0 the point is timed right after the previous one.
  const bool may_extend = settle.ms > 0 && settle.capped_ms > settle.ms && held_down;
  const auto before = may_extend ? held_down() : std::nullopt;
  run_until(settle.ms);
  if (before) {
    const auto after = held_down();
    run.extended = after && *after > *before;
    if (run.extended) run_until(settle.capped_ms);
  }
  run.ms = elapsed_ms();
  return run;
}

CellRound measure_cell_round(Backend& backend, ForwardTimer& timer, const CellRoundSpec& spec,
                             const std::function<void()>& on_point) {
  CellRound out;
  out.round = spec.round;
  out.point_order_seed = mix_seed({spec.seed, 0xfeedULL});
  std::vector<std::int32_t> order(spec.points.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 shuffle_rng(out.point_order_seed);
  std::shuffle(order.begin(), order.end(), shuffle_rng);

  const bool experts = spec.base.component == Component::experts;
  const int banks = experts ? spec.weight_banks : 1;
  const std::uint64_t dropped_before = timer.dropped();
  auto t = SteadyClock::now();
  WorkloadSpec round_spec = spec.base;
  round_spec.banks = experts ? 2 * banks : 1;
  round_spec.seed = mix_seed({spec.seed, 0xb4e5ULL});
  const auto weights = backend.make_weights(round_spec);
  out.phases.setup += seconds_since(t);
  const auto held_down = held_down_clock(backend);
  const auto stamps = clock_stamps(backend);
  for (const auto pi : order) {
    const auto& p = spec.points[static_cast<std::size_t>(pi)];
    WorkloadSpec ws = spec.base;
    ws.point = p;
    ws.banks = experts ? 2 * banks : 1;
    ws.seed = mix_seed({spec.seed, static_cast<std::uint64_t>(pi)});
    t = SteadyClock::now();
    auto w = backend.make(ws, weights);
    out.phases.setup += seconds_since(t);

    t = SteadyClock::now();
    const auto errors = w->verify();
    out.phases.verify += seconds_since(t);
    for (std::size_t b = 0; b < errors.size(); ++b) {
      const bool ok = errors[b] <= backend.tolerance();
      out.checks.push_back({pi, spec.round, static_cast<std::int32_t>(b), errors[b],
                            ok ? std::int8_t{1} : std::int8_t{0}});
      if (!ok)
        throw MeasurementError("correctness check failed for " + where(spec, p) + " bank " +
                               std::to_string(b) + ": relative error " + std::to_string(errors[b]) +
                               " > " + std::to_string(backend.tolerance()));
    }

    std::uint64_t route_errors = 0;
    // Timed chunks. `experts`: the B and 2B arms alternate in chunks of one complete 2B cycle
    // (so slow drift of the machine hits both arms alike); both arms get the same warm-up (one
    // chunk before their first timed chunk) and the same number of timed forwards.
    struct Chunk {
      Arm arm;
      int banks;
      int forwards;
      bool warm_up;
    };
    std::vector<Chunk> chunks;
    if (experts) {
      const int n = forwards_per_arm(spec.iterations, banks), cycle = 2 * banks;
      for (int c = 0; c < n / cycle; ++c) {
        chunks.push_back({Arm::banks, banks, cycle, c == 0});
        chunks.push_back({Arm::double_banks, 2 * banks, cycle, c == 0});
      }
    } else {
      chunks = {{Arm::single, 1, spec.iterations, true}};
    }
    t = SteadyClock::now();
    // Host timers hash the label as the forward's activity list: the workload's configuration
    // (a kernel choice) makes a change of kernels visible to them as CUPTI's names are.
    const auto configuration = w->configuration();
    const std::string label = "cpu_" + std::string(to_string(spec.base.component)) +
                              (configuration.empty() ? "" : ":" + configuration);
    std::vector<double> all, per_arm[3];
    int arm_forward[3] = {0, 0, 0};
    std::optional<ForwardRecord> first;
    const auto settled =
        settle_forwards(*w, timer, experts ? 2 * banks : 1, spec.settle, held_down, label);
    route_errors += settled.route_errors;
    out.settles_extended += settled.extended ? 1 : 0;
    // Every chunk and warm-up back to back, one flush at the end (run_forwards); the clock over
    // all of them.
    std::vector<ForwardSegment> segments;
    std::size_t timed_forwards = 0;
    for (const auto& ch : chunks) {
      if (ch.warm_up) segments.push_back({experts ? 2 * banks : 2, ch.banks, false});
      segments.push_back({ch.forwards, ch.banks, true});
      timed_forwards += static_cast<std::size_t>(ch.forwards);
    }
    const auto run = run_forwards(*w, timer, segments, label, stamps);
    route_errors += run.route_errors;
    const auto& records = run.records;
    if (records.size() != timed_forwards)
      throw MeasurementError("timer returned " + std::to_string(records.size()) + " records for " +
                             std::to_string(timed_forwards) + " forwards of " + where(spec, p));
    std::size_t next = 0;
    for (const auto& ch : chunks) {
      for (int f = 0; f < ch.forwards; ++f) {
        const auto& r = records[next++];
        if (!first) first = r;
        if (r.activity_count != first->activity_count || r.name_hash != first->name_hash)
          throw MeasurementError(
              "forward " + std::to_string(f) + " of " + where(spec, p) + " ran " +
              std::to_string(r.activity_count) + " activities, the first ran " +
              std::to_string(first->activity_count) + " (activity lists differ)");
        if (!(r.value_us > 0))
          throw MeasurementError("non-positive forward time for " + where(spec, p));
        const int arm = static_cast<int>(ch.arm);
        out.samples.push_back({pi, spec.round, static_cast<std::int8_t>(ch.arm), f % ch.banks,
                               arm_forward[arm]++, r.value_us, r.activity_count, r.name_hash});
        all.push_back(r.value_us);
        per_arm[arm].push_back(r.value_us);
      }
    }
    out.phases.timing += seconds_since(t);
    if (route_errors)
      throw MeasurementError("route validation flag raised " + std::to_string(route_errors) +
                             " times on valid stimuli for " + where(spec, p));
    const double m = median(all);
    out.medians.push_back({pi, spec.round, m, experts ? median(per_arm[1]) : m,
                           experts ? median(per_arm[2]) : m,
                           run.sm_clock_mhz.value_or(std::numeric_limits<double>::quiet_NaN())});
    if (on_point) on_point();
  }
  if (timer.dropped() != dropped_before)
    throw MeasurementError("the tracer dropped " +
                           std::to_string(timer.dropped() - dropped_before) +
                           " activity records; zero dropped is required");
  return out;
}

}  // namespace moe
