// Wraps yaml-cpp exceptions in the harness's words: where in the file (line, column) and what kind
// of structure was wrong, never the library's own type names (docs/cli.md#job-files).
#pragma once

#include <yaml-cpp/exceptions.h>

#include <string>

namespace moe {

[[nodiscard]] inline std::string describe_yaml_error(const YAML::Exception& e) {
  std::string where = e.mark.is_null() ? std::string()
                                       : "line " + std::to_string(e.mark.line + 1) + ", column " +
                                             std::to_string(e.mark.column + 1) + ": ";
  if (dynamic_cast<const YAML::BadConversion*>(&e))
    return where +
           "a value has the wrong type (a list or section where a value is expected, or "
           "text where a number is)";
  if (dynamic_cast<const YAML::BadSubscript*>(&e) || dynamic_cast<const YAML::InvalidNode*>(&e))
    return where + "a value where a section (key: value mapping) is expected";
  return where + "malformed YAML (" + e.msg + ")";
}

}  // namespace moe
