// The HTML report of a bundle variant: one self-contained page with inline SVG plots of
// component time vs tokens per target (one line per activated-experts value for `experts`),
// held-out points predicted against measured per target (with y = x),
// collective bus bandwidth vs bytes, co-location throughput and family shares, and the sanity
// block.
#pragma once

#include <filesystem>
#include <string>

namespace moe {

struct Report {
  std::string html;
  int tables = 0;
};

// Throws BundleError when `variant_dir` holds no bundle or a table is unreadable.
[[nodiscard]] Report render_report(const std::filesystem::path& variant_dir);

}  // namespace moe
