#include "ranks/affinity.h"

#include <sched.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace moe {

std::string CpuBinding::describe() const {
  std::string s;
  for (std::size_t i = 0; i < cpus.size(); ++i) {
    if (i) s.push_back(',');
    s.append(std::to_string(cpus[i]));
  }
  s.append(" (numa ")
      .append(std::to_string(numa_node))
      .append(shared ? ", shared)" : ", disjoint)");
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

CpuBinding bind_to_cpus(int peer_index, int peers, std::optional<int> numa_node) {
  std::vector<int> pool;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
    throw std::runtime_error("sched_getaffinity failed");
  if (numa_node)
    for (int c : cpus_of_numa_node(*numa_node))
      if (CPU_ISSET(c, &allowed)) pool.push_back(c);
  if (pool.empty())
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) pool.push_back(c);
  auto b = share_of(pool, peer_index, peers);
  b.numa_node = numa_node.value_or(-1);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : b.cpus) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0)
    throw std::runtime_error("sched_setaffinity failed");
  return b;
}

}  // namespace moe
