// CPU binding: each rank gets a disjoint share of the CPUs the job may use, local to its GPU's
// NUMA node (docs/cli.md#acquire). The pool is the process' cgroup cpuset (or every
// online CPU), not the affinity mask a launcher handed down — `mpirun` binds each rank to one core
// or one socket by default — unless the user asks to keep the launcher's binding.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace moe {

struct CpuPool {
  std::vector<int> cpus;
  std::string source;  // "cgroup cpuset", "online CPUs" or "launcher binding"
};

struct CpuBinding {
  std::vector<int> cpus;  // CPUs applied with sched_setaffinity
  int numa_node = -1;     // NUMA node the CPUs were drawn from (-1: no NUMA information)
  bool shared = false;    // more ranks than CPUs: CPUs are shared, not disjoint
  std::string pool;       // where the CPUs came from (CpuPool::source)
  [[nodiscard]] std::string describe() const;
};

// NUMA node of a PCI device ("0000:18:00.0") from sysfs; nullopt when unknown.
[[nodiscard]] std::optional<int> numa_node_of_pci(const std::string& bus_id);
// CPUs of a NUMA node from sysfs.
[[nodiscard]] std::vector<int> cpus_of_numa_node(int node);
// Parses a sysfs cpulist such as "0-3,8,10-11".
[[nodiscard]] std::vector<int> parse_cpulist(const std::string& text);

// The CPUs this process may use: its cgroup's effective cpuset (v2, or v1 `cpuset`), else every
// online CPU. `keep_launcher_binding`: the affinity mask the process started with instead.
[[nodiscard]] CpuPool process_cpu_pool(bool keep_launcher_binding);

// Splits `pool` into `slots` disjoint contiguous shares and returns share `slot` (shared
// round-robin CPUs when the pool is smaller than `slots`).
[[nodiscard]] CpuBinding share_of(const std::vector<int>& pool, int slot, int slots);

// Binds the calling process to share `peer_index` of `peers` of the pool's CPUs on `numa_node`
// (all of the pool when the node is unknown). The peers are the node's ranks whose GPUs share the
// NUMA node. With a kept launcher binding the process keeps its mask (already its own). Throws
// when the pool has no CPU on `numa_node`. Returns what was applied.
CpuBinding bind_to_cpus(int peer_index, int peers, std::optional<int> numa_node,
                        bool keep_launcher_binding);

}  // namespace moe
