// CPU binding: each rank gets a disjoint set of CPUs local to its GPU's NUMA node (or, without a
// GPU, a disjoint share of the CPUs the process may use).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace moe {

struct CpuBinding {
  std::vector<int> cpus;  // CPUs applied with sched_setaffinity
  int numa_node = -1;     // NUMA node the CPUs were drawn from (-1: any)
  bool shared = false;    // more ranks than CPUs: CPUs are shared, not disjoint
  [[nodiscard]] std::string describe() const;
};

// NUMA node of a PCI device ("0000:18:00.0") from sysfs; nullopt when unknown.
[[nodiscard]] std::optional<int> numa_node_of_pci(const std::string& bus_id);
// CPUs of a NUMA node from sysfs.
[[nodiscard]] std::vector<int> cpus_of_numa_node(int node);
// Parses a sysfs cpulist such as "0-3,8,10-11".
[[nodiscard]] std::vector<int> parse_cpulist(const std::string& text);

// Splits `pool` into `slots` disjoint contiguous shares and returns share `slot` (shared
// round-robin CPUs when the pool is smaller than `slots`).
[[nodiscard]] CpuBinding share_of(const std::vector<int>& pool, int slot, int slots);

// Binds the calling process: ranks `peer_index` of `peers` that share `numa_node` (or all CPUs
// of the process when no node is known). Returns what was applied.
CpuBinding bind_to_cpus(int peer_index, int peers, std::optional<int> numa_node);

}  // namespace moe
