#include "bundle/report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bundle/bundle_meta.h"
#include "bundle/fidelity.h"
#include "bundle/format.h"
#include "bundle/sanity.h"
#include "core/files.h"
#include "core/job_spec.h"

namespace moe {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Series = std::map<std::string, std::vector<std::pair<double, double>>>;  // label -> (x, y)

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s)
    o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return o;
}

// A series keeps its colour in every plot of a report: the components and collectives have fixed
// colours, other series (experts A=...) one chosen by their name.
const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                         "#e377c2", "#17becf", "#7f7f7f", "#bcbd22", "#393b79", "#637939",
                         "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354"};

const char* colour_of(const std::string& series) {
  static const std::map<std::string, const char*> fixed = {{"gate_routing", "#1f77b4"},
                                                           {"finalize_copy", "#2ca02c"},
                                                           {"wrapper", "#ff7f0e"},
                                                           {"experts", "#d62728"}};
  if (const auto it = fixed.find(series); it != fixed.end()) return it->second;
  std::uint32_t h = 2166136261u;  // FNV-1a
  for (const unsigned char c : series) h = (h ^ c) * 16777619u;
  return kColors[h % (sizeof(kColors) / sizeof(kColors[0]))];
}

enum class PlotStyle {
  lines,                // one polyline per series through its points
  points_and_diagonal,  // points only, with the y = x line (predicted against measured)
  lines_linear_y,       // as lines, on a linear y axis (a quantity of narrow range: clocks)
};

// A step of 1, 2 or 5 times a power of ten, about a fifth of `range`: the linear axis's ticks.
double tick_step(double range) {
  const double raw = range / 5, decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0})
    if (m * decade >= raw) return m * decade;
  return 10 * decade;
}

// The mean SM clock each component's rows were measured at (coverage.fidelity), one line.
std::string clock_line(const BundleEntry& e) {
  std::ostringstream s;
  s << "<p class=\"clock\">mean SM clock of the rows:";
  const auto components = e.fidelity_components();
  if (components.empty()) s << " not recorded";
  for (const auto& [name, c] : components.items()) {
    const auto clock = c.value("sm_clock_mean_mhz", json::object());
    s << " " << esc(name) << " ";
    if (clock.value("recorded", 0) > 0)
      s << "median " << std::lround(clock["median"].get<double>()) << " MHz ("
        << std::lround(clock["min"].get<double>()) << "&ndash;"
        << std::lround(clock["max"].get<double>()) << ");";
    else
      s << "not recorded;";
  }
  s << "</p>";
  return s.str();
}

