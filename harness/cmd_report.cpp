// harness report BUNDLE --out report.html: the bundle's HTML report (bundle/report.h).
#include <iostream>

#include "bundle/report.h"
#include "core/files.h"
#include "harness/commands.h"

namespace po = boost::program_options;

namespace moe::cli {

int report(const Args& args) {
  std::string bundle, out = "report.html";
  po::options_description desc("harness report BUNDLE_VARIANT_DIR [--out report.html]");
  desc.add_options()("bundle", po::value(&bundle), "bundle variant directory")(
      "out", po::value(&out), "HTML file to write");
  po::positional_options_description pos;
  pos.add("bundle", 1);
  if (!parse(args, desc, pos)) return 0;  // --help was printed
  const auto r = render_report(bundle);
  write_file_atomic(out, r.html);
  std::cout << "report: " << out << " (" << r.tables << " tables)\n";
  return 0;
}

}  // namespace moe::cli
