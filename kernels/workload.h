// A backend builds one WeightSet per cell round and one Workload per point of it: every round is
// an independent context with fresh allocations and stimuli.
// The protocol (ranks/) verifies it against the CPU reference, then times its forwards.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/component.h"
#include "core/geometry.h"

namespace moe {

struct WorkloadSpec {
  ModelGeometry geometry;
  Target target;
  Component component = Component::gate_routing;
  GridPoint point;
  int banks = 1;  // weight banks allocated (2B for experts, 1 otherwise)
  std::uint64_t seed = 0;
};

// One SM's cycle counter and the device's nanosecond timer, read together.
struct ClockStamp {
  std::uint64_t sm_cycles = 0, ns = 0;
};

// The mean SM clock (MHz) between two stamps of the same SM, or none when they span no time.
[[nodiscard]] inline std::optional<double> mean_sm_clock_mhz(const ClockStamp& from,
                                                             const ClockStamp& to) {
  if (to.ns <= from.ns || to.sm_cycles < from.sm_cycles) return std::nullopt;
  return static_cast<double>(to.sm_cycles - from.sm_cycles) * 1e3 /
         static_cast<double>(to.ns - from.ns);
}
// The same over stamps that may be missing (a backend without stamps; no block ran on SM 0).
[[nodiscard]] inline std::optional<double> mean_sm_clock_mhz(const std::optional<ClockStamp>& from,
                                                             const std::optional<ClockStamp>& to) {
  return from && to ? mean_sm_clock_mhz(*from, *to) : std::nullopt;
}

// Weights shared by every point of one cell round: the routed-expert banks (`experts`) or the
// shared experts (`wrapper`); empty for the other components. Each backend subclasses it.
class WeightSet {
 public:
  virtual ~WeightSet() = default;
};

class Workload {
 public:
  virtual ~Workload() = default;
  // Runs one forward per bank on poisoned outputs and compares each with the CPU reference of
  // that bank's weights; returns the relative error per bank.
  [[nodiscard]] virtual std::vector<double> verify() = 0;
  // Queues one forward using weight bank `bank` (asynchronous on GPU backends).
  virtual void forward(int bank) = 0;
  // Waits for queued forwards.
  virtual void synchronize() = 0;
  // Reads and clears the sticky route-validation flag (docs/measurement.md).
  [[nodiscard]] virtual bool take_route_error() = 0;
  // The kernel configuration this workload chose, when it has a choice (the native experts'
  // tile); empty otherwise. Reported by benchmarks.
  [[nodiscard]] virtual std::string configuration() const { return {}; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  [[nodiscard]] virtual std::string name() const = 0;    // cpu_reference | cublas_grouped | ...
  [[nodiscard]] virtual std::string timing() const = 0;  // host_clock | cupti_activity
  [[nodiscard]] virtual std::int64_t cache_bytes() const = 0;  // L2 (GPU) or last-level (CPU)
  [[nodiscard]] virtual int sm_count() const = 0;              // the GPU's SMs; 0 on the host
  [[nodiscard]] virtual double tolerance() const = 0;          // max relative error vs reference
  // The version of the code it measures, raised by a change that changes its times (recorded in
  // the contract, so that rows of two versions never share a table: docs/bundle-format.md).
  [[nodiscard]] virtual int version() const { return 1; }
  // Fresh weights for one cell round (spec.banks banks from spec.seed; the point is ignored).
  [[nodiscard]] virtual std::shared_ptr<const WeightSet> make_weights(
      const WorkloadSpec& round) = 0;
  // Fresh stimuli and buffers for one point, using the round's weights.
  [[nodiscard]] virtual std::unique_ptr<Workload> make(
      const WorkloadSpec& point, std::shared_ptr<const WeightSet> weights) = 0;
  // Provenance (the hardware identity of a bundle entry): device name, UUID, SM count, memory,
  // driver/runtime/library versions, PCI bus id.
  [[nodiscard]] virtual std::map<std::string, std::string> device_properties() const = 0;
  // State that changes while measuring: clocks, processes on the device (or the host CPU).
  [[nodiscard]] virtual std::map<std::string, std::string> live_state() const = 0;
  // The device's own count of SM cycles and nanoseconds now, where the backend has one (none on
  // the host backends). NVML's clock in live_state() is a sample taken between intervals; two
  // stamps around an interval give the clock the SMs ran at during it (mean_sm_clock_mhz).
  [[nodiscard]] virtual std::optional<ClockStamp> clock_stamp() { return std::nullopt; }
};

[[nodiscard]] std::unique_ptr<Backend> make_cpu_backend();
// Any backend by name: cpu_reference, staircase_model (host), or a CUDA backend on `device`.
[[nodiscard]] std::unique_ptr<Backend> make_backend(const std::string& name, int device);

// Throws std::runtime_error when the build has no CUDA or no device is present.
[[nodiscard]] std::unique_ptr<Backend> make_cuda_backend(const std::string& name, int device);
// Number of visible CUDA devices (0 in a build without CUDA).
[[nodiscard]] int cuda_device_count();

}  // namespace moe
