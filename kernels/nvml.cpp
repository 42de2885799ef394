#include "kernels/nvml.h"

#include <dlfcn.h>

#include <utility>

namespace moe {

namespace {

// The driver's NVML library, opened with dlopen: the toolkit need not ship nvml.h, and every GPU
// node has libnvidia-ml.so.1 with its driver. Only the calls used for live state are resolved.
class Nvml {
 public:
  using Device = void*;
  struct ProcessInfo {  // nvmlProcessInfo_t (v2/v3 layout)
    unsigned pid;
    unsigned long long used_memory;
    unsigned gpu_instance, compute_instance;
  };
  static const Nvml* get() {
    static const Nvml nvml;
    return nvml.ok_ ? &nvml : nullptr;
  }
  int (*handle_by_bus)(const char*, Device*) = nullptr;
  int (*clock)(Device, int, unsigned*) = nullptr;      // type: 1 = SM, 2 = memory
  int (*max_clock)(Device, int, unsigned*) = nullptr;  // the same types
  int (*temperature)(Device, int, unsigned*) = nullptr;
  int (*processes)(Device, unsigned*, ProcessInfo*) = nullptr;
  struct ViolationTime {  // nvmlViolationTime_t: nanoseconds
    unsigned long long reference, violation;
  };
  // Optional (older drivers may lack them): cumulative time held below the requested clocks by a
  // policy (0 = power, 1 = thermal), the board's power draw (mW) and the current clock-event
  // reason bits.
  int (*violation)(Device, int, ViolationTime*) = nullptr;
  int (*power)(Device, unsigned*) = nullptr;
  int (*clock_events)(Device, unsigned long long*) = nullptr;

 private:
  Nvml() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    handle_by_bus =
        reinterpret_cast<decltype(handle_by_bus)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock = reinterpret_cast<decltype(clock)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    max_clock = reinterpret_cast<decltype(max_clock)>(dlsym(lib, "nvmlDeviceGetMaxClockInfo"));
    temperature = reinterpret_cast<decltype(temperature)>(dlsym(lib, "nvmlDeviceGetTemperature"));
    processes = reinterpret_cast<decltype(processes)>(
        dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
    violation = reinterpret_cast<decltype(violation)>(dlsym(lib, "nvmlDeviceGetViolationStatus"));
    power = reinterpret_cast<decltype(power)>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
    clock_events = reinterpret_cast<decltype(clock_events)>(
        dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (!clock_events)
      clock_events = reinterpret_cast<decltype(clock_events)>(
          dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    ok_ = init && handle_by_bus && clock && max_clock && temperature && processes && init() == 0;
  }
  bool ok_ = false;
};

}  // namespace

std::map<std::string, std::string> nvml_live_state(const std::string& pci_bus_id) {
  const Nvml* nvml = Nvml::get();
  if (!nvml) return {{"nvml", "unavailable"}};
  Nvml::Device dev{};
  if (nvml->handle_by_bus(pci_bus_id.c_str(), &dev) != 0)
    return {{"nvml", "no handle for " + pci_bus_id}};
  std::map<std::string, std::string> out;
  unsigned sm = 0, mem = 0, temp = 0;
  if (nvml->clock(dev, 1, &sm) == 0) out["sm_clock_mhz"] = std::to_string(sm);
  if (nvml->max_clock(dev, 1, &sm) == 0) out["sm_clock_max_mhz"] = std::to_string(sm);
  if (nvml->clock(dev, 2, &mem) == 0) out["mem_clock_mhz"] = std::to_string(mem);
  if (nvml->temperature(dev, 0, &temp) == 0) out["temperature_c"] = std::to_string(temp);
  Nvml::ViolationTime v{};
  if (nvml->violation && nvml->violation(dev, 0, &v) == 0)
    out["power_capped_ns"] = std::to_string(v.violation);
  if (nvml->violation && nvml->violation(dev, 1, &v) == 0)
    out["thermal_capped_ns"] = std::to_string(v.violation);
  unsigned milliwatts = 0;
  if (nvml->power && nvml->power(dev, &milliwatts) == 0)
    out["power_w"] = std::to_string(milliwatts / 1000);
  unsigned long long reasons = 0;
  if (nvml->clock_events && nvml->clock_events(dev, &reasons) == 0) {
    // nvmlClocksEventReason bits.
    static constexpr std::pair<unsigned long long, const char*> kReasons[] = {
        {0x1, "idle"},        {0x2, "application_clocks"}, {0x4, "sw_power_cap"},
        {0x8, "hw_slowdown"}, {0x10, "sync_boost"},        {0x20, "sw_thermal"},
        {0x40, "hw_thermal"}, {0x80, "hw_power_brake"},    {0x100, "display_clocks"}};
    std::string names;
    for (const auto& [bit, name] : kReasons) {
      if (!(reasons & bit)) continue;
      if (!names.empty()) names.push_back('+');
      names.append(name);
    }
    out["clock_events"] = names.empty() ? "none" : names;
  }
  unsigned count = 64;
  Nvml::ProcessInfo procs[64];
  if (nvml->processes(dev, &count, procs) == 0) {
    std::string pids;
    for (unsigned i = 0; i < count; ++i) {
      if (i) pids.push_back(',');
      pids.append(std::to_string(procs[i].pid));
    }
    out["gpu_processes"] = pids;
  }
  return out;
}

}  // namespace moe
