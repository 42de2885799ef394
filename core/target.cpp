#include "core/target.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace moe {

std::string Target::dir_name() const {
  return "dp" + std::to_string(dp) + "_ep" + std::to_string(ep) + "_rank" + std::to_string(rank) +
         "_sp" + (sp ? "1" : "0");
}

std::string tp_dir_name(int tp) {
  return "tp" + std::to_string(tp);
}

std::string Target::tp_dir() const {
  return tp_dir_name(tp);
}

std::string Target::label() const {
  return tp_dir() + "/" + dir_name();
}

std::string Target::label(Component c) const {
  return label() + " " + std::string(to_string(c));
}

std::string Target::cell_id() const {
  return tp_dir() + "_" + dir_name();
}

nlohmann::json Target::to_json() const {
  return {{"tp", tp}, {"dp", dp}, {"ep", ep}, {"rank", rank}, {"sp", sp}};
}

Target Target::from_json(const nlohmann::json& j) {
  if (!j.is_object())
    throw std::invalid_argument("a target must be a mapping {tp, dp, ep, rank, sp}");
  const auto integer = [&](const char* key) {
    if (!j.contains(key) || !j.at(key).is_number_integer())
      throw std::invalid_argument(std::string("target key '") + key +
                                  "' is missing or not an integer");
    return j.at(key).get<int>();
  };
  if (!j.contains("sp") || !j.at("sp").is_boolean())
    throw std::invalid_argument("target key 'sp' is missing or not a boolean");
  return {integer("tp"), integer("dp"), integer("ep"), integer("rank"), j.at("sp").get<bool>()};
}

}  // namespace moe
