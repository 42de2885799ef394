#include "ranks/affinity.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace moe {

namespace {

std::string cpulist(const std::vector<int>& cpus) {
  std::string s;
  for (std::size_t i = 0; i < cpus.size(); ++i) {
    if (i) s.push_back(',');
    s.append(std::to_string(cpus[i]));
  }
  return s;
}

}  // namespace

std::string CpuBinding::describe() const {
  std::string s = cpulist(cpus);
  const bool kept = pool.rfind("launcher binding", 0) == 0;
  s.append(numa_node >= 0 ? " (numa " + std::to_string(numa_node) : " (no GPU NUMA node known")
      .append(kept     ? ", kept"
              : shared ? ", shared"
                       : ", disjoint")
      .append(pool.empty() ? ")" : ", from " + pool + ")");
  return s;
}

std::vector<int> parse_cpulist(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty() || part == "\n") continue;
    const auto dash = part.find('-');
    const int lo = std::stoi(part.substr(0, dash));
    const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  return out;
}

std::optional<int> numa_node_of_pci(const std::string& bus_id) {
  std::string id = bus_id;
  for (auto& ch : id) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (id.size() == 12) id = id.substr(4);  // 00000000:18:00.0 -> 0000:18:00.0
  std::ifstream f("/sys/bus/pci/devices/" + id + "/numa_node");
  int node = -1;
  if (!(f >> node) || node < 0) return std::nullopt;
  return node;
}

std::vector<int> cpus_of_numa_node(int node) {
  std::ifstream f("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist");
  std::string text;
  std::getline(f, text);
  return parse_cpulist(text);
}

namespace {

std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// The effective cpuset of this process' cgroup (v2 unified or v1 cpuset hierarchy); empty when
// none can be read.
std::vector<int> cgroup_cpuset() {
  std::ifstream f("/proc/self/cgroup");
  for (std::string line; std::getline(f, line);) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const auto controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::vector<std::string> candidates;
    if (controllers.empty())
      candidates = {"/sys/fs/cgroup" + path + "/cpuset.cpus.effective",
                    "/sys/fs/cgroup/unified" + path + "/cpuset.cpus.effective"};
    else if (("," + controllers + ",").find(",cpuset,") != std::string::npos)
      candidates = {"/sys/fs/cgroup/cpuset" + path + "/cpuset.effective_cpus",
                    "/sys/fs/cgroup/cpuset" + path + "/cpuset.cpus"};
    for (const auto& c : candidates)
      if (auto cpus = parse_cpulist(first_line(c)); !cpus.empty()) return cpus;
  }
  return {};
}

std::vector<int> affinity_mask() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
    throw std::runtime_error("sched_getaffinity failed");
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) out.push_back(c);
  return out;
}

}  // namespace

CpuPool process_cpu_pool(bool keep_launcher_binding) {
  if (keep_launcher_binding) return {affinity_mask(), "launcher binding"};
  if (auto cpus = cgroup_cpuset(); !cpus.empty()) return {cpus, "cgroup cpuset"};
  if (auto cpus = parse_cpulist(first_line("/sys/devices/system/cpu/online")); !cpus.empty())
    return {cpus, "online CPUs"};
  return {affinity_mask(), "launcher binding (no cpuset or online list readable)"};
}

CpuBinding share_of(const std::vector<int>& pool, int slot, int slots) {
  if (pool.empty() || slots < 1) throw std::invalid_argument("no CPUs to bind");
  CpuBinding b;
  const int n = static_cast<int>(pool.size());
  if (n < slots) {
    b.cpus = {pool[static_cast<std::size_t>(slot % n)]};
    b.shared = true;
    return b;
  }
  const int per = n / slots;
  for (int i = slot * per; i < (slot + 1) * per; ++i)
    b.cpus.push_back(pool[static_cast<std::size_t>(i)]);
  return b;
}

CpuBinding bind_to_cpus(int peer_index, int peers, std::optional<int> numa_node,
                        bool keep_launcher_binding) {
  const auto pool = process_cpu_pool(keep_launcher_binding);
  std::vector<int> local = pool.cpus;
  if (numa_node) {
    const auto node = cpus_of_numa_node(*numa_node);
    local.clear();
    for (int c : pool.cpus)
      if (std::find(node.begin(), node.end(), c) != node.end()) local.push_back(c);
    if (local.empty())
      throw std::runtime_error("none of the CPUs this rank may use (" + cpulist(pool.cpus) + ", " +
                               pool.source + ") is on its GPU's NUMA node " +
                               std::to_string(*numa_node) + " (CPUs " + cpulist(node) + ")" +
                               (keep_launcher_binding
                                    ? "; drop --keep-launcher-binding or bind the launcher's ranks "
                                      "to the GPU's NUMA node"
                                    : "; give the job CPUs on that node"));
  }
  // A kept launcher binding is the rank's own already; otherwise the peers split the pool.
  auto b = keep_launcher_binding ? share_of(local, 0, 1) : share_of(local, peer_index, peers);
  b.numa_node = numa_node.value_or(-1);
  b.pool = pool.source;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : b.cpus) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0)
    throw std::runtime_error("sched_setaffinity to CPUs " + cpulist(b.cpus) + " failed");
  return b;
}

}  // namespace moe
