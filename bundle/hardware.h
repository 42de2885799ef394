// The hardware identity of a bundle entry (docs/bundle-format.md#hardware-identity): every device
// that took part in the acquisition, from the provenance each rank stored at the start and end
// of each run.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "store/acquisition_file.h"

namespace moe {

// {runs, devices: [{device, uuid, host, sm_count, memory_bytes, ..., nccl, cpu_bindings,
// state_before, state_after}]}: one object per distinct (host, device, uuid), state_before from its
// first run, state_after from its last run that ended. Throws std::runtime_error when the runs name
// more than one device kind: one table must describe one kind of device.
[[nodiscard]] nlohmann::json hardware_identity(const StoredAcquisition& acq);
// The SM count the acquisition's device recorded, 0 when none is recorded or the runs name
// several kinds of device (which publish and resume refuse). Throws FileError when the record is
// not a count.
[[nodiscard]] int recorded_sm_count(const StoredAcquisition& acq);
// The device that measured each round, as its position in hardware_identity's devices, by the
// round's (run, rank) (CellRound::run, rank). Ranks whose provenance names no device are absent.
[[nodiscard]] std::map<std::pair<int, int>, int> round_devices(const StoredAcquisition& acq);

// The devices (host, name, UUID) of the latest of `run_starts` (each run's start provenance, the
// JSON list of its ranks, oldest first) that no earlier run measured on, and those the earlier
// runs used, each a list of "UUID (host H)" (the device index where there is no UUID) joined by
// ", ". Both empty for a first run, or when the latest run uses only devices an earlier one used:
// a resumed campaign on other GPUs of the same kind mixes their measurements in one table.
struct DeviceChange {
  std::string added, earlier;
};
[[nodiscard]] DeviceChange device_change(const std::vector<std::string>& run_starts);
// One object per run of the acquisition, from rank 0's provenance: started_utc, command,
// harness_revision, harness_binary_sha256, family_table_sha256, job_sha256, and, for a run that
// ended, ended_utc and complete.
[[nodiscard]] nlohmann::json run_history(const StoredAcquisition& acq);
// How each run placed its ranks (docs/colocation.md#the-gate-gates), from every rank's provenance:
// {verified, regimes, gates, runs: [{run, nodes: [{host, gate, regime, ranks_on_node, ...}]}]}.
// `verified` is false when any node of any run measured without a passing verdict
// (--unverified) or did not record its placement.
[[nodiscard]] nlohmann::json placement_of(const StoredAcquisition& acq);
// The job text the latest run read (empty when the file predates it).
[[nodiscard]] std::string latest_job_text(const StoredAcquisition& acq);

}  // namespace moe
