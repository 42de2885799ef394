#include "bundle/hardware.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace moe {

using nlohmann::json;

json hardware_identity(const StoredAcquisition& acq) {
  json devices = json::array();
  std::map<std::string, std::size_t> index;  // "host|device|uuid" -> position in devices
  std::set<std::string> kinds;
  for (const auto& run : acq.runs) {
    const auto start = json::parse(run.start);
    const auto end = run.end.empty() ? json::array() : json::parse(run.end);
    for (const auto& rank : start) {
      const auto& props = rank.at("device");
      const auto key = rank.value("host", "") + "|" + props.value("device", "") + "|" +
                       props.value("uuid", props.value("device_index", ""));
      auto [it, fresh] = index.emplace(key, devices.size());
      if (fresh) {
        json d = props;
        d["host"] = rank.value("host", "");
        d["nccl"] = rank.value("nccl", "");
        d["state_before"] = rank.value("device_state_before", json::object());
        d["cpu_bindings"] = json::array();
        devices.push_back(d);
        kinds.insert(props.value("device", ""));
      }
      auto& bindings = devices[it->second]["cpu_bindings"];
      if (const auto b = rank.value("cpu_binding", "");
          !b.empty() && std::find(bindings.begin(), bindings.end(), b) == bindings.end())
        bindings.push_back(b);
      for (const auto& e : end)
        if (e.value("rank", -1) == rank.value("rank", -2))
          devices[it->second]["state_after"] = e.value("device_state_after", json::object());
    }
  }
  if (kinds.size() > 1) {
    std::string names;
    for (const auto& k : kinds) names += (names.empty() ? "" : ", ") + k;
    throw std::runtime_error("the acquisition was measured on several device kinds (" + names +
                             "); one table describes one kind of device");
  }
  return {{"runs", acq.runs.size()}, {"devices", devices}};
}

}  // namespace moe
