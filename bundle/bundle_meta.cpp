#include "bundle/bundle_meta.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "bundle/format.h"
#include "core/files.h"
#include "core/yaml_error.h"

namespace moe {

using nlohmann::json;

namespace {

void emit(YAML::Emitter& out, const json& j) {
  if (j.is_object()) {
    out << YAML::BeginMap;
    for (const auto& [k, v] : j.items()) {
      out << YAML::Key << k << YAML::Value;
      emit(out, v);
    }
    out << YAML::EndMap;
  } else if (j.is_array()) {
    // Lists of scalars on one line, lists of mappings (entries) one item per line.
    const bool scalars =
        std::none_of(j.begin(), j.end(), [](const json& v) { return v.is_structured(); });
    if (scalars) out << YAML::Flow;
    out << YAML::BeginSeq;
    for (const auto& v : j) emit(out, v);
    out << YAML::EndSeq;
  } else if (j.is_string()) {
    out << YAML::DoubleQuoted << j.get<std::string>();  // quoted: stays a string when read back
  } else if (j.is_boolean()) {
    out << j.get<bool>();
  } else if (j.is_number_integer()) {
    out << j.get<std::int64_t>();
  } else if (j.is_number()) {
    out << j.get<double>();
  } else {
    out << YAML::Null;
  }
}

json to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json j = json::object();
      for (const auto& kv : n) j[kv.first.as<std::string>()] = to_json(kv.second);
      return j;
    }
    case YAML::NodeType::Sequence: {
      json j = json::array();
      for (const auto& v : n) j.push_back(to_json(v));
      return j;
    }
    case YAML::NodeType::Scalar: {
      if (n.Tag() == "!") return n.Scalar();  // quoted
      const auto& s = n.Scalar();
      if (s == "true") return true;
      if (s == "false") return false;
      try {
        std::size_t used = 0;
        const auto i = std::stoll(s, &used);
        if (used == s.size()) return i;
        const auto d = std::stod(s, &used);
        if (used == s.size()) return d;
      } catch (const std::exception&) {
      }
      return s;
    }
    default:
      return nullptr;
  }
}

json round_trip(const json& j) {
  YAML::Emitter out;
  out.SetDoublePrecision(15);
  emit(out, j);
  return to_json(YAML::Load(out.c_str()));
}

}  // namespace

std::string json_to_yaml(const json& j) {
  YAML::Emitter out;
  out.SetDoublePrecision(15);
  emit(out, j);
  return std::string(out.c_str()) + "\n";
}

json yaml_to_json(const std::string& yaml_text) {
  return to_json(YAML::Load(yaml_text));
}

std::optional<json> load_colocation(const std::filesystem::path& variant_dir) {
  const auto path = variant_dir / bundle_format::kColocationFile;
  if (!std::filesystem::exists(path)) return std::nullopt;
  try {
    return yaml_to_json(read_file(path));
  } catch (const YAML::Exception& e) {
    throw BundleError(path.string() + ": corrupt co-location verdict: " + e.what());
  }
}

void publish_colocation(const std::filesystem::path& variant_dir, const json& verdict) {
  std::filesystem::create_directories(variant_dir);
  FileLock lock(variant_dir / bundle_format::kMetaLock, FileLock::Mode::wait);
  write_file_atomic(variant_dir / bundle_format::kColocationFile, json_to_yaml(verdict));
}

std::string contract_sha256(const json& contract) {
  return sha256_hex(round_trip(contract).dump());
}

namespace {
const char* key_of(Section s) {
  return s == Section::moe_components ? bundle_format::kComponentsDir
                                      : bundle_format::kCollectivesDir;
}
const char* schema_of(Section s) {
  return s == Section::moe_components ? kMoeComponentsSchema : kCollectivesSchema;
}
}  // namespace

const std::map<int, std::vector<BundleEntry>>& BundleMeta::per_tp(Section s) const {
  static const std::map<int, std::vector<BundleEntry>> none;
  auto it = sections.find(s);
  return it == sections.end() ? none : it->second;
}

bool BundleMeta::empty() const {
  for (const auto& [s, m] : sections)
    if (!m.empty()) return false;
  return true;
}

const BundleEntry* BundleMeta::find(const Target& target, Section section) const {
  const auto& tables = per_tp(section);
  auto it = tables.find(target.tp);
  if (it == tables.end()) return nullptr;
  for (const auto& e : it->second)
    if (e.target == target) return &e;
  return nullptr;
}

