// Job files: any text is either a job or one JobError naming the problem. Any other exception
// (a library's own text reaching the user) or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)moe::parse_job(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
  } catch (const moe::JobError&) {
  }
  return 0;
}
