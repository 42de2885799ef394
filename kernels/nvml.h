// Live device state from the driver's NVML library (clocks, temperature, processes), recorded
// before and after measured intervals. NVML is opened at run time: nothing links against it.
#pragma once

#include <map>
#include <string>

namespace moe {

// {sm_clock_mhz, sm_clock_max_mhz, mem_clock_mhz, temperature_c, gpu_processes} of the GPU at
// `pci_bus_id`, where the driver has them also power_w, clock_events (current reasons, e.g.
// "sw_power_cap") and power_capped_ns / thermal_capped_ns (cumulative time the clocks were held
// down by the power or thermal policy: the difference over an interval is its throttled time), or
// {nvml: why not} when NVML or the device is unavailable.
[[nodiscard]] std::map<std::string, std::string> nvml_live_state(const std::string& pci_bus_id);

}  // namespace moe