BundleEntry* BundleMeta::find(const Target& target, Section section) {
  return const_cast<BundleEntry*>(std::as_const(*this).find(target, section));
}

void BundleMeta::add(BundleEntry e, Section section) {
  const int tp = e.target.tp;
  e.contract = round_trip(e.contract);
  e.contract_sha256 = contract_sha256(e.contract);
  sections[section][tp].push_back(std::move(e));
}

std::string BundleMeta::to_yaml() const {
  json per = json::object();
  for (const auto& [section, tables] : sections)
    for (const auto& [tp, entries] : tables) {
      json list = json::array();
      for (const auto& e : entries)
        list.push_back({{"target", e.target.to_json()},
                        {"path", e.path},
                        {"contract", e.contract},
                        {"contract_sha256", e.contract_sha256},
                        {"coverage", e.coverage},
                        {"provenance", e.provenance}});
      per[std::to_string(tp)][key_of(section)] = {{"schema", schema_of(section)},
                                                  {"entries", list}};
    }
  YAML::Emitter out;
  out.SetDoublePrecision(15);
  out << YAML::BeginMap << YAML::Key << "schema_version" << YAML::Value << 1 << YAML::Key
      << "variant" << YAML::Value << YAML::DoubleQuoted << variant << YAML::Key << "per_tp"
      << YAML::Value;
  emit(out, per);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

namespace {

BundleMeta parse_bundle_meta(const std::filesystem::path& variant_dir);

}  // namespace

BundleMeta load_bundle_meta(const std::filesystem::path& variant_dir) {
  try {
    return parse_bundle_meta(variant_dir);
  } catch (const YAML::Exception& e) {
    throw BundleError((variant_dir / bundle_format::kMetaFile).string() +
                      ": corrupt meta.yaml: " + describe_yaml_error(e));
  }
}

namespace {

BundleMeta parse_bundle_meta(const std::filesystem::path& variant_dir) {
  BundleMeta meta;
  meta.variant = variant_dir.filename().string();
  const auto path = variant_dir / bundle_format::kMetaFile;
  if (!std::filesystem::exists(path)) return meta;
  YAML::Node root;
  try {
    root = YAML::Load(read_file(path));
  } catch (const YAML::Exception& e) {
    throw BundleError(path.string() + ": corrupt meta.yaml: " + describe_yaml_error(e));
  }
  const auto fail = [&](const std::string& why) {
    throw BundleError(path.string() + ": corrupt meta.yaml: " + why);
  };
  const auto target_of_json = [&](const json& j) {
    try {
      return Target::from_json(j);
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
    return Target{};
  };
  if (!root.IsMap() || !root["per_tp"] || !root["per_tp"].IsMap()) fail("no per_tp mapping");
  if (!root["schema_version"] || root["schema_version"].as<std::string>() != "1")
    fail("unsupported schema_version");
  for (const auto& tp_node : root["per_tp"]) {
    int tp = 0;
    try {
      tp = std::stoi(tp_node.first.as<std::string>());
    } catch (const std::exception&) {
      fail("per_tp key '" + tp_node.first.as<std::string>() + "' is not a TP degree");
    }
    if (!tp_node.second[bundle_format::kComponentsDir])
      fail("per_tp[" + std::to_string(tp) + "] has no moe_components");
    for (const auto section : {Section::moe_components, Section::collectives}) {
      const auto mc = tp_node.second[key_of(section)];
      if (!mc) continue;
      const std::string where = "per_tp[" + std::to_string(tp) + "]." + key_of(section);
      if (!mc.IsMap()) fail(where + " is not a mapping");
      if (!mc["schema"] || mc["schema"].as<std::string>() != schema_of(section))
        fail(where + ".schema is not '" + schema_of(section) + "'");
      if (!mc["entries"] || !mc["entries"].IsSequence()) fail(where + " has no entries list");
      for (const auto& en : mc["entries"]) {
        for (const char* k : {"target", "path", "contract", "contract_sha256", "coverage"})
          if (!en[k]) fail("an entry of per_tp[" + std::to_string(tp) + "] lacks '" + k + "'");
        BundleEntry e{target_of_json(to_json(en["target"])),
                      en["path"].as<std::string>(),
                      to_json(en["contract"]),
                      en["contract_sha256"].as<std::string>(),
                      to_json(en["coverage"]),
                      en["provenance"] ? to_json(en["provenance"]) : json::object()};
        if (contract_sha256(e.contract) != e.contract_sha256)
          fail("the contract of target " + e.target.label() +
               " does not match its SHA-256 (tampered?)");
        // Everything that identifies the table is under the contract's hash: the entry's target
        // must be the contract's, and its path the one the format gives that target.
        if (!e.contract.contains("target") || target_of_json(e.contract["target"]) != e.target)
          fail("the target of entry " + e.target.label() + " does not match its contract");
        const auto want_path = section == Section::moe_components
                                   ? bundle_format::components_path(e.target)
                                   : bundle_format::collectives_path(e.target);
        if (e.path != want_path)
          fail("entry " + e.target.label() + " has path '" + e.path + "', expected '" + want_path +
               "'");
        meta.sections[section][tp].push_back(std::move(e));
      }
    }
  }
  return meta;
}

}  // namespace

void save_bundle_meta(const std::filesystem::path& variant_dir, const BundleMeta& meta) {
  write_file_atomic(variant_dir / bundle_format::kMetaFile, meta.to_yaml());
}

namespace {

// A file beside the entry's table.
std::filesystem::path beside_table(const std::filesystem::path& tp_dir, const BundleEntry& e,
                                   const char* file) {
  return tp_dir / std::filesystem::path(e.path).parent_path() / file;
}

}  // namespace

nlohmann::json BundleEntry::fidelity() const {
  if (!coverage.is_object()) return nlohmann::json::object();
  const auto it = coverage.find("fidelity");
  return it != coverage.end() && it->is_object() ? *it : nlohmann::json::object();
}

nlohmann::json BundleEntry::fidelity_components() const {
  const auto f = fidelity();
  const auto it = f.find("components");
  return it != f.end() && it->is_object() ? *it : nlohmann::json::object();
}

std::optional<std::string> read_fidelity_file(const std::filesystem::path& tp_dir,
                                              const BundleEntry& e, const std::string& key,
                                              const char* file) {
  const auto fidelity = e.fidelity();
  if (!fidelity.contains(key)) return std::nullopt;
  const auto& named = fidelity.at(key);
  const auto path = beside_table(tp_dir, e, file);
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::runtime_error&) {
    throw BundleError("cannot read " + path.string() + " (named by " + key + " in meta.yaml)");
  }
  if (sha256_hex(text) != named.value("sha256", ""))
    throw BundleError(path.string() + ": checksum mismatch (" + key + ".sha256 in meta.yaml)");
  return text;
}

RowRecords read_row_records(const std::filesystem::path& tp_dir, const BundleEntry& e) {
  RowRecords records;
  const auto text =
      read_fidelity_file(tp_dir, e, "row_clocks_table", bundle_format::kRowClocksFile);
  if (!text) return records;
  const auto path = beside_table(tp_dir, e, bundle_format::kRowClocksFile).string();
  int line = 1;
  // 5 fields: published before the devices column; 6: before the run_spread column; 7: before
  // the launch_waves column.
  for (const auto& f : csv_data_rows(*text)) {
    ++line;
    const auto bad = [&] {
      return BundleError(path + ":" + std::to_string(line) + ": expected " +
                         bundle_format::kRowClocksHeader);
    };
    const auto component = f.size() >= 5 && f.size() <= 8 ? parse_component(f[0]) : std::nullopt;
    if (!component) throw bad();
    RowRecord r;
    try {
      if (!f[4].empty()) r.sm_clock_mean_mhz = csv_real(f[4]);
      if (f.size() >= 7 && !f[6].empty()) {
        r.run_spread = csv_real(f[6]);
        if (!(*r.run_spread >= 0)) throw bad();
      }
      if (f.size() == 8 && !f[7].empty()) {
        std::istringstream waves(f[7]);
        for (std::string w; std::getline(waves, w, ';');) {
          r.launch_waves.push_back(csv_integer(w));
          if (r.launch_waves.back() < 0) throw bad();
        }
      }
      if (f.size() >= 6 && !f[5].empty()) {
        std::istringstream devices(f[5]);
        for (std::string d; std::getline(devices, d, ';');) {
          const auto device = csv_integer(d);
          if (device < 0 || device > std::numeric_limits<int>::max()) throw bad();
          r.devices.push_back(static_cast<int>(device));
        }
      }
      records[{*component, GridPoint{csv_integer(f[1]), csv_integer(f[2]), csv_integer(f[3])}}] =
          std::move(r);
    } catch (const std::invalid_argument&) {
      throw bad();
    }
  }
  return records;
}

}  // namespace moe
