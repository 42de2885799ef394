// meta.yaml: any text is either a bundle description or one BundleError.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "bundle/bundle_meta.h"

namespace {

const std::filesystem::path& scratch() {
  static const auto dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("fuzz_meta." + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::ofstream(scratch() / "meta.yaml", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    (void)moe::load_bundle_meta(scratch());
  } catch (const moe::BundleError&) {
  }
  return 0;
}
