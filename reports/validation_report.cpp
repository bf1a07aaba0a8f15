#include "reports/validation_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "reports/run_report.hpp"
#include "reports/svg.hpp"

namespace tpusim::reports {

namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string percent(const Json& v) { return v.is_null() ? "-" : fmt("%+.1f %%", 100.0 * v.get<double>()); }
std::string abs_percent(const Json& v) { return v.is_null() ? "-" : fmt("%.1f %%", 100.0 * v.get<double>()); }

std::string predicted_text(const Json& c) {
  return c["predicted"].is_null()
             ? "none"
             : validation_value_text(c["predicted"].get<double>(), c["unit"].get<std::string>());
}

struct Row {
  std::string id, quantity, measured, predicted, error, tolerance, verdict;
  bool within = false;
  std::string interval, inside;  ///< with --intervals: "[low, high]" and whether the measured value is in it
  std::string band;              ///< with --intervals, a prediction proper: its leave-one-out band
};

/// "12.1 ms – 14.0 ms": a case's prediction interval in its unit.
std::string interval_text(const Json& c) {
  if (!c.contains("interval")) return "";
  const std::string unit = c["unit"].get<std::string>();
  return validation_value_text(c["interval"][0].get<double>(), unit) + " – " +
         validation_value_text(c["interval"][1].get<double>(), unit);
}

/// "7 of 23 measured values inside their interval (coverage 30.4 %), mean width 12.0 % of the prediction".
std::string interval_line(const Json& s) {
  return std::to_string(s["inside"].get<int>()) + " of " + std::to_string(s["cases"].get<int>()) +
         " measured values inside their interval (coverage " + abs_percent(s["coverage"]) + "), mean width " +
         abs_percent(s["mean_relative_width"]) + " of the prediction";
}

/// "5 of 7 predictions proper inside their band (coverage 71.4 %), mean width 38.0 % ...".
std::string band_line(const Json& b) {
  return std::to_string(b["inside"].get<int>()) + " of " + std::to_string(b["cases"].get<int>()) +
         " predictions proper inside their band (coverage " + abs_percent(b["coverage"]) + "), mean width " +
         abs_percent(b["mean_relative_width"]) + " of the prediction" +
         (b["unbounded"].get<int>() > 0
              ? " (" + std::to_string(b["unbounded"].get<int>()) + " unbounded above)"
              : "");
}

/// "  band 10.1 ms – 16.0 ms inside": a case's leave-one-out band, when it has one.
std::string band_text(const Json& c) {
  if (!c.contains("band")) return "";
  const std::string unit = c["unit"].get<std::string>();
  const std::string high =
      c["band"][1].is_null() ? "unbounded" : validation_value_text(c["band"][1].get<double>(), unit);
  return "  band " + validation_value_text(c["band"][0].get<double>(), unit) + " – " + high +
         (c["band_inside"].get<bool>() ? " inside" : " OUTSIDE");
}

std::vector<Row> rows(const Json& report) {
  std::vector<Row> out;
  for (const auto& c : report["cases"])
    out.push_back(Row{c["id"].get<std::string>(), c["quantity"].get<std::string>(),
                      validation_value_text(c["measured"].get<double>(), c["unit"].get<std::string>()),
                      predicted_text(c), percent(c["error"]),
                      fmt("%.0f %%", 100.0 * c["tolerance"].get<double>()),
                      std::string(c["within"].get<bool>() ? "within" : "OUTSIDE") +
                          (c.value("in_sample", false) ? " (in-sample)" : ""),
                      c["within"].get<bool>(), interval_text(c),
                      c.contains("inside") ? (c["inside"].get<bool>() ? "in" : "OUT") : "", band_text(c)});
  return out;
}

std::vector<std::string> quantities(const Json& report) {
  std::vector<std::string> q;
  for (const auto& [name, s] : report["summary"]["per_quantity"].items()) q.push_back(name);
  return q;
}

std::string summary_line(const Json& s) {
  return std::to_string(s["within"].get<int>()) + " of " + std::to_string(s["cases"].get<int>()) +
         " within tolerance, mean |error| " + abs_percent(s["mean_abs_error"]) + ", worst " +
         abs_percent(s["worst_abs_error"]) +
         (s["worst_case"].is_null() ? "" : " (" + s["worst_case"].get<std::string>() + ")");
}

/// The summary over the cases no study value was inferred from, when some were (empty otherwise).
std::string predicted_line(const Json& report) {
  const Json& s = report["summary"];
  if (!s.contains("predicted") || s["predicted"]["cases"].get<int>() == s["cases"].get<int>()) return "";
  return "predicted (the " + std::to_string(s["cases"].get<int>() - s["predicted"]["cases"].get<int>()) +
         " in-sample cases, whose studies inferred a value from them, left out): " +
         summary_line(s["predicted"]);
}

/// Per hardware generation, its cases' summary and, when it has in-sample cases, its
/// predictions proper: "tpu-v4: 3 of 6 within tolerance, ...".
std::vector<std::string> hardware_lines(const Json& report) {
  std::vector<std::string> lines;
  const Json per = report["summary"].value("per_hardware", Json::object());
  for (const auto& [name, h] : per.items()) {
    std::string line = name + ": " + summary_line(h);
    if (h["predicted"]["cases"].get<int>() != h["cases"].get<int>())
      line += "; predicted (in-sample left out): " + summary_line(h["predicted"]);
    lines.push_back(line);
  }
  return lines;
}

/// "every case runs with its hardware's figure=value, ..." when validate overrode figures; empty otherwise.
std::string overrides_line(const Json& report) {
  const Json o = report.value("hardware_overrides", Json::object());
  if (o.empty()) return "";
  std::string text;
  for (auto it = o.begin(); it != o.end(); ++it)
    text += (text.empty() ? "" : ", ") + it.key() + "=" + it.value().dump();
  return "Every case runs with its hardware's " + text + " (--hardware-override).";
}

/// Per case, the assumed figures that move its prediction, largest first: "figure +1.2 %".
std::vector<std::pair<std::string, std::string>> sensitivity_lines(const Json& report) {
  std::vector<std::pair<std::string, std::string>> lines;
  for (const auto& c : report["cases"]) {
    if (!c.contains("sensitivity")) continue;
    std::vector<std::pair<double, std::string>> moves;
    for (const auto& [figure, v] : c["sensitivity"].items())
      if (!v.is_null() && std::fabs(v.get<double>()) >= 5e-4)
        moves.emplace_back(-std::fabs(v.get<double>()), figure + " " + percent(v));
    std::sort(moves.begin(), moves.end());
    std::string text;
    for (const auto& [key, m] : moves) text += (text.empty() ? "" : ", ") + m;
    lines.emplace_back(c["id"].get<std::string>(),
                       text.empty() ? "no assumed figure moves it by 0.05 % or more" : text);
  }
  return lines;
}

}  // namespace

