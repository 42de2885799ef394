// components.csv, the stored triangulation and the lookup query path: the input is a table put
// into a valid bundle (fuzz/bundle, its checksum updated so the reader gets past it), then after a
// line "#^" the triangulation.json put beside it (its checksum updated too), then after a line
// "#?" queries "component,N,A,M" per line. Loading and every query either answer or throw one
// LookupError.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/files.h"
#include "lookup/lookup.h"

namespace {

namespace fs = std::filesystem;

const std::string kFixtureSha = "0cc6ee2e50d5f2c3610b278ffd149d060a6d1ea4d05518ba63c8aaf352b36be2";
const std::string kTriangulationSha(64, '0');  // the fixture's placeholder

struct Scratch {
  fs::path dir, csv;
  std::string meta;  // fixture meta.yaml
  Scratch() {
    dir = fs::temp_directory_path() / ("fuzz_table." + std::to_string(getpid()));
    csv = dir / "tp1/moe_components/dp1_ep1_rank0_sp0/components.csv";
    fs::create_directories(csv.parent_path());
    meta = moe::read_file(fs::path(HARNESS_FUZZ_BUNDLE) / "meta.yaml");
  }
};

Scratch& scratch() {
  static Scratch s;
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto& s = scratch();
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto split = input.find("\n#?\n");
  const std::string head = input.substr(0, split);
  const auto mesh_at = head.find("\n#^\n");
  const std::string table = head.substr(0, mesh_at);
  const std::string mesh = mesh_at == std::string::npos ? "" : head.substr(mesh_at + 4);
  std::ofstream(s.csv, std::ios::binary | std::ios::trunc) << table;
  std::ofstream(s.csv.parent_path() / "triangulation.json", std::ios::binary | std::ios::trunc)
      << mesh;
  std::string meta = s.meta;
  meta.replace(meta.find(kFixtureSha), kFixtureSha.size(), moe::sha256_hex(table));
  meta.replace(meta.find(kTriangulationSha), kTriangulationSha.size(), moe::sha256_hex(mesh));
  std::ofstream(s.dir / "meta.yaml", std::ios::binary | std::ios::trunc) << meta;
  try {
    auto d = moe::Deployment::load(s.dir, moe::DeploymentKey{});
    std::istringstream queries(split == std::string::npos ? "" : input.substr(split + 4));
    for (std::string line; std::getline(queries, line);) {
      const auto f = moe::split_csv_line(line);
      if (f.size() != 4) continue;
      const auto c = moe::parse_component(f[0]);
      if (!c) continue;
      const auto number = [](const std::string& t) {
        std::int64_t v = 0;
        for (char ch : t.substr(0, 12))
          if (ch >= '0' && ch <= '9') v = v * 10 + (ch - '0');
        return t.rfind('-', 0) == 0 ? -v : v;
      };
      try {
        (void)d.query(*c, number(f[1]), number(f[2]), number(f[3]));
      } catch (const moe::LookupError&) {
      }
    }
  } catch (const moe::LookupError&) {
  }
  return 0;
}