// A plot on a log x axis as inline SVG; log y too unless the style says linear.
std::string log_plot(const std::string& title, const std::string& table, const std::string& xlabel,
                     const std::string& ylabel, const Series& series,
                     PlotStyle style = PlotStyle::lines) {
  const double w = 640, h = 360, l = 70, r = 150, t = 30, b = 50;
  double x0 = INFINITY, x1 = 0, y0 = INFINITY, y1 = 0;
  for (const auto& [name, pts] : series)
    for (auto [x, y] : pts)
      if (x > 0 && y > 0)
        x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (!(x1 > 0)) x0 = 1, x1 = 10, y0 = 1, y1 = 10;
  if (style == PlotStyle::points_and_diagonal)  // same range on both axes: y = x is diagonal
    x0 = y0 = std::min(x0, y0), x1 = y1 = std::max(x1, y1);
  const double lx0 = std::log10(x0), lx1 = std::max(std::log10(x1), lx0 + 1e-9);
  const bool linear_y = style == PlotStyle::lines_linear_y;
  if (linear_y) {  // a margin of a tenth of the range (at least 1) above and below
    const double pad = std::max(1.0, (y1 - y0) / 10);
    y0 -= pad, y1 += pad;
  }
  const double ly0 = std::log10(y0), ly1 = std::max(std::log10(y1), ly0 + 1e-9);
  const auto px = [&](double x) { return l + (std::log10(x) - lx0) / (lx1 - lx0) * (w - l - r); };
  const auto py = [&](double y) {
    const double f = linear_y ? (y - y0) / (y1 - y0) : (std::log10(y) - ly0) / (ly1 - ly0);
    return h - b - f * (h - t - b);
  };
  std::ostringstream s;
  s << "<svg class=\"plot\" data-table=\"" << esc(table) << "\" width=\"" << w << "\" height=\""
    << h << "\" xmlns=\"http://www.w3.org/2000/svg\" font-family=\"sans-serif\" font-size=\"11\">"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>"
    << "<text x=\"" << l << "\" y=\"18\" font-size=\"13\" font-weight=\"bold\">" << esc(title)
    << "</text>"
    << "<rect x=\"" << l << "\" y=\"" << t << "\" width=\"" << w - l - r << "\" height=\""
    << h - t - b << "\" fill=\"none\" stroke=\"#333\"/>";
  for (int d = static_cast<int>(std::floor(lx0)); d <= static_cast<int>(std::ceil(lx1)); ++d) {
    const double v = std::pow(10.0, d);
    if (v < x0 / 1.0001 || v > x1 * 1.0001) continue;
    s << "<line x1=\"" << px(v) << "\" x2=\"" << px(v) << "\" y1=\"" << t << "\" y2=\"" << h - b
      << "\" stroke=\"#ddd\"/><text x=\"" << px(v) << "\" y=\"" << h - b + 14
      << "\" text-anchor=\"middle\">1e" << d << "</text>";
  }
  const auto y_tick = [&](double v, const std::string& label) {
    s << "<line x1=\"" << l << "\" x2=\"" << w - r << "\" y1=\"" << py(v) << "\" y2=\"" << py(v)
      << "\" stroke=\"#ddd\"/><text class=\"y-tick\" x=\"" << l - 4 << "\" y=\"" << py(v) + 4
      << "\" text-anchor=\"end\">" << label << "</text>";
  };
  if (linear_y) {
    const double step = tick_step(y1 - y0);
    for (double v = std::ceil(y0 / step) * step; v <= y1; v += step)
      y_tick(v, std::to_string(std::lround(v)));
  } else {
    for (int d = static_cast<int>(std::floor(ly0)); d <= static_cast<int>(std::ceil(ly1)); ++d) {
      const double v = std::pow(10.0, d);
      if (v < y0 / 1.0001 || v > y1 * 1.0001) continue;
      y_tick(v, "1e" + std::to_string(d));
    }
  }
  s << "<text x=\"" << (l + w - r) / 2 << "\" y=\"" << h - 12 << "\" text-anchor=\"middle\">"
    << esc(xlabel) << "</text><text x=\"14\" y=\"" << (t + h - b) / 2
    << "\" transform=\"rotate(-90 14 " << (t + h - b) / 2 << ")\" text-anchor=\"middle\">"
    << esc(ylabel) << "</text>";
  if (style == PlotStyle::points_and_diagonal)
    s << "<line class=\"diagonal\" x1=\"" << px(x0) << "\" y1=\"" << py(y0) << "\" x2=\"" << px(x1)
      << "\" y2=\"" << py(y1) << "\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>";
  int i = 0;
  for (const auto& [name, pts0] : series) {
    auto pts = pts0;
    std::sort(pts.begin(), pts.end());
    const char* c = colour_of(name);
    if (style != PlotStyle::points_and_diagonal) {
      // A NaN value is a gap: the line stops there and starts again after it.
      bool open = false;
      for (auto [x, y] : pts) {
        if (std::isnan(y)) {
          if (open) s << "\"/>";
          open = false;
          continue;
        }
        if (!(x > 0 && y > 0)) continue;
        if (!open)
          s << "<polyline class=\"series\" data-series=\"" << esc(name)
            << "\" fill=\"none\" stroke=\"" << c << "\" stroke-width=\"1.5\" points=\"";
        open = true;
        s << px(x) << "," << py(y) << " ";
      }
      if (open) s << "\"/>";
    }
    for (auto [x, y] : pts)
      if (x > 0 && y > 0)
        s << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"2\" fill=\"" << c << "\"/>";
    if (i < 16)
      s << "<rect x=\"" << w - r + 10 << "\" y=\"" << t + 14 * i
        << "\" width=\"10\" height=\"10\" fill=\"" << c << "\"/><text x=\"" << w - r + 24
        << "\" y=\"" << t + 9 + 14 * i << "\">" << esc(name) << "</text>";
    ++i;
  }
  s << "</svg>";
  return s.str();
}