std::string validation_value_text(double v, const std::string& unit) {
  if (unit == "s") return v < 1 ? fmt("%.1f ms", v * 1e3) : fmt("%.3f s", v);
  if (unit == "bytes") return fmt("%.2f GiB", v / double(1ull << 30));
  if (unit == "examples/s") return fmt(v < 100 ? "%.2f /s" : "%.0f /s", v);
  if (unit == "parameters") return v < 1e9 ? fmt("%.1fM", v / 1e6) : fmt("%.2fB", v / 1e9);
  if (unit == "fraction") return fmt("%.1f %%", 100.0 * v);
  if (unit == "ratio") return fmt("%.3fx", v);
  return fmt(v == std::floor(v) ? "%.0f" : "%.4g", v);
}

namespace {

/// The table of cases, one line each, with columns as wide as their longest entry.
void case_table_text(std::ostringstream& s, const std::vector<Row>& rs, std::size_t w, std::size_t wq) {
  char line[512];
  std::snprintf(line, sizeof line, "%-*s  %-*s %12s %12s %9s %5s  %s\n", int(w), "case", int(wq), "quantity",
                "measured", "predicted", "error", "tol", "");
  s << line;
  for (const auto& r : rs) {
    std::snprintf(line, sizeof line, "%-*s  %-*s %12s %12s %9s %5s  %s\n", int(w), r.id.c_str(), int(wq),
                  r.quantity.c_str(), r.measured.c_str(), r.predicted.c_str(), r.error.c_str(),
                  r.tolerance.c_str(), r.verdict.c_str());
    s << line;
  }
  s << "\n";
}

/// --intervals: each case's interval and whether it holds the measurement, then the coverage.
void intervals_text(std::ostringstream& s, const Json& report, const std::vector<Row>& rs, std::size_t w) {
  char line[512];
  s << "\nprediction intervals (" << report["intervals"]["method"].get<std::string>() << "):\n";
  for (const auto& r : rs)
    if (!r.interval.empty()) {
      std::snprintf(line, sizeof line, "  %-*s %12s in %-28s %-8s%s\n", int(w), r.id.c_str(),
                    r.measured.c_str(), r.interval.c_str(), r.inside == "in" ? "inside" : "OUTSIDE",
                    r.band.c_str());
      s << line;
    }
  for (const auto& [q, v] : report["intervals"]["per_quantity"].items())
    s << q << ": " << interval_line(v) << "\n";
  s << "all: " << interval_line(report["intervals"]) << "\n";
  if (report["intervals"].contains("bands")) {
    const Json& b = report["intervals"]["bands"];
    s << "with the model's error (" << b["method"].get<std::string>() << "): " << band_line(b) << "\n";
  }
}

/// The assumed hardware figures and study values of the cases' studies.
void assumptions_text(std::ostringstream& s, const Json& report) {
  std::size_t figures = 0;
  for (const auto& a : report["assumptions"]) figures += a.contains("hardware") ? 1 : 0;
  s << figures << " hardware figures of these studies are assumptions:";
  for (const auto& a : report["assumptions"])
    if (a.contains("hardware"))
      s << " " << a["hardware"].get<std::string>() << ":" << a["figure"].get<std::string>();
  s << "\n";
  if (figures < report["assumptions"].size()) {
    s << report["assumptions"].size() - figures << " values the studies assume:";
    for (const auto& a : report["assumptions"])
      if (a.contains("study"))
        s << " " << a["study"].get<std::string>() << ":" << a["figure"].get<std::string>();
    s << "\n";
  }
}

/// --check: every case must predict what was recorded (1e-9 relative), within its tolerance or
/// not: a prediction that moves is a change to explain and record.
void check_text(std::ostringstream& s, const Json& report) {
  if (report["cases"].empty() || !report["cases"].front().contains("unmoved")) return;
  std::size_t unmoved = 0;
  std::string moved;
  for (const auto& c : report["cases"]) {
    if (c["unmoved"].get<bool>())
      ++unmoved;
    else
      moved += " " + c["id"].get<std::string>();
  }
  s << "check: " << unmoved << " of " << report["cases"].size() << " as recorded (1e-9 relative)"
    << (moved.empty() ? "; passed" : "; FAILED, moved:" + moved) << "\n";
}

}  // namespace

