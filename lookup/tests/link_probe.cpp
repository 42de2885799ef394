// A simulator-side program that links only the lookup library: it loads a bundle given on the
// command line and answers one query. The lookup_links_alone test checks what it needs to run.
#include <iostream>

#include "lookup/lookup.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: lookup_link_probe <variant_dir>\n";
    return 2;
  }
  try {
    auto d = moe::Deployment::load(argv[1], moe::DeploymentKey{});
    std::cout << d.contract().at("backend").get<std::string>() << " gate_routing(1 token) "
              << d.query(moe::Component::gate_routing, 1).time_us << " us\n";
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