// Grouped bars (solo vs co-located) as inline SVG.
std::string bar_plot(const std::string& title,
                     const std::map<std::string, std::pair<double, double>>& bars) {
  const double w = 640, h = 300, l = 60, t = 30, b = 60;
  double mx = 0;
  for (const auto& [k, v] : bars) mx = std::max({mx, v.first, v.second});
  if (mx <= 0) mx = 1;
  const double slot = (w - l - 20) / std::max<std::size_t>(1, bars.size());
  std::ostringstream s;
  s << "<svg class=\"plot\" data-table=\"colocation\" width=\"" << w << "\" height=\"" << h
    << "\" xmlns=\"http://www.w3.org/2000/svg\" font-family=\"sans-serif\" font-size=\"11\">"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/><text x=\"" << l
    << "\" y=\"18\" font-size=\"13\" "
    << "font-weight=\"bold\">" << esc(title) << " (blue solo, red co-located)</text>";
  int i = 0;
  for (const auto& [k, v] : bars) {
    const double x = l + i * slot, bw = slot * 0.35;
    for (int j = 0; j < 2; ++j) {
      const double val = j == 0 ? v.first : v.second, bh = val / mx * (h - t - b);
      s << "<rect x=\"" << x + j * bw << "\" y=\"" << h - b - bh << "\" width=\"" << bw * 0.95
        << "\" height=\"" << bh << "\" fill=\"" << (j == 0 ? "#1f77b4" : "#d62728") << "\"/>";
    }
    s << "<text x=\"" << x + bw << "\" y=\"" << h - b + 14 << "\" text-anchor=\"middle\">" << esc(k)
      << "</text>";
    ++i;
  }
  s << "</svg>";
  return s.str();
}

std::vector<std::vector<std::string>> read_csv(const fs::path& p) {
  return csv_data_rows(read_file(p));
}

// Predicted against measured for every held-out point of a component table (held_out.csv,
// checked against its SHA-256 in the entry); empty for entries published without one.
std::string held_out_plot(const fs::path& tp_dir, const BundleEntry& e, const std::string& title) {
  const auto text = read_fidelity_file(tp_dir, e, "held_out_table", bundle_format::kHeldOutFile);
  if (!text) return "";
  const auto fidelity = e.fidelity();
  Series series;
  int unpredicted = 0;
  for (const auto& f : csv_data_rows(*text)) {
    if (f.size() < 6 || f[5].empty()) {
      ++unpredicted;
      continue;
    }
    series[f.at(0)].push_back({csv_real(f.at(4)), csv_real(f.at(5))});
  }
  std::ostringstream out;
  out << "<p>held-out points of " << esc(title) << ": " << esc(fidelity.value("status", ""))
      << (unpredicted ? ", " + std::to_string(unpredicted) + " outside the support (not drawn)"
                      : "")
      << "</p>";
  // Per component: how far the table missed its held-out points, and how far the measurement
  // repeats where a held-out point was measured again as a grid row.
  const auto components = e.fidelity_components();
  for (const auto& [name, c] : components.items()) {
    if (!c.contains("held_out")) continue;
    out << "<p class=\"fidelity\">" << esc(name) << " held-out: " << esc(held_out_summary(c));
    if (const auto r = repeatability_summary(c); !r.empty()) out << "; repeatability: " << esc(r);
    if (const auto d = device_spread_summary(c); !d.empty()) out << "; between devices: " << esc(d);
    out << "</p>";
  }
  out << log_plot(title + ": held-out, predicted vs measured",
                  "held_out/" + fs::path(e.path).parent_path().string(), "measured (us)",
                  "predicted by the table (us)", series, PlotStyle::points_and_diagonal);
  return out.str();
}

}  // namespace