std::string validation_text(const Json& report) {
  std::ostringstream s;
  const auto rs = rows(report);
  std::size_t w = 4, wq = 22;
  for (const auto& r : rs) {
    w = std::max(w, r.id.size());
    wq = std::max(wq, r.quantity.size());
  }
  case_table_text(s, rs, w, wq);
  // The predictions proper first (in-sample cases apart), then per quantity, all, per generation.
  if (const std::string p = predicted_line(report); !p.empty()) s << p << "\n";
  for (const auto& q : quantities(report))
    s << q << ": " << summary_line(report["summary"]["per_quantity"][q]) << "\n";
  s << "all: " << summary_line(report["summary"]) << "\n";
  for (const auto& line : hardware_lines(report)) s << line << "\n";
  if (!overrides_line(report).empty()) s << overrides_line(report) << "\n";
  if (report.contains("intervals")) intervals_text(s, report, rs, w);
  assumptions_text(s, report);
  const auto sens = sensitivity_lines(report);
  if (!sens.empty())
    s << "\nprediction change when one assumed figure moves up by 10 % (a flag: turned over; a study's own "
         "assumption, key=value: moved to that end of its range):\n";
  for (const auto& [id, text] : sens) s << "  " << id << ": " << text << "\n";
  for (const auto& c : report["cases"])
    if (c.contains("failure"))
      s << "failed: " << c["id"].get<std::string>() << ": " << c["failure"].get<std::string>() << "\n";
  check_text(s, report);
  return s.str();
}

