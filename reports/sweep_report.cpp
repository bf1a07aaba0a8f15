#include "reports/sweep_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "reports/run_report.hpp"
#include "reports/svg.hpp"

namespace tpusim::reports {

const std::vector<const char*>& time_to_train_pointers() {
  static const std::vector<const char*> pointers = {"/time_to_train/days", "/time_to_train/days_with_goodput",
                                                    "/time_to_train/goodput", "/cost/usd",
                                                    "/cost/usd_with_goodput"};
  return pointers;
}

Json sweep_summary(const Json& record) {
  Json s = Json::object();
  for (const auto& [k, v] : record.items()) {
    if (k != "result" || !v.is_object()) {
      s[k] = v;
      continue;
    }
    s[k] = Json::object();
    for (const auto& [name, figure] : v.items())
      if (!figure.is_structured()) s[k][name] = figure;
    for (const char* pointer :
         {"/breakdown/step_split_s/update", "/breakdown/exposed_communication_s",
          "/compiler_remat/share_of_layers_needed", "/perturbations/uniform_step_time_s"}) {
      const Json::json_pointer p(pointer);
      if (v.contains(p)) s[k][p] = v[p];
    }
    for (const char* pointer : time_to_train_pointers())
      if (const Json::json_pointer p(pointer); v.contains(p)) s[k][p] = v[p];
  }
  return s;
}

namespace {

std::string short_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                          "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

std::string value_text(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

bool ok(const Json& r) {
  return r.value("error", Json(nullptr)).is_null() && r.value("result", Json()).is_object();
}

/// A number at a JSON pointer of a result; `fallback` where it is missing or not a number.
double figure(const Json& result, const char* pointer, double fallback) {
  const Json::json_pointer p(pointer);
  return result.contains(p) && result[p].is_number() ? result[p].get<double>() : fallback;
}

/// Whether a swept path is the seed of random perturbations ("...random.seed"): its points make a
/// distribution.
bool is_seed_axis(const std::string& path) {
  const std::string suffix = "random.seed";
  return path.size() >= suffix.size() &&
         path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The axes as (path, values) for the charts.
struct Axes {
  std::vector<std::string> paths;
  std::string x, series, k, m;          // chosen paths ("" when absent)
  std::vector<std::string> categories;  // x's values by name when x is not numbers
  bool planned = false;                 // each point re-planned (sweep --plan): a column names its plan
};

Axes choose_axes(const Json& meta) {
  Axes a;
  a.planned = meta.contains("plan");
  std::vector<std::string> numeric;
  for (const auto& axis : meta["axes"]) {
    const std::string p = axis["path"].get<std::string>();
    a.paths.push_back(p);
    bool numbers = true;
    for (const auto& v : axis["values"]) numbers = numbers && v.is_number();
    if (!numbers) continue;         // e.g. a stage count swept beside a string: not a chart axis
    if (is_seed_axis(p)) continue;  // a distribution, not a chart axis
    if (axis["values"].size() > 1) numeric.push_back(p);
    if (p == "schedule.stages") a.k = p;
    if (p == "schedule.microbatches") a.m = p;
  }
  a.x = !a.m.empty() ? a.m : (numeric.empty() ? "" : numeric.back());
  if (a.x.empty())  // no numeric axis: the first axis of names (e.g. slice) as categories
    for (const auto& axis : meta["axes"])
      if (axis["values"].size() > 1) {
        a.x = axis["path"].get<std::string>();
        for (const auto& v : axis["values"]) a.categories.push_back(value_text(v));
        break;
      }
  if (!a.k.empty() && a.k != a.x)
    a.series = a.k;
  else
    for (const auto& axis : meta["axes"])
      if (axis["path"] != a.x && axis["values"].size() > 1) {
        a.series = axis["path"].get<std::string>();
        break;
      }
  return a;
}

/// The best fitting configurations, by examples per second.
std::vector<const Json*> best_fitting(const std::vector<Json>& records, std::size_t n) {
  std::vector<const Json*> fit;
  for (const auto& r : records)
    if (ok(r) && r["result"]["fits"].get<bool>()) fit.push_back(&r);
  std::stable_sort(fit.begin(), fit.end(), [](const Json* a, const Json* b) {
    return (*a)["result"]["examples_per_s"].get<double>() > (*b)["result"]["examples_per_s"].get<double>();
  });
  if (fit.size() > n) fit.resize(n);
  return fit;
}

std::vector<std::string> table_header(const Axes& axes) {
  std::vector<std::string> h = axes.paths;
  for (const char* c : {"examples/s", "step time", "bubble (ideal)", "MXU util", "peak HBM", "fits"})
    h.push_back(c);
  if (axes.planned) h.push_back("plan");
  return h;
}

std::vector<std::string> table_row(const Axes& axes, const Json& r) {
  std::vector<std::string> row;
  for (const auto& p : axes.paths) row.push_back(value_text(r["point"].value(p, Json(nullptr))));
  if (!ok(r)) {
    row.resize(table_header(axes).size(), "failed");
    return row;
  }
  const Json& j = r["result"];
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", j["examples_per_s"].get<double>());
  row.push_back(buf);
  row.push_back(human_seconds(j["step_time_s"].get<double>()));
  std::snprintf(buf, sizeof buf, "%.1f %%", 100 * j["bubble_fraction"].get<double>());
  std::string bubble = buf;
  if (!j["bubble_fraction_ideal"].is_null()) {
    std::snprintf(buf, sizeof buf, " (%.1f %%)", 100 * j["bubble_fraction_ideal"].get<double>());
    bubble += buf;
  }
  row.push_back(bubble);
  std::snprintf(buf, sizeof buf, "%.1f %%", 100 * j["mxu_utilization"].get<double>());
  row.push_back(buf);
  row.push_back(human_bytes(j["peak_hbm_bytes"].get<double>()));
  row.push_back(j["fits"].get<bool>() ? "yes" : "no");
  if (axes.planned)
    row.push_back(j.value("plan", std::string()) +
                  (j.value("plan_complete", true) ? "" : " (search cut short)"));
  return row;
}

}  // namespace

namespace {

/// A line chart's plot area and its scales: x linear or log2, y linear or (over a wide range)
/// log10.
struct ChartFrame {
  static constexpr double left = 80, top = 40, w = 560, h = 300, legend = 200;
  bool log_x = false, log_y = false;
  double x0 = 1e300, x1 = -1e300, y0 = 0, y1 = 1;

  explicit ChartFrame(const LineChart& c) : log_x(c.log_x) {
    double ymin = c.reference > 0 ? c.reference : 1e300, ymax = c.reference > 0 ? c.reference : 0;
    for (const auto& [name, pts] : c.series)
      for (const auto& [x, y] : pts) {
        const double xv = log_x ? std::log2(std::max(x, 1e-300)) : x;
        x0 = std::min(x0, xv);
        x1 = std::max(x1, xv);
        ymax = std::max(ymax, y);
        if (y > 0) ymin = std::min(ymin, y);
      }
    if (!c.x_categories.empty()) x0 = -0.5, x1 = double(c.x_categories.size()) - 0.5;
    if (x0 > x1) x0 = 0, x1 = 1;
    if (x1 == x0) x1 = x0 + 1;
    log_y = ymin < 1e300 && ymax / ymin > 30;
    y1 = ymax > 0 ? ymax * 1.1 : 1;
    if (log_y) {
      y0 = std::floor(std::log10(ymin));
      y1 = std::ceil(std::log10(ymax) + 1e-9);
    }
  }
  double X(double x) const { return left + w * ((log_x ? std::log2(x) : x) - x0) / (x1 - x0); }
  double Y(double y) const {
    const double v = log_y ? std::log10(std::max(y, std::pow(10.0, y0))) : y;
    return top + h * (1 - (v - y0) / (y1 - y0));
  }
  /// The y values of the horizontal grid lines.
  std::vector<double> grid() const {
    std::vector<double> g;
    if (log_y) {
      for (double e = y0; e <= y1; e += 1) g.push_back(std::pow(10.0, e));
    } else {
      const double dy = tick_step(y1, 5);
      for (double v = 0; v <= y1; v += dy) g.push_back(v);
    }
    return g;
  }
};

/// Grid, ticks, axis labels and the reference line of a chart.
void chart_axes_svg(std::ostringstream& s, const LineChart& c, const ChartFrame& f) {
  const double left = f.left, top = f.top, w = f.w, h = f.h;
  for (double v : f.grid())
    s << "<line x1=\"" << left << "\" x2=\"" << left + w << "\" y1=\"" << svg_number(f.Y(v)) << "\" y2=\""
      << svg_number(f.Y(v)) << "\" stroke=\"#eee\"/><text x=\"" << left - 5 << "\" y=\""
      << svg_number(f.Y(v) + 4) << "\" text-anchor=\"end\">" << short_num(v) << "</text>\n";
  std::set<double> xs;
  for (const auto& [name, pts] : c.series)
    for (const auto& [x, y] : pts) xs.insert(x);
  if (!c.x_categories.empty()) {
    xs.clear();
    for (std::size_t i = 0; i < c.x_categories.size(); ++i) xs.insert(double(i));
  }
  if (c.regular_x_ticks && !f.log_x && f.x1 > f.x0) {
    xs.clear();
    const double step = tick_step(f.x1 - f.x0, 5);
    for (double x = std::ceil(f.x0 / step) * step; x <= f.x1 + 1e-9 * step; x += step) xs.insert(x);
  }
  for (double x : xs)
    s << "<text x=\"" << svg_number(f.X(x)) << "\" y=\"" << top + h + 16 << "\" text-anchor=\"middle\">"
      << xml_escape(c.x_categories.empty() ? short_num(x) : c.x_categories[std::size_t(x)]) << "</text>\n";
  s << "<line x1=\"" << left << "\" x2=\"" << left + w << "\" y1=\"" << top + h << "\" y2=\"" << top + h
    << "\" stroke=\"#333\"/>\n";
  s << "<text x=\"" << left + w / 2 << "\" y=\"" << top + h + 34 << "\" text-anchor=\"middle\">"
    << xml_escape(c.x_label) << (c.log_x ? " (log scale)" : "") << "</text>\n";
  s << "<text x=\"14\" y=\"" << top + h / 2 << "\" transform=\"rotate(-90 14 " << top + h / 2
    << ")\" text-anchor=\"middle\">" << xml_escape(c.y_label) << (f.log_y ? " (log scale)" : "")
    << "</text>\n";
  if (c.reference > 0) {
    s << "<line x1=\"" << left << "\" x2=\"" << left + w << "\" y1=\"" << svg_number(f.Y(c.reference))
      << "\" y2=\"" << svg_number(f.Y(c.reference))
      << "\" stroke=\"#d00\" stroke-width=\"2\" stroke-dasharray=\"6 3\"/><text x=\"" << left + 4 << "\" y=\""
      << svg_number(f.Y(c.reference) - 4) << "\" fill=\"#d00\">" << xml_escape(c.reference_label)
      << "</text>\n";
  }
}

/// Each series as a line with its points and a legend entry.
void chart_series_svg(std::ostringstream& s, const LineChart& c, const ChartFrame& f) {
  int i = 0;
  for (const auto& [name, pts0] : c.series) {
    auto pts = pts0;
    std::sort(pts.begin(), pts.end());
    const char* colour = kPalette[i % 10];
    std::string poly;
    for (const auto& [x, y] : pts) poly += svg_number(f.X(x)) + "," + svg_number(f.Y(y)) + " ";
    s << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\" points=\"" << poly
      << "\"/>\n";
    for (const auto& [x, y] : pts) {
      const bool filled = !c.not_fitting.count({name, x});
      const std::string at = c.x_categories.empty() ? short_num(x) : c.x_categories[std::size_t(x)];
      s << "<circle cx=\"" << svg_number(f.X(x)) << "\" cy=\"" << svg_number(f.Y(y))
        << (filled ? "\" r=\"3\" fill=\"" + std::string(colour) + "\""
                   : "\" r=\"5\" fill=\"#fff\" stroke-width=\"2\" stroke=\"" + std::string(colour) + "\"")
        << "><title>" << xml_escape(name) << ": " << xml_escape(at) << " -> " << short_num(y)
        << (filled ? "" : " (does not fit)") << "</title></circle>\n";
    }
    s << "<rect x=\"" << f.left + f.w + 15 << "\" y=\"" << f.top + 16 * i
      << "\" width=\"10\" height=\"10\" fill=\"" << colour << "\"/><text x=\"" << f.left + f.w + 30
      << "\" y=\"" << f.top + 16 * i + 9 << "\">" << xml_escape(name) << "</text>\n";
    ++i;
  }
  if (!c.not_fitting.empty())
    s << "<circle cx=\"" << f.left + f.w + 20 << "\" cy=\"" << f.top + 16 * i + 5
      << "\" r=\"5\" fill=\"#fff\" stroke=\"#333\" stroke-width=\"2\"/><text x=\"" << f.left + f.w + 30
      << "\" y=\"" << f.top + 16 * i + 9 << "\">does not fit</text>\n";
}

}  // namespace

std::string line_chart_svg(const LineChart& c) {
  const ChartFrame f(c);
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << f.left + f.w + f.legend << "\" height=\""
    << f.top + f.h + 50 << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s << "<text x=\"" << f.left << "\" y=\"20\" font-size=\"13\">" << xml_escape(c.title) << "</text>\n";
  chart_axes_svg(s, c, f);
  chart_series_svg(s, c, f);
  s << "</svg>\n";
  return s.str();
}

std::string heatmap_svg(const std::string& title, const std::string& row_label,
                        const std::vector<std::string>& rows, const std::string& col_label,
                        const std::vector<std::string>& cols,
                        const std::vector<std::vector<double>>& values) {
  const double left = 70, top = 44,
               cw = std::clamp(360.0 / std::max<std::size_t>(1, cols.size()), 30.0, 60.0), ch = 26;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\""
    << svg_number(left + cw * double(cols.size()) + 20) << "\" height=\""
    << svg_number(top + ch * double(rows.size()) + 40) << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s << "<text x=\"4\" y=\"18\" font-size=\"13\">" << xml_escape(title) << "</text>\n";
  s << "<text x=\"" << svg_number(left) << "\" y=\"36\">" << xml_escape(col_label) << " &#8594;</text>\n";
  s << "<text x=\"4\" y=\"" << svg_number(top - 4) << "\">" << xml_escape(row_label) << " &#8595;</text>\n";
  for (std::size_t c = 0; c < cols.size(); ++c)
    s << "<text x=\"" << svg_number(left + cw * (double(c) + 0.5)) << "\" y=\""
      << svg_number(top + ch * double(rows.size()) + 14) << "\" text-anchor=\"middle\">"
      << xml_escape(cols[c]) << "</text>\n";
  for (std::size_t r = 0; r < rows.size(); ++r) {
    s << "<text x=\"" << svg_number(left - 6) << "\" y=\"" << svg_number(top + ch * (double(r) + 0.65))
      << "\" text-anchor=\"end\">" << xml_escape(rows[r]) << "</text>\n";
    for (std::size_t c = 0; c < cols.size(); ++c) {
      const double v = values[r][c];
      const double x = left + cw * double(c), y = top + ch * double(r);
      if (std::isnan(v)) {
        s << "<rect x=\"" << svg_number(x) << "\" y=\"" << svg_number(y) << "\" width=\""
          << svg_number(cw - 1) << "\" height=\"" << ch - 1 << "\" fill=\"#f4f4f4\"/>\n";
        continue;
      }
      // White (0) to dark red (1).
      const int g = int(255 * (1 - std::clamp(v, 0.0, 1.0)));
      char colour[16];
      std::snprintf(colour, sizeof colour, "#%02x%02x%02x", 255, g, g);
      char label[16];
      std::snprintf(label, sizeof label, "%.0f%%", 100 * v);
      s << "<rect x=\"" << svg_number(x) << "\" y=\"" << svg_number(y) << "\" width=\"" << svg_number(cw - 1)
        << "\" height=\"" << ch - 1 << "\" fill=\"" << colour << "\"/><text x=\"" << svg_number(x + cw / 2)
        << "\" y=\"" << svg_number(y + ch * 0.65) << "\" text-anchor=\"middle\" fill=\""
        << (v > 0.6 ? "#fff" : "#000") << "\">" << label << "</text>\n";
    }
  }
  s << "</svg>\n";
  return s.str();
}

namespace {

/// Points of a sweep's records grouped into series: for each series (ranked by its axis value)
/// the best value at each x.
using SeriesPoints = std::map<std::pair<int, std::string>, std::map<double, double>>;

/// Names a record's series by the value of axis `path` (ranked by that axis's order; "all"
/// without one).
struct SeriesNamer {
  const Json& meta;
  std::pair<int, std::string> operator()(const std::string& path, const Json& r) const {
    if (path.empty()) return {0, "all"};
    const Json v = r["point"].value(path, Json(nullptr));
    return {rank(path, v), path + "=" + value_text(v)};
  }
  int rank(const std::string& path, const Json& v) const {
    for (const auto& a : meta["axes"])
      if (a["path"] == path)
        for (std::size_t i = 0; i < a["values"].size(); ++i)
          if (a["values"][i] == v) return int(i);
    return 0;
  }
};

/// The chart's lines from `points`, in series order.
void add_series(LineChart& chart, const SeriesPoints& points) {
  for (const auto& [name, pts] : points)
    chart.series.emplace_back(name.second, std::vector<std::pair<double, double>>(pts.begin(), pts.end()));
}

/// A recorded point's x on the chart: its value of axis `path`, or its category's index; none
/// for a failed point or one without a usable value.
std::optional<double> chart_x(const Axes& axes, const SeriesNamer& name, const std::string& path,
                              const Json& r) {
  if (!ok(r) || !r["point"].contains(path)) return std::nullopt;
  if (path == axes.x && !axes.categories.empty()) return double(name.rank(path, r["point"][path]));
  if (!r["point"][path].is_number()) return std::nullopt;
  return r["point"][path].get<double>();
}

bool fits(const Json& r) { return r["result"].value("fits", true); }

/// Per series and x: (whether the point shown fits, its value).
using MarkedPoints = std::map<std::pair<int, std::string>, std::map<double, std::pair<bool, double>>>;

/// The chart's lines from `points`, those that do not fit marked to be drawn hollow.
void add_marked_series(LineChart& chart, const MarkedPoints& points) {
  SeriesPoints shown;
  for (const auto& [key, pts] : points)
    for (const auto& [x, v] : pts) {
      shown[key][x] = v.second;
      if (!v.first) chart.not_fitting.insert({key.second, x});
    }
  add_series(chart, shown);
}

/// Examples/s against x, best over any other axes (the best that fits where one does; else the
/// best, drawn hollow), one line per series.
std::string throughput_chart(const Axes& axes, const SeriesNamer& name, const std::vector<Json>& records) {
  LineChart chart{"Examples per second", axes.x, "examples/s", {}, false, -1, "", {}, {}};
  chart.x_categories = axes.categories;
  MarkedPoints best;
  bool positive = true;
  for (const auto& r : records) {
    const auto x = chart_x(axes, name, axes.x, r);
    if (!x) continue;
    positive = positive && *x > 0;
    const auto key = name(axes.series, r);
    const std::pair<bool, double> v{fits(r), r["result"]["examples_per_s"].get<double>()};
    auto [at, fresh] = best[key].emplace(*x, v);
    if (!fresh) at->second = std::max(at->second, v);
  }
  add_marked_series(chart, best);
  chart.log_x = positive && axes.x == axes.m;
  return chart.series.empty() ? "" : line_chart_svg(chart);
}

/// The values of axis `path`, as numbers.
std::vector<double> axis_values(const Json& meta, const std::string& path) {
  std::vector<double> values;
  for (const auto& a : meta["axes"])
    if (a["path"] == path)
      for (const auto& v : a["values"]) values.push_back(v.get<double>());
  return values;
}

/// Bubble fraction over K x M, measured and ideal, averaged over any other axes.
std::string bubble_charts(const Json& meta, const Axes& axes, const std::vector<Json>& records) {
  const std::vector<double> ks = axis_values(meta, axes.k), ms = axis_values(meta, axes.m);
  std::vector<std::vector<double>> measured(ks.size(), std::vector<double>(ms.size(), 0)), ideal = measured,
                                                                                           count = measured;
  for (const auto& r : records) {
    if (!ok(r)) continue;
    const auto ki = std::find(ks.begin(), ks.end(), r["point"][axes.k].get<double>()) - ks.begin();
    const auto mi = std::find(ms.begin(), ms.end(), r["point"][axes.m].get<double>()) - ms.begin();
    measured[ki][mi] += r["result"]["bubble_fraction"].get<double>();
    const Json& i = r["result"]["bubble_fraction_ideal"];
    ideal[ki][mi] += i.is_null() ? 0.0 : i.get<double>();
    count[ki][mi] += 1;
  }
  std::vector<std::string> klabels, mlabels;
  for (double k : ks) klabels.push_back(short_num(k));
  for (double m : ms) mlabels.push_back(short_num(m));
  for (std::size_t i = 0; i < ks.size(); ++i)
    for (std::size_t j = 0; j < ms.size(); ++j) {
      measured[i][j] = count[i][j] > 0 ? measured[i][j] / count[i][j] : NAN;
      ideal[i][j] = count[i][j] > 0 ? ideal[i][j] / count[i][j] : NAN;
    }
  return heatmap_svg("Bubble fraction, measured", "K", klabels, "M", mlabels, measured) +
         heatmap_svg("Bubble fraction, ideal (K-1)/(M+K-1)", "K", klabels, "M", mlabels, ideal);
}

/// Peak HBM against K (or x), one line per M (or series), with the capacity.
std::string memory_chart(const Axes& axes, const SeriesNamer& name, const std::vector<Json>& records) {
  const std::string mx = !axes.k.empty() ? axes.k : axes.x;
  const std::string ms = !axes.k.empty() ? axes.m : axes.series;
  LineChart chart{"Peak HBM per core", mx, "GiB", {}, false, -1, "", {}, {}};
  if (mx == axes.x) chart.x_categories = axes.categories;
  MarkedPoints peak;
  for (const auto& r : records) {
    const auto x = chart_x(axes, name, mx, r);
    if (!x) continue;
    const std::pair<bool, double> v{fits(r),
                                    r["result"]["peak_hbm_bytes"].get<double>() / (1024.0 * 1024 * 1024)};
    auto [at, fresh] = peak[name(ms, r)].emplace(*x, v);
    if (!fresh && v.second > at->second.second) at->second = v;
    chart.reference = r["result"]["hbm_capacity_bytes"].get<double>() / (1024.0 * 1024 * 1024);
  }
  chart.reference_label = "HBM capacity";
  add_marked_series(chart, peak);
  return chart.series.empty() ? "" : line_chart_svg(chart);
}

/// Days to the study's target against its cost (a study with a target and a price), with and
/// without goodput: one point per swept point, the trade-off a planner weighs.
std::string days_cost_chart(const std::vector<Json>& records) {
  LineChart chart{
      "Days to the target against its cost", "cost (USD)", "days", {}, false, -1, "", {}, {}, true};
  SeriesPoints points;
  for (const auto& r : records) {
    if (!ok(r)) continue;
    const Json& v = r["result"];
    for (const auto& [series, days, usd] :
         {std::tuple{std::pair{0, std::string("without goodput")}, "/time_to_train/days", "/cost/usd"},
          std::tuple{std::pair{1, std::string("with goodput")}, "/time_to_train/days_with_goodput",
                     "/cost/usd_with_goodput"}}) {
      const Json::json_pointer d(days), c(usd);
      if (v.contains(d) && v.contains(c) && v[d].is_number() && v[c].is_number())
        points[series][v[c].get<double>()] = v[d].get<double>();
    }
  }
  add_series(chart, points);
  return chart.series.empty() ? "" : line_chart_svg(chart);
}

}  // namespace

namespace {

/// A sweep over seeds of random perturbations (an axis whose path ends in "random.seed"): the
/// step time's distribution across seeds for each setting of the other axes.
struct Distribution {
  std::string setting;        ///< the other axes' values ("all" without any)
  std::vector<double> steps;  ///< step times of the points that ran, ascending
  double uniform = -1;        ///< the uniform pod's step (perturbations.uniform_step_time_s), if known
};

std::string seed_axis(const Json& meta) {
  for (const auto& a : meta["axes"])
    if (is_seed_axis(a["path"].get<std::string>())) return a["path"].get<std::string>();
  return "";
}

std::vector<Distribution> distributions(const Json& meta, const std::vector<Json>& records) {
  const std::string seed = seed_axis(meta);
  std::vector<Distribution> out;
  if (seed.empty()) return out;
  std::map<std::string, std::size_t> at;
  for (const auto& r : records) {
    std::string setting;
    for (const auto& a : meta["axes"])
      if (a["path"] != seed)
        setting += (setting.empty() ? "" : ", ") + a["path"].get<std::string>() + "=" +
                   value_text(r["point"].value(a["path"].get<std::string>(), Json(nullptr)));
    if (setting.empty()) setting = "all";
    auto [it, fresh] = at.emplace(setting, out.size());
    if (fresh) out.push_back({setting, {}, -1});
    if (!ok(r)) continue;
    Distribution& d = out[it->second];
    d.steps.push_back(r["result"]["step_time_s"].get<double>());
    d.uniform = figure(r["result"], "/perturbations/uniform_step_time_s", d.uniform);
  }
  for (auto& d : out) std::sort(d.steps.begin(), d.steps.end());
  return out;
}

/// The nearest-rank percentile `p` (0 < p <= 1) of ascending `v`.
double percentile(const std::vector<double>& v, double p) {
  const auto rank = std::size_t(std::ceil(p * double(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

const char* const kDistributionHeader[] = {"setting", "seeds", "min",         "p50",          "p90",
                                           "p99",     "max",   "uniform pod", "p50 slowdown", "p99 slowdown"};

std::vector<std::string> distribution_row(const Distribution& d) {
  std::vector<std::string> row = {d.setting, std::to_string(d.steps.size())};
  if (d.steps.empty()) {
    row.resize(std::size(kDistributionHeader), "-");
    return row;
  }
  row.push_back(human_seconds(d.steps.front()));
  for (double p : {0.5, 0.9, 0.99}) row.push_back(human_seconds(percentile(d.steps, p)));
  row.push_back(human_seconds(d.steps.back()));
  row.push_back(d.uniform > 0 ? human_seconds(d.uniform) : "-");
  for (double p : {0.5, 0.99})
    row.push_back(d.uniform > 0 ? short_num(percentile(d.steps, p) / d.uniform) + "x" : "-");
  return row;
}

/// A histogram of one setting's step times across seeds, with the uniform pod's step marked.
std::string histogram_svg(const Distribution& d) {
  const double left = 60, top = 36, w = 480, h = 200;
  const int bins = std::clamp(int(std::ceil(std::sqrt(double(d.steps.size())))), 1, 30);
  const double lo = std::min(d.steps.front(), d.uniform > 0 ? d.uniform : d.steps.front());
  const double hi = d.steps.back() > lo ? d.steps.back() : lo * 1.01 + 1e-12;
  std::vector<int> count(std::size_t(bins), 0);
  for (double v : d.steps) ++count[std::size_t(std::min(bins - 1, int((v - lo) / (hi - lo) * bins)))];
  const int most = *std::max_element(count.begin(), count.end());
  auto X = [&](double v) { return left + w * (v - lo) / (hi - lo); };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"distribution\" width=\"" << left + w + 50
    << "\" height=\"" << top + h + 44 << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s << "<text x=\"" << left << "\" y=\"18\" font-size=\"13\">Step time across " << d.steps.size()
    << " seeds (" << xml_escape(d.setting) << ")</text>\n";
  for (int b = 0; b < bins; ++b) {
    const double bh = most > 0 ? h * count[std::size_t(b)] / most : 0;
    s << "<rect class=\"bin\" x=\"" << svg_number(left + w * b / bins) << "\" y=\""
      << svg_number(top + h - bh) << "\" width=\"" << svg_number(w / bins - 1) << "\" height=\""
      << svg_number(bh) << "\" fill=\"#4e79a7\"><title>" << count[std::size_t(b)]
      << " seeds: " << human_seconds(lo + (hi - lo) * b / bins) << " - "
      << human_seconds(lo + (hi - lo) * (b + 1) / bins) << "</title></rect>\n";
  }
  s << "<line x1=\"" << left << "\" x2=\"" << left + w << "\" y1=\"" << top + h << "\" y2=\"" << top + h
    << "\" stroke=\"#333\"/>\n";
  for (double v : {lo, (lo + hi) / 2, hi})
    s << "<text x=\"" << svg_number(X(v)) << "\" y=\"" << top + h + 14 << "\" text-anchor=\"middle\">"
      << human_seconds(v) << "</text>\n";
  s << "<text x=\"" << left + w / 2 << "\" y=\"" << top + h + 32
    << "\" text-anchor=\"middle\">step time (bars: seeds per bin)</text>\n";
  if (d.uniform > 0)
    s << "<line class=\"uniform\" x1=\"" << svg_number(X(d.uniform)) << "\" x2=\"" << svg_number(X(d.uniform))
      << "\" y1=\"" << top << "\" y2=\"" << top + h
      << "\" stroke=\"#d00\" stroke-dasharray=\"6 3\"/><text x=\"" << svg_number(X(d.uniform) + 4)
      << "\" y=\"" << top + 10 << "\" fill=\"#d00\">uniform pod</text>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace

std::map<std::string, std::string> sweep_charts(const Json& meta, const std::vector<Json>& records) {
  std::map<std::string, std::string> charts;
  int drawn = 0;  // the first six settings' histograms
  for (const auto& d : distributions(meta, records))
    if (!d.steps.empty() && drawn < 6)
      charts[drawn++ == 0 ? "distribution" : "distribution_" + std::to_string(drawn)] = histogram_svg(d);
  if (auto svg = days_cost_chart(records); !svg.empty()) charts["days_cost"] = svg;
  const Axes axes = choose_axes(meta);
  if (axes.x.empty()) return charts;
  const SeriesNamer name{meta};
  if (auto svg = throughput_chart(axes, name, records); !svg.empty()) charts["throughput"] = svg;
  if (!axes.k.empty() && !axes.m.empty()) charts["bubble"] = bubble_charts(meta, axes, records);
  if (auto svg = memory_chart(axes, name, records); !svg.empty()) charts["memory"] = svg;
  return charts;
}

namespace {

/// Side-by-side comparison along a swept axis whose values are not numbers (e.g.
/// schedule.weight_update=replicated,sharded): a row per setting of the other axes, for each
/// compared value its step time, examples/s, update time, exposed communication and peak HBM.
struct Comparison {
  std::string axis;
  std::vector<std::string> values;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

const char* const kCompared[] = {"step time", "examples/s", "update", "exposed comm.", "peak HBM"};

/// A record's compared figures appended to `row` (blank without a record, "failed" for a failed
/// point).
void compared_cells(const Json* record, std::vector<std::string>& row) {
  if (!record || !ok(*record)) {
    for (std::size_t k = 0; k < std::size(kCompared); ++k) row.push_back(record ? "failed" : "");
    return;
  }
  const Json& j = (*record)["result"];
  char buf[64];
  row.push_back(human_seconds(j["step_time_s"].get<double>()));
  std::snprintf(buf, sizeof buf, "%.1f", j["examples_per_s"].get<double>());
  row.push_back(buf);
  row.push_back(human_seconds(figure(j, "/breakdown/step_split_s/update", 0.0)));
  const double exposed = figure(j, "/breakdown/exposed_communication_s", -1.0);
  row.push_back(exposed < 0 ? "n/a" : human_seconds(exposed));
  row.push_back(human_bytes(j["peak_hbm_bytes"].get<double>()));
}

/// The non-numeric axis (names, or JSON values such as layouts) with the fewest values: the
/// alternatives being compared; ties: the first. None: an empty axis.
void choose_alternatives(const Json& meta, Comparison& c) {
  for (const auto& a : meta["axes"]) {
    bool alternatives = a["values"].size() > 1;
    for (const auto& v : a["values"]) alternatives = alternatives && !v.is_number();
    if (alternatives && (c.axis.empty() || a["values"].size() < c.values.size())) {
      c.axis = a["path"].get<std::string>();
      c.values.clear();
      for (const auto& v : a["values"]) c.values.push_back(value_text(v));
    }
  }
}

/// Nothing else varies: one row per alternative.
void compare_alone(const std::vector<Json>& records, Comparison& c) {
  c.header = {c.axis};
  for (const char* m : kCompared) c.header.push_back(m);
  for (const auto& v : c.values) {
    const Json* record = nullptr;
    for (const auto& r : records)
      if (value_text(r["point"].value(c.axis, Json(nullptr))) == v) record = &r;
    std::vector<std::string> row = {v};
    compared_cells(record, row);
    c.rows.push_back(std::move(row));
  }
}

/// One row per setting of the `others` axes (in the records' order), the alternatives side by
/// side.
void compare_by_setting(const std::vector<std::string>& others, const std::vector<Json>& records,
                        Comparison& c) {
  for (const auto& o : others) c.header.push_back(o);
  for (const auto& v : c.values)
    for (const char* m : kCompared) c.header.push_back(v + ": " + m);
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, const Json*>> by_setting;
  for (const auto& r : records) {
    std::string setting;
    for (const auto& o : others) setting += value_text(r["point"].value(o, Json(nullptr))) + "\x1f";
    if (!by_setting.count(setting)) order.push_back(setting);
    by_setting[setting][value_text(r["point"].value(c.axis, Json(nullptr)))] = &r;
  }
  for (const auto& setting : order) {
    std::vector<std::string> row;
    const auto& setting_cells = by_setting[setting];
    const Json* any = setting_cells.begin()->second;
    for (const auto& o : others) row.push_back(value_text((*any)["point"].value(o, Json(nullptr))));
    for (const auto& v : c.values) {
      auto it = setting_cells.find(v);
      compared_cells(it == setting_cells.end() ? nullptr : it->second, row);
    }
    c.rows.push_back(std::move(row));
  }
}

Comparison compare(const Json& meta, const std::vector<Json>& records) {
  Comparison c;
  choose_alternatives(meta, c);
  if (c.axis.empty()) return c;
  std::vector<std::string> others;
  for (const auto& a : meta["axes"])
    if (a["path"] != c.axis) others.push_back(a["path"].get<std::string>());
  if (others.empty())
    compare_alone(records, c);
  else
    compare_by_setting(others, records, c);
  return c;
}

}  // namespace

namespace {

/// Over seeds of random perturbations: the step time's percentiles per setting, and histograms.
void distribution_html(std::ostringstream& h, const Json& meta, const std::vector<Json>& records,
                       const std::map<std::string, std::string>& charts) {
  const auto ds = distributions(meta, records);
  if (ds.empty()) return;
  h << "<h2>Step time across seeds of <code>" << xml_escape(seed_axis(meta)) << "</code></h2>\n<table><tr>";
  for (const char* c : kDistributionHeader) h << "<th>" << c << "</th>";
  h << "</tr>\n";
  for (const auto& d : ds) {
    h << "<tr>";
    for (const auto& c : distribution_row(d)) h << "<td>" << xml_escape(c) << "</td>";
    h << "</tr>\n";
  }
  h << "</table>\n";
  for (const auto& [name, svg] : charts)
    if (name.rfind("distribution", 0) == 0) h << "<div>" << svg << "</div>\n";
}

/// The comparison by the axis that varies most, a row per value of the others.
void comparison_html(std::ostringstream& h, const Comparison& cmp) {
  if (cmp.axis.empty()) return;
  h << "<h2>Comparison by <code>" << xml_escape(cmp.axis) << "</code></h2>\n<table><tr>";
  for (const auto& c : cmp.header) h << "<th>" << xml_escape(c) << "</th>";
  h << "</tr>\n";
  for (const auto& row : cmp.rows) {
    h << "<tr>";
    for (const auto& c : row)
      h << (c == "failed" ? "<td class=\"fail\">" : "<td>") << xml_escape(c) << "</td>";
    h << "</tr>\n";
  }
  h << "</table>\n";
}

void points_table_html(std::ostringstream& h, const Axes& axes, const std::vector<const Json*>& rows) {
  h << "<table><tr>";
  for (const auto& c : table_header(axes)) h << "<th>" << xml_escape(c) << "</th>";
  h << "</tr>\n";
  for (const Json* r : rows) {
    h << (ok(*r) ? "<tr>" : "<tr class=\"fail\">");
    for (const auto& c : table_row(axes, *r)) h << "<td>" << xml_escape(c) << "</td>";
    h << "</tr>\n";
  }
  h << "</table>\n";
}

void failed_points_html(std::ostringstream& h, const std::vector<Json>& records) {
  h << "<h2 class=\"fail\">Failed points</h2>\n<table><tr><th>point</th><th>error</th></tr>\n";
  for (const auto& r : records)
    if (!ok(r))
      h << "<tr><td>" << xml_escape(r["key"].get<std::string>()) << "</td><td style=\"text-align:left\">"
        << xml_escape(r["error"].is_string() ? r["error"].get<std::string>() : "") << "</td></tr>\n";
  h << "</table>\n";
}

}  // namespace

std::string sweep_html(const Json& meta, const std::vector<Json>& records) {
  const Axes axes = choose_axes(meta);
  std::ostringstream h;
  h << html_page_start("tpusim sweep", ".fail{color:#b00}");
  std::size_t failed = 0;
  for (const auto& r : records) failed += ok(r) ? 0 : 1;
  h << "<h1>tpusim sweep</h1>\n<p>Study <code>" << xml_escape(meta["study"].get<std::string>())
    << "</code>: " << records.size() << " of " << meta["points"].get<std::size_t>() << " points recorded, "
    << failed << " failed. Axes: ";
  for (const auto& a : meta["axes"])
    h << "<code>" << xml_escape(a["path"].get<std::string>()) << "</code> (" << a["values"].size() << ") ";
  h << "</p>\n";
  const auto charts = sweep_charts(meta, records);
  for (const char* name : {"throughput", "bubble", "memory"}) {
    auto it = charts.find(name);
    if (it != charts.end()) h << "<div>" << it->second << "</div>\n";
  }
  distribution_html(h, meta, records, charts);
  comparison_html(h, compare(meta, records));
  auto table = [&](const std::vector<const Json*>& rows) { points_table_html(h, axes, rows); };
  h << "<h2>Best configurations that fit</h2>\n";
  const auto best = best_fitting(records, 10);
  if (best.empty())
    h << "<p>No configuration fits.</p>\n";
  else
    table(best);
  std::vector<const Json*> all;
  for (const auto& r : records) all.push_back(&r);
  h << "<h2>All points</h2>\n";
  table(all);
  if (failed > 0) failed_points_html(h, records);
  h << "</body></html>\n";
  return h.str();
}

namespace {

/// A markdown table: the header, its rule, a line per row, and a blank line.
void markdown_table(std::ostringstream& md, const std::vector<std::string>& header,
                    const std::vector<std::vector<std::string>>& rows) {
  md << "|";
  for (const auto& c : header) md << " " << c << " |";
  md << "\n|";
  for (std::size_t i = 0; i < header.size(); ++i) md << " --- |";
  md << "\n";
  for (const auto& row : rows) {
    md << "|";
    for (const auto& c : row) md << " " << c << " |";
    md << "\n";
  }
  md << "\n";
}

}  // namespace

std::string sweep_markdown(const Json& meta, const std::vector<Json>& records) {
  const Axes axes = choose_axes(meta);
  std::ostringstream md;
  std::size_t failed = 0;
  for (const auto& r : records) failed += ok(r) ? 0 : 1;
  md << "# tpusim sweep\n\nStudy `" << meta["study"].get<std::string>() << "`: " << records.size() << " of "
     << meta["points"].get<std::size_t>() << " points recorded, " << failed << " failed.\n\n";
  const auto charts = sweep_charts(meta, records);
  for (const auto& [name, svg] : charts) md << "![" << name << "](sweep_" << name << ".svg)\n\n";
  auto table = [&](const std::vector<const Json*>& rows) {
    std::vector<std::vector<std::string>> cells;
    for (const Json* r : rows) cells.push_back(table_row(axes, *r));
    markdown_table(md, table_header(axes), cells);
  };
  if (const auto ds = distributions(meta, records); !ds.empty()) {
    md << "## Step time across seeds of `" << seed_axis(meta) << "`\n\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& d : ds) rows.push_back(distribution_row(d));
    markdown_table(
        md, std::vector<std::string>(std::begin(kDistributionHeader), std::end(kDistributionHeader)), rows);
  }
  const Comparison cmp = compare(meta, records);
  if (!cmp.axis.empty()) {
    md << "## Comparison by `" << cmp.axis << "`\n\n";
    markdown_table(md, cmp.header, cmp.rows);
  }
  md << "## Best configurations that fit\n\n";
  const auto best = best_fitting(records, 10);
  if (best.empty())
    md << "No configuration fits.\n\n";
  else
    table(best);
  std::vector<const Json*> all;
  for (const auto& r : records) all.push_back(&r);
  md << "## All points\n\n";
  table(all);
  if (failed > 0) {
    md << "## Failed points\n\n| point | error |\n| --- | --- |\n";
    for (const auto& r : records)
      if (!ok(r))
        md << "| " << r["key"].get<std::string>() << " | "
           << (r["error"].is_string() ? r["error"].get<std::string>() : "") << " |\n";
  }
  return md.str();
}

}  // namespace tpusim::reports
