// The hardware identity of a bundle entry (docs/bundle-format.md#hardware-identity): every device
// that took part in the acquisition, from the provenance each rank stored at the start and end
// of each run.
#pragma once

#include <nlohmann/json.hpp>

#include "store/acquisition_file.h"

namespace moe {

// {runs, devices: [{device, uuid, host, sm_count, memory_bytes, ..., nccl, cpu_bindings,
// state_before, state_after}]}: one object per distinct (host, device, uuid), state_before from its
// first run, state_after from its last run that ended. Throws std::runtime_error when the runs name
// more than one device kind: one table must describe one kind of device.
[[nodiscard]] nlohmann::json hardware_identity(const StoredAcquisition& acq);

}  // namespace moe