std::string validation_markdown(const Json& report) {
  std::ostringstream s;
  s << "# tpusim validation\n\nPredictions against measured TPU runs (configs/validation/, sources in "
       "shared/VALIDATION.md). "
       "Error = predicted / measured - 1.\n\n";
  s << "| case | quantity | measured | predicted | error | tolerance | |\n| --- | --- | ---: | ---: | ---: | "
       "---: | --- |\n";
  for (const auto& r : rows(report))
    s << "| " << r.id << " | " << r.quantity << " | " << r.measured << " | " << r.predicted << " | "
      << r.error << " | " << r.tolerance << " | " << r.verdict << " |\n";
  s << "\n## Summary\n\n";
  if (const std::string p = predicted_line(report); !p.empty()) s << "- " << p << "\n";
  for (const auto& q : quantities(report))
    s << "- " << q << ": " << summary_line(report["summary"]["per_quantity"][q]) << "\n";
  s << "- all: " << summary_line(report["summary"]) << "\n";
  for (const auto& line : hardware_lines(report)) s << "- " << line << "\n";
  if (!overrides_line(report).empty()) s << "\n" << overrides_line(report) << "\n";
  if (report.contains("intervals")) {
    s << "\n## Prediction intervals\n\nMethod: " << report["intervals"]["method"].get<std::string>()
      << ".\n\n| case | measured | interval | |\n| --- | ---: | ---: | --- |\n";
    for (const auto& r : rows(report))
      if (!r.interval.empty())
        s << "| " << r.id << " | " << r.measured << " | " << r.interval << " | "
          << (r.inside == "in" ? "inside" : "OUTSIDE") << " |\n";
    s << "\n";
    for (const auto& [q, v] : report["intervals"]["per_quantity"].items())
      s << "- " << q << ": " << interval_line(v) << "\n";
    s << "- all: " << interval_line(report["intervals"]) << "\n";
  }
  s << "\n## Assumptions (" << report["assumption_knobs"].get<int>() << ")\n\n";
  for (const auto& a : report["assumptions"])
    s << "- `" << (a.contains("hardware") ? a["hardware"] : a["study"]).get<std::string>() << "` `"
      << a["figure"].get<std::string>() << "`: " << a["source"].get<std::string>() << "\n";
  const auto sens = sensitivity_lines(report);
  if (!sens.empty())
    s << "\n## Sensitivity\n\nPrediction change when one assumed figure moves up by 10 % (a flag: turned "
         "over):\n\n";
  for (const auto& [id, text] : sens) s << "- " << id << ": " << text << "\n";
  s << "\n## Cases\n\n";
  for (const auto& c : report["cases"]) {
    s << "- **" << c["id"].get<std::string>() << "**: " << c["description"].get<std::string>()
      << ". Measured: " << c["source"].get<std::string>()
      << ". Tolerance: " << c["tolerance_source"].get<std::string>() << ". Reproduce: `"
      << c["command"].get<std::string>() << "`";
    if (c.contains("baseline_command"))
      s << ", divided by the baseline's `" << c["baseline_command"].get<std::string>() << "`";
    if (c.contains("failure")) s << ". Failed: " << c["failure"].get<std::string>();
    s << "\n";
  }
  return s.str();
}

