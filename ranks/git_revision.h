#pragma once
// The commit this binary was built from, recorded in every acquisition file, in each run's
// provenance and by `harness --version`. Read at every build (cmake/write_git_revision.cmake),
// not only when the build was configured.

namespace moe {

// 12 hex digits, "+dirty" when tracked files differed from that commit, or "unknown".
[[nodiscard]] const char* git_revision();

}  // namespace moe
