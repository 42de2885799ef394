// The sanity block (docs/bundle-format.md) that ends every published table and run summary: per
// numeric family the count of finite and missing values, min, max and distinct count; ratios must
// lie in [0,1], counters must be non-negative, and identical tables across different cells are a
// red flag.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moe {

class SanityBlock {
 public:
  enum class Kind { value, ratio, counter };
  // Adds one value of family `family`; NaN counts as missing.
  void add(const std::string& family, double v, Kind kind = Kind::value);
  // Registers a cell's table (its values in row order) for the identical-tables check.
  void add_table(const std::string& cell, std::vector<double> values);
  // A problem found by the caller (e.g. a table whose checksum does not match): a red flag.
  void flag(std::string problem);

  [[nodiscard]] std::vector<std::string> red_flags() const;
  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] std::string to_text() const;

 private:
  struct Family {
    Kind kind = Kind::value;
    std::size_t finite = 0, missing = 0, out_of_range = 0;
    double min = 0, max = 0;
    std::vector<double> values;
  };
  std::map<std::string, Family> families_;
  std::map<std::string, std::vector<double>> tables_;
  std::vector<std::string> flags_;
};

}  // namespace moe
