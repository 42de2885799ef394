// Operator families (docs/colocation.md): a versioned, priority-ordered regex table over kernel
// names.
#pragma once

#include <map>
#include <regex>
#include <string>
#include <vector>

namespace moe {

inline constexpr double kMaxOtherShare = 0.30;  // a window with more `other` is unclassifiable

class FamilyTable {
 public:
  // Parses the YAML table; throws std::invalid_argument naming the problem.
  explicit FamilyTable(const std::string& yaml_text);
  // The table committed as ranks/operator_families.yaml (compiled in).
  [[nodiscard]] static const FamilyTable& builtin();

  [[nodiscard]] const std::string& classify(const std::string& kernel_name) const;  // or "other"
  [[nodiscard]] int version() const { return version_; }
  [[nodiscard]] const std::string& sha256() const { return sha256_; }
  [[nodiscard]] std::vector<std::string> names() const;

 private:
  struct Family {
    std::string name;
    std::regex pattern;
  };
  int version_ = 0;
  std::string sha256_;
  std::vector<Family> families_;
};

struct FamilyShares {
  std::map<std::string, double> shares;  // family -> share of total duration (incl. "other")
  double total_us = 0;
  [[nodiscard]] double other() const;
  [[nodiscard]] bool classifiable() const { return other() <= kMaxOtherShare; }
};

// Shares of (name, duration) activities by family.
[[nodiscard]] FamilyShares family_shares(
    const FamilyTable& table, const std::vector<std::pair<std::string, double>>& activities);

}  // namespace moe