namespace {

/// A parity plot's log-log square: the data's range padded by 30 % (so the +-10 % band shows at
/// the ends).
struct ParityFrame {
  static constexpr double size = 300, left = 70, top = 34;
  double l0 = 0, l1 = 1;
  ParityFrame(double lo, double hi)
      : l0(std::log10(lo / 1.3)), l1(std::max(l0 + 0.3, std::log10(hi * 1.3))) {}
  double P(double v) const { return (std::log10(v) - l0) / (l1 - l0) * size; }
  double X(double v) const { return left + P(v); }
  double Y(double v) const { return top + size - P(v); }
  double a() const { return std::pow(10.0, l0); }
  double b() const { return std::pow(10.0, l1); }
};

/// The frame, the +-10 % band, the diagonal and the ticks on the 1-2-5 series.
void parity_axes_svg(std::ostringstream& s, const ParityFrame& f) {
  const double a = f.a(), b = f.b(), left = f.left, top = f.top, size = f.size;
  s << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << size << "\" height=\"" << size
    << "\" fill=\"none\" stroke=\"#999\"/>\n";
  s << "<polygon class=\"band\" points=\"" << svg_number(f.X(a)) << "," << svg_number(f.Y(a * 1.1)) << " "
    << svg_number(f.X(b / 1.1)) << "," << svg_number(f.Y(b)) << " " << svg_number(f.X(b)) << ","
    << svg_number(f.Y(b)) << " " << svg_number(f.X(b)) << "," << svg_number(f.Y(b * 0.9)) << " "
    << svg_number(f.X(a / 0.9)) << "," << svg_number(f.Y(a)) << " " << svg_number(f.X(a)) << ","
    << svg_number(f.Y(a)) << "\" fill=\"#4e79a7\" fill-opacity=\"0.15\"/>\n";
  s << "<line class=\"diagonal\" x1=\"" << svg_number(f.X(a)) << "\" y1=\"" << svg_number(f.Y(a))
    << "\" x2=\"" << svg_number(f.X(b)) << "\" y2=\"" << svg_number(f.Y(b)) << "\" stroke=\"#4e79a7\"/>\n";
  const bool dense = f.l1 - f.l0 > 2.5;  // many decades: label the decades only
  for (int d = int(std::floor(f.l0)); d <= int(std::ceil(f.l1)); ++d)
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, d);
      if (v < a || v > b || (dense && m != 1.0)) continue;
      char label[32];
      std::snprintf(label, sizeof label, "%g", v);
      s << "<text x=\"" << svg_number(f.X(v)) << "\" y=\"" << top + size + 14 << "\" text-anchor=\"middle\">"
        << label << "</text>\n";
      s << "<text x=\"" << left - 4 << "\" y=\"" << svg_number(f.Y(v) + 4) << "\" text-anchor=\"end\">"
        << label << "</text>\n";
    }
}

/// The axis titles (with the cases' units) and a point per case, green within its tolerance.
void parity_points_svg(std::ostringstream& s, const ParityFrame& f, const std::vector<const Json*>& points) {
  std::set<std::string> units;
  for (const Json* c : points) units.insert(c->at("unit").get<std::string>());
  std::string unit;
  for (const auto& u : units) unit += (unit.empty() ? "" : ", ") + u;
  s << "<text x=\"" << f.left + f.size / 2 << "\" y=\"" << f.top + f.size + 32
    << "\" text-anchor=\"middle\">measured (" << xml_escape(unit) << "); band: +-10 %</text>\n";
  s << "<text transform=\"translate(14," << f.top + f.size / 2
    << ") rotate(-90)\" text-anchor=\"middle\">predicted (" << xml_escape(unit) << ")</text>\n";
  for (const Json* c : points) {
    if (!c->contains("interval")) continue;  // the prediction interval as an error bar
    const double x = f.X(c->at("measured").get<double>());
    const double y0 = f.Y(std::max(c->at("interval")[0].get<double>(), f.a())),
                 y1 = f.Y(std::min(c->at("interval")[1].get<double>(), f.b()));
    s << "<g class=\"interval\" stroke=\"#555\"><line x1=\"" << svg_number(x) << "\" y1=\"" << svg_number(y0)
      << "\" x2=\"" << svg_number(x) << "\" y2=\"" << svg_number(y1) << "\"/><line x1=\"" << svg_number(x - 3)
      << "\" y1=\"" << svg_number(y0) << "\" x2=\"" << svg_number(x + 3) << "\" y2=\"" << svg_number(y0)
      << "\"/><line x1=\"" << svg_number(x - 3) << "\" y1=\"" << svg_number(y1) << "\" x2=\""
      << svg_number(x + 3) << "\" y2=\"" << svg_number(y1) << "\"/></g>\n";
  }
  for (const Json* c : points) {
    const bool within = c->at("within").get<bool>();
    s << "<circle class=\"case\" cx=\"" << svg_number(f.X(c->at("measured").get<double>())) << "\" cy=\""
      << svg_number(f.Y(c->at("predicted").get<double>())) << "\" r=\"4\" fill=\""
      << (within ? "#59a14f" : "#e15759") << "\"><title>"
      << xml_escape(c->at("id").get<std::string>() + ": error " + percent(c->at("error")) + ", tolerance " +
                    fmt("%.0f %%", 100.0 * c->at("tolerance").get<double>()))
      << "</title></circle>\n";
  }
}

}  // namespace

