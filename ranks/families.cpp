#include "ranks/families.h"

#include <yaml-cpp/yaml.h>

#include <stdexcept>

#include "core/files.h"
#include "ranks/operator_families_data.h"

namespace moe {

FamilyTable::FamilyTable(const std::string& yaml_text) : sha256_(sha256_hex(yaml_text)) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw std::invalid_argument("operator family table: malformed YAML at line " +
                                std::to_string(e.mark.line + 1));
  }
  if (!root["version"] || !root["families"] || !root["families"].IsSequence())
    throw std::invalid_argument("operator family table needs `version` and a `families` list");
  version_ = root["version"].as<int>();
  for (const auto& f : root["families"]) {
    if (!f["name"] || !f["pattern"])
      throw std::invalid_argument("operator family entries need `name` and `pattern`");
    const auto name = f["name"].as<std::string>();
    if (name == "other") throw std::invalid_argument("`other` is reserved for unmatched names");
    try {
      families_.push_back({name, std::regex(f["pattern"].as<std::string>())});
    } catch (const std::regex_error& e) {
      throw std::invalid_argument("operator family '" + name + "': bad pattern: " + e.what());
    }
  }
}

const FamilyTable& FamilyTable::builtin() {
  static const FamilyTable table(kOperatorFamiliesYaml);
  return table;
}

const std::string& FamilyTable::classify(const std::string& kernel_name) const {
  static const std::string other = "other";
  for (const auto& f : families_)
    if (std::regex_search(kernel_name, f.pattern)) return f.name;
  return other;
}

std::vector<std::string> FamilyTable::names() const {
  std::vector<std::string> out;
  for (const auto& f : families_) out.push_back(f.name);
  return out;
}

double FamilyShares::other() const {
  auto it = shares.find("other");
  return it == shares.end() ? 0.0 : it->second;
}

FamilyShares family_shares(const FamilyTable& table,
                           const std::vector<std::pair<std::string, double>>& activities) {
  FamilyShares s;
  for (const auto& [name, us] : activities) {
    s.shares[table.classify(name)] += us;
    s.total_us += us;
  }
  if (s.total_us > 0)
    for (auto& [f, v] : s.shares) v /= s.total_us;
  return s;
}

}  // namespace moe
