#include "bundle/hardware.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <stdexcept>

#include "core/files.h"

namespace moe {

using nlohmann::json;

namespace {

// One device of one rank's provenance: "host|name|UUID" (the device index where there is none).
std::string device_key(const json& rank) {
  const auto& props = rank.at("device");
  return rank.value("host", "") + "|" + props.value("device", "") + "|" +
         props.value("uuid", props.value("device_index", ""));
}

std::string device_label(const json& rank) {
  const auto& props = rank.at("device");
  const auto index = props.value("device_index", "");
  return props.value("uuid", props.value("device", "") + (index.empty() ? "" : " " + index)) +
         " (host " + rank.value("host", "") + ")";
}

// Calls visit(run, rank JSON, the device's position, first time seen) for every rank of every run
// that names a device, in run order: the positions are hardware_identity's.
template <typename Visit>
void for_each_run_device(const StoredAcquisition& acq, Visit visit) {
  std::map<std::string, int> index;  // "host|device|uuid" -> position
  for (std::size_t run = 0; run < acq.runs.size(); ++run)
    for (const auto& rank : json::parse(acq.runs[run].start)) {
      if (!rank.contains("device")) continue;
      const auto [it, fresh] = index.emplace(device_key(rank), static_cast<int>(index.size()));
      visit(static_cast<int>(run), rank, it->second, fresh);
    }
}

}  // namespace

DeviceChange device_change(const std::vector<std::string>& run_starts) {
  DeviceChange change;
  if (run_starts.size() < 2) return change;
  std::map<std::string, std::string> earlier;  // key -> label
  for (std::size_t i = 0; i + 1 < run_starts.size(); ++i)
    for (const auto& rank : json::parse(run_starts[i]))
      earlier.emplace(device_key(rank), device_label(rank));
  std::set<std::string> added;
  for (const auto& rank : json::parse(run_starts.back()))
    if (!earlier.contains(device_key(rank))) added.insert(device_label(rank));
  if (added.empty()) return change;
  for (const auto& label : added) change.added += (change.added.empty() ? "" : ", ") + label;
  for (const auto& [key, label] : earlier)
    change.earlier += (change.earlier.empty() ? "" : ", ") + label;
  return change;
}

json hardware_identity(const StoredAcquisition& acq) {
  json devices = json::array();
  std::set<std::string> kinds;
  std::vector<json> ends;  // each run's end provenance, parsed once
  for (const auto& run : acq.runs)
    ends.push_back(run.end.empty() ? json::array() : json::parse(run.end));
  for_each_run_device(acq, [&](int run, const json& rank, int position, bool fresh) {
    const auto& props = rank.at("device");
    if (fresh) {
      json d = props;
      d["host"] = rank.value("host", "");
      d["nccl"] = rank.value("nccl", "");
      d["state_before"] = rank.value("device_state_before", json::object());
      d["cpu_bindings"] = json::array();
      devices.push_back(d);
      kinds.insert(props.value("device", ""));
    }
    auto& device = devices[static_cast<std::size_t>(position)];
    auto& bindings = device["cpu_bindings"];
    if (const auto b = rank.value("cpu_binding", "");
        !b.empty() && std::find(bindings.begin(), bindings.end(), b) == bindings.end())
      bindings.push_back(b);
    for (const auto& e : ends[static_cast<std::size_t>(run)])
      if (e.value("rank", -1) == rank.value("rank", -2))
        device["state_after"] = e.value("device_state_after", json::object());
  });
  if (kinds.size() > 1) {
    std::string names;
    for (const auto& k : kinds) names += (names.empty() ? "" : ", ") + k;
    throw std::runtime_error("the acquisition was measured on several device kinds (" + names +
                             "); one table describes one kind of device");
  }
  return {{"runs", acq.runs.size()}, {"devices", devices}};
}

std::map<std::pair<int, int>, int> round_devices(const StoredAcquisition& acq) {
  std::map<std::pair<int, int>, int> out;
  for_each_run_device(acq, [&](int run, const json& rank, int position, bool) {
    out[{run, rank.value("rank", -1)}] = position;
  });
  return out;
}

namespace {

json rank0_of(const std::string& list) {
  for (const auto& r : json::parse(list))
    if (r.value("rank", -1) == 0) return r;
  return json::object();
}

}  // namespace

json run_history(const StoredAcquisition& acq) {
  json out = json::array();
  for (std::size_t i = 0; i < acq.runs.size(); ++i) {
    const auto start = rank0_of(acq.runs[i].start);
    json run = {{"run", i}};
    for (const char* k : {"started_utc", "command", "harness_revision", "harness_binary_sha256",
                          "family_table_sha256"})
      if (start.contains(k)) run[k] = start[k];
    if (start.contains("job_text")) run["job_sha256"] = sha256_hex(start["job_text"]);
    if (!acq.runs[i].end.empty()) {
      const auto end = rank0_of(acq.runs[i].end);
      run["ended_utc"] = end.value("ended_utc", "");
      run["complete"] = end.value("complete", false);
    }
    out.push_back(run);
  }
  return out;
}

json placement_of(const StoredAcquisition& acq) {
  json runs = json::array();
  bool verified = !acq.runs.empty();
  std::set<int> regimes;
  std::set<std::string> gates;
  for (std::size_t i = 0; i < acq.runs.size(); ++i) {
    std::map<std::string, json> nodes;  // host -> the placement its ranks recorded
    for (const auto& rank : json::parse(acq.runs[i].start)) {
      const auto p = rank.value("placement", json::object());
      const auto gate = p.value("gate", "not recorded (the run predates placement records)");
      json node = {{"host", rank.value("host", "")}, {"gate", gate}};
      if (p.contains("regime")) {
        node["regime"] = p["regime"];
        regimes.insert(p["regime"].get<int>());
      }
      if (p.contains("ranks_on_node")) node["ranks_on_node"] = p["ranks_on_node"];
      if (p.contains("verdict_created_utc")) node["verdict_created_utc"] = p["verdict_created_utc"];
      if (p.contains("verdict_profile")) node["verdict_profile"] = p["verdict_profile"];
      gates.insert(gate);
      verified = verified && (gate == "verified" || gate.starts_with("not needed"));
      nodes.emplace(node["host"].get<std::string>(), node);
    }
    json list = json::array();
    for (auto& [host, node] : nodes) list.push_back(node);
    runs.push_back({{"run", i}, {"nodes", list}});
  }
  return {{"verified", verified}, {"regimes", regimes}, {"gates", gates}, {"runs", runs}};
}

std::string latest_job_text(const StoredAcquisition& acq) {
  return acq.runs.empty() ? std::string() : rank0_of(acq.runs.back().start).value("job_text", "");
}

int recorded_sm_count(const StoredAcquisition& acq) {
  json identity;
  try {
    identity = hardware_identity(acq);
  } catch (const std::runtime_error&) {
    return 0;  // several kinds of device: no one count (publish and resume refuse such a file)
  }
  const auto devices = identity.value("devices", json::array());
  if (devices.empty() || !devices.front().contains("sm_count")) return 0;
  const auto& v = devices.front().at("sm_count");  // provenance records it as a decimal string
  const auto text = v.is_string() ? v.get<std::string>() : v.dump();
  int sms = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), sms);
  if (ec != std::errc{} || end != text.data() + text.size() || sms < 0)
    throw FileError("the acquisition's device records an SM count that is not a count: " + text);
  return sms;
}

}  // namespace moe
