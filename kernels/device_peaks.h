// What this device does at best, measured (not taken from a datasheet): the denominators of the
// roofline floors that `harness bench` reports.
#pragma once

#include <cstdint>

namespace moe {

struct DevicePeaks {
  double copy_bytes_per_s = 0;  // device-to-device copy: (read + write bytes) / time, median
  double bf16_flops_per_s = 0;  // cuBLAS bf16 GEMM (fp32 accumulate), median
  std::int64_t copy_bytes = 0;  // bytes copied per repetition (one direction)
  int gemm_size = 0;            // M = N = K of the GEMM
  // The mean SM clock over the GEMM's runs (SM 0's cycle counter against the device timer), 0
  // where no stamp landed: the flops floor holds only at a clock like this one.
  double gemm_sm_clock_mhz = 0;
};

// Runs `repetitions` timed copies and GEMMs (CUDA events) after one warm-up each. Throws
// std::runtime_error in a build without CUDA.
[[nodiscard]] DevicePeaks measure_device_peaks(int device, int repetitions = 20);

}  // namespace moe