std::string parity_svg(const Json& report, const std::string& quantity) {
  std::vector<const Json*> points;
  double lo = INFINITY, hi = 0;
  for (const auto& c : report["cases"]) {
    if (c["quantity"] != quantity || c["predicted"].is_null() || !(c["predicted"].get<double>() > 0))
      continue;
    points.push_back(&c);
    for (const char* k : {"measured", "predicted"}) {
      lo = std::min(lo, c[k].get<double>());
      hi = std::max(hi, c[k].get<double>());
    }
    if (c.contains("interval") && c["interval"][0].get<double>() > 0) {
      lo = std::min(lo, c["interval"][0].get<double>());
      hi = std::max(hi, c["interval"][1].get<double>());
    }
  }
  const double size = ParityFrame::size, left = ParityFrame::left, top = ParityFrame::top;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"parity\" data-quantity=\"" << xml_escape(quantity)
    << "\" width=\"" << left + size + 20 << "\" height=\"" << top + size + 50
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s << "<text x=\"" << left << "\" y=\"18\" font-size=\"13\">" << xml_escape(quantity)
    << " (log-log)</text>\n";
  if (points.empty()) {
    s << "<text x=\"" << left << "\" y=\"" << top + 20 << "\">no predictions</text>\n</svg>\n";
    return s.str();
  }
  const ParityFrame f(lo, hi);
  parity_axes_svg(s, f);
  parity_points_svg(s, f, points);
  s << "</svg>\n";
  return s.str();
}

namespace {

/// --intervals: the coverage and each case's interval.
void intervals_html(std::ostringstream& h, const Json& report) {
  h << "<h2>Prediction intervals</h2>\n<p>The error bars of the parity plots. Method: "
    << xml_escape(report["intervals"]["method"].get<std::string>()) << ".</p>\n<ul>";
  for (const auto& [q, v] : report["intervals"]["per_quantity"].items())
    h << "<li>" << xml_escape(q) << ": " << xml_escape(interval_line(v)) << "</li>";
  h << "<li>all: " << xml_escape(interval_line(report["intervals"])) << "</li>";
  if (report["intervals"].contains("bands"))
    h << "<li>with the model's error, leave-one-out: " << xml_escape(band_line(report["intervals"]["bands"]))
      << " (" << xml_escape(report["intervals"]["bands"]["method"].get<std::string>()) << ")</li>";
  h << "</ul>\n<table><tr><th>case</th><th>"
    << "measured</th><th>interval</th><th></th></tr>\n";
  for (const auto& r : rows(report))
    if (!r.interval.empty())
      h << "<tr" << (r.inside == "in" ? "" : " class=\"out\"") << "><td>" << xml_escape(r.id) << "</td><td>"
        << xml_escape(r.measured) << "</td><td>" << xml_escape(r.interval) << "</td><td>"
        << (r.inside == "in" ? "inside" : "OUTSIDE") << "</td></tr>\n";
  h << "</table>\n";
}

/// Each case: what it is, where its measurement comes from, its tolerance and its command.
void cases_html(std::ostringstream& h, const Json& report) {
  h << "<h2>Cases</h2>\n<ul>";
  for (const auto& c : report["cases"])
    h << "<li><b>" << xml_escape(c["id"].get<std::string>())
      << "</b>: " << xml_escape(c["description"].get<std::string>())
      << ". Measured: " << xml_escape(c["source"].get<std::string>())
      << ". Tolerance: " << xml_escape(c["tolerance_source"].get<std::string>()) << ". <code>"
      << xml_escape(c["command"].get<std::string>()) << "</code>"
      << (c.contains("baseline_command")
              ? ", divided by the baseline's <code>" + xml_escape(c["baseline_command"].get<std::string>()) +
                    "</code>"
              : "")
      << (c.contains("failure")
              ? " <span class=\"out\">failed: " + xml_escape(c["failure"].get<std::string>()) + "</span>"
              : "")
      << "</li>\n";
}

}  // namespace

