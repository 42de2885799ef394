// A C++ program using the installed lookup library through its C++ API (lookup/lookup.h):
//   consumer_cpp VARIANT_DIR TP DP < queries
// Query lines: "component NAME N A M", "collective NAME N", or "rows" (how many published rows
// carry a record of how they were measured: Deployment::row_records()). Prints one line per query:
// the time in µs (the count for "rows"), or "error: MESSAGE".
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include "lookup/lookup.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: consumer_cpp VARIANT_DIR TP DP < queries\n";
    return 2;
  }
  moe::DeploymentKey key;
  key.tp = std::stoi(argv[2]);
  key.dp = std::stoi(argv[3]);
  auto deployment = moe::Deployment::load(argv[1], key);
  const auto collectives = moe::CollectiveTable::load(argv[1], key);
  std::cout << std::setprecision(17);
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string kind, name;
    std::int64_t n = 0, a = 0, m = 0;
    in >> kind >> name >> n >> a >> m;
    try {
      if (kind == "rows") {
        std::cout << deployment.row_records().size() << "\n";
      } else if (kind == "collective") {
        std::cout << collectives.query(name, n).time_us << "\n";
      } else {
        const auto component = moe::parse_component(name);
        if (!component) throw std::invalid_argument("unknown component '" + name + "'");
        std::cout << deployment.query(*component, n, a, m).time_us << "\n";
      }
    } catch (const std::exception& e) {
      std::cout << "error: " << e.what() << "\n";
    }
  }
  return 0;
}