Report render_report(const fs::path& dir) {
  const auto meta = load_bundle_meta(dir);
  if (meta.empty()) throw BundleError(dir.string() + ": no meta.yaml here");
  std::ostringstream body;
  SanityBlock sanity;
  int tables = 0;
  for (const auto& [tp, entries] : meta.per_tp(Section::moe_components))
    for (const auto& e : entries) {
      const auto rows = read_csv(dir / tp_dir_name(tp) / e.path);
      const auto row_records = read_row_records(dir / tp_dir_name(tp), e);
      // One line per local component and per activated-experts value; where several M were
      // measured at one (N, A) the line follows the largest M. The clock plot follows the same
      // rows (NaN: the row has no clock, or a gap).
      struct Followed {
        double m, t, clock;
      };
      std::map<std::string, std::map<double, Followed>> lines;  // label -> N -> row
      std::vector<double> times;
      for (const auto& f : rows) {
        const double tok = csv_real(f.at(2)), m = csv_real(f.at(4)), t = csv_real(f.at(5));
        const std::string label = f[0] == "experts" ? "experts A=" + f[3] : f[0];
        const auto component = parse_component(f[0]);
        const auto c =
            component
                ? row_records.find({*component, GridPoint{csv_integer(f[2]), csv_integer(f[3]),
                                                          csv_integer(f[4])}})
                : row_records.end();
        const double clock = c == row_records.end()
                                 ? std::nan("")
                                 : c->second.sm_clock_mean_mhz.value_or(std::nan(""));
        auto [it, fresh] = lines[label].try_emplace(tok, Followed{m, t, clock});
        if (!fresh && m > it->second.m) it->second = {m, t, clock};
        times.push_back(t);
        sanity.add("time_us", t);
      }
      // Where the point the line would follow failed the weight-bank control and was left out,
      // the line has a gap rather than a step to a smaller M (which would zig-zag).
      const auto failed = e.fidelity_components()
                              .value("experts", json::object())
                              .value("failed_points", json::array());
      for (const auto& p : failed) {
        if (!p.is_array() || p.size() != 3) continue;
        auto& line = lines["experts A=" + p[1].dump()];
        const double n = p[0].get<double>(), m = p[2].get<double>();
        if (const auto it = line.find(n); it == line.end() || it->second.m < m)
          line[n] = {m, std::nan(""), std::nan("")};
      }
      Series series, clocks;
      for (const auto& [label, by_n] : lines)
        for (const auto& [n, row] : by_n) {
          series[label].push_back({n, row.t});
          clocks[label].push_back({n, row.clock});
        }
      std::erase_if(clocks, [](const auto& line) {  // no legend entry for a line without a clock
        return std::ranges::all_of(line.second, [](const auto& p) { return std::isnan(p.second); });
      });
      sanity.add_table(e.path, times);
      const std::string title =
          tp_dir_name(tp) + "/" + fs::path(e.path).parent_path().filename().string();
      body << "<h3>" << esc(title) << "</h3>" << clock_line(e)
           << log_plot(title, e.path, "tokens (rows)", "time (us)", series);
      if (!clocks.empty())  // row_clocks.csv: where the power cap lowers the clock
        body << log_plot(title + ": mean SM clock of each row", "row_clocks/" + e.path,
                         "tokens (rows)", "mean SM clock (MHz)", clocks, PlotStyle::lines_linear_y);
      ++tables;
      body << held_out_plot(dir / tp_dir_name(tp), e, title);
    }
  for (const auto& [tp, entries] : meta.per_tp(Section::collectives))
    for (const auto& e : entries) {
      Series series;
      for (const auto& f : read_csv(dir / tp_dir_name(tp) / e.path)) {
        series[f.at(0)].push_back({csv_real(f.at(4)), std::max(1e-6, csv_real(f.at(7)))});
        sanity.add("collective_busbw_gbps", csv_real(f.at(7)));
      }
      const std::string title = "collectives tp" + std::to_string(tp) + "/" +
                                fs::path(e.path).parent_path().filename().string();
      body << "<h3>" << esc(title) << "</h3>"
           << log_plot(title, e.path, "bytes", "bus bandwidth (GB/s)", series);
      ++tables;
    }
  if (const auto verdict = load_colocation(dir)) {
    const auto& v = *verdict;
    body << "<h2>Co-location gate</h2><p>" << esc(v.value("label", "")) << "; allowed regime "
         << esc(v["allowed_regime"].dump()) << "</p>";
    for (const auto& n : v["nodes"]) {
      const json& solo = n.contains("solo") ? n["solo"] : n["regimes_tried"][0]["solo"];
      const json& co = n.contains("repeat") ? n["repeat"] : n["regimes_tried"][0]["colocated"];
      std::map<std::string, std::pair<double, double>> bars;
      for (const auto& [fam, s] : solo["shares"].items())
        bars[fam] = {s.get<double>(), co["shares"].value(fam, 0.0)};
      bars["T (rel.)"] = {
          1.0, co["throughput_per_s"].get<double>() / solo["throughput_per_s"].get<double>()};
      body << bar_plot("node " + n.value("host", "?") + ": family shares and throughput", bars);
    }
  }
  // What the page shows: backend, device, geometry and when, from the first component table.
  std::string header;
  for (const auto& [tp, entries] : meta.per_tp(Section::moe_components))
    for (const auto& e : entries) {
      if (!header.empty()) break;
      const auto backend = e.contract.value("backend", "?");
      const auto& geo = e.contract.value("geometry", json::object());
      const auto devices =
          e.provenance.value("hardware", json::object()).value("devices", json::array());
      header = "backend " + backend + " · device " +
               (devices.empty() ? std::string("unknown") : devices[0].value("device", "?")) +
               " · geometry " + geo.value("name", "?") +
               " (H=" + geo.value("hidden_size", json(0)).dump() +
               ", I=" + geo.value("moe_intermediate_size", json(0)).dump() +
               ", E=" + geo.value("num_experts", json(0)).dump() +
               ", k=" + geo.value("top_k", json(0)).dump() + ") · published " +
               e.provenance.value("published_utc", "?");
      if (host_backend(backend))
        header += "</p><p class=\"warning\"><b>CPU RUN: host-side figures of the " + backend +
                  " backend, not GPU data</b>";
      if (!e.contract.value("placement", json::object()).value("verified", false))
        header +=
            "</p><p class=\"warning\"><b>UNVERIFIED PLACEMENT: several ranks per node measured "
            "without a passing co-location verdict (or the placement was not recorded)</b>";
    }
  const auto sj = sanity.to_json();
  std::ostringstream page;
  page << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>harness report: "
       << esc(meta.variant)
       << "</title><style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse}"
       << "td,th{border:1px solid #999;padding:2px 8px}</style></head><body><h1>harness report: "
       << esc(meta.variant) << "</h1><p class=\"header\">" << header << "</p><p>" << tables
       << " tables</p>" << body.str()
       << "<h2>Sanity</h2><table><tr><th>family</th><th>finite</th><th>missing</th><th>min</"
          "th><th>max</th>"
       << "<th>distinct</th></tr>";
  for (const auto& [name, f] : sj["families"].items())
    page << "<tr><td>" << esc(name) << "</td><td>" << f["finite"] << "</td><td>" << f["missing"]
         << "</td><td>" << f["min"] << "</td><td>" << f["max"] << "</td><td>" << f["distinct"]
         << "</td></tr>";
  page << "</table><p>red flags: "
       << (sj["red_flags"].empty() ? std::string("none") : esc(sj["red_flags"].dump()))
       << "</p></body></html>\n";
  return {page.str(), tables};
}

}  // namespace moe