std::string validation_html(const Json& report) {
  std::ostringstream h;
  h << html_page_start("tpusim validation",
                       "td:first-child,td:nth-child(2){text-align:left}.out{color:#b00}");
  const std::string predicted = predicted_line(report);
  h << "<h1>tpusim validation</h1>\n<p>Predictions against measured TPU runs. Error = predicted / measured - "
       "1. "
    << (predicted.empty() ? std::string() : xml_escape(predicted) + ". ")
    << "All cases: " << xml_escape(summary_line(report["summary"])) << ". "
    << xml_escape(overrides_line(report)) << "</p>\n<div>";
  for (const auto& q : quantities(report)) h << parity_svg(report, q);
  h << "</div>\n<table><tr><th>case</th><th>quantity</th><th>measured</th><th>predicted</th><th>error</"
       "th><th>tolerance</th><th></th></tr>\n";
  for (const auto& r : rows(report))
    h << "<tr" << (r.within ? "" : " class=\"out\"") << "><td>" << xml_escape(r.id) << "</td><td>"
      << xml_escape(r.quantity) << "</td><td>" << xml_escape(r.measured) << "</td><td>"
      << xml_escape(r.predicted) << "</td><td>" << xml_escape(r.error) << "</td><td>"
      << xml_escape(r.tolerance) << "</td><td>" << r.verdict << "</td></tr>\n";
  h << "</table>\n<h2>Summary</h2>\n<ul>";
  for (const auto& q : quantities(report))
    h << "<li>" << xml_escape(q) << ": " << xml_escape(summary_line(report["summary"]["per_quantity"][q]))
      << "</li>";
  for (const auto& line : hardware_lines(report)) h << "<li>" << xml_escape(line) << "</li>";
  h << "</ul>\n";
  if (report.contains("intervals")) intervals_html(h, report);
  h << "<h2>Assumptions (" << report["assumption_knobs"].get<int>() << ")</h2>\n<ul>";
  for (const auto& a : report["assumptions"])
    h << "<li><code>"
      << xml_escape((a.contains("hardware") ? a["hardware"] : a["study"]).get<std::string>() + " " +
                    a["figure"].get<std::string>())
      << "</code>: " << xml_escape(a["source"].get<std::string>()) << "</li>";
  h << "</ul>\n";
  const auto sens = sensitivity_lines(report);
  if (!sens.empty())
    h << "<h2>Sensitivity</h2>\n<p>Prediction change when one assumed figure moves up by 10 % (a flag: "
         "turned over):</p>\n<ul>";
  for (const auto& [id, text] : sens)
    h << "<li><b>" << xml_escape(id) << "</b>: " << xml_escape(text) << "</li>";
  if (!sens.empty()) h << "</ul>\n";
  cases_html(h, report);
  h << "</ul>\n</body></html>\n";
  return h.str();
}

}  // namespace tpusim::reports
