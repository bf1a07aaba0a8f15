#include "reports/svg.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace tpusim::reports {

std::string svg_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

/// A "nice" tick step for an axis spanning `range`.
double tick_step(double range, int ticks) {
  const double raw = range / ticks;
  double p = 1;
  while (p * 10 <= raw) p *= 10;
  while (p > raw) p /= 10;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (p * m >= raw) return p * m;
  return p * 10;
}

const char* phase_colour(const std::string& phase) {
  if (phase == "forward") return "#4e79a7";
  if (phase == "backward") return "#59a14f";
  if (phase == "recompute") return "#f28e2b";
  if (phase == "update") return "#b07aa1";
  if (phase == "activation_transfer" || phase == "gradient_transfer" || phase == "transfer") return "#e15759";
  if (phase == "weights") return "#4e79a7";
  if (phase == "optimizer") return "#b07aa1";
  if (phase == "gradients") return "#59a14f";
  if (phase == "activations") return "#f28e2b";
  if (phase == "workspace") return "#bab0ac";
  return "#9c755f";  // collectives and anything else
}

namespace {

/// The timeline's layout: the busy cores shown (one row each, at most max_rows) and the time
/// scale.
struct Timeline {
  static constexpr double left = 80, right = 20, top = 40, row_h = 26, lane_h = 6, width = 1200;
  static constexpr double plot_w = width - left - right;
  std::vector<int> rows;    ///< cores shown
  std::vector<int> row_of;  ///< each core's row (-1: not shown)
  int busy = 0;             ///< cores with a program
  double step = 0;

  Timeline(const sim::TaskGraph& graph, const sim::SimResult& r, int max_rows)
      : row_of(std::size_t(graph.cores()), -1), step(std::max(r.step_time_s, 1e-12)) {
    for (int c = 0; c < graph.cores(); ++c) {
      if (graph.program(c).empty()) continue;
      ++busy;
      if (int(rows.size()) < max_rows) {
        row_of[std::size_t(c)] = int(rows.size());
        rows.push_back(c);
      }
    }
  }
  double x(double t) const { return left + plot_w * t / step; }
  double row_y(int core) const { return top + row_h * row_of[std::size_t(core)]; }
  double height() const { return top + row_h * double(rows.size()) + 60; }
};

/// Title, legend and the rows' labels and separators.
void timeline_frame_svg(std::ostringstream& s, const Timeline& tl, const sim::SimResult& r) {
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << tl.width << "\" height=\""
    << svg_number(tl.height()) << "\" font-family=\"sans-serif\" font-size=\"10\">\n";
  s << "<text x=\"" << tl.left
    << "\" y=\"16\" font-size=\"13\">Step timeline: " << human_seconds(r.step_time_s, true);
  if (tl.busy > int(tl.rows.size())) s << " (first " << tl.rows.size() << " of " << tl.busy << " busy cores)";
  s << "</text>\n";
  double lx = tl.left;
  for (const char* p : {"forward", "backward", "recompute", "update", "transfer", "collective"}) {
    s << "<rect x=\"" << svg_number(lx) << "\" y=\"22\" width=\"10\" height=\"10\" fill=\"" << phase_colour(p)
      << "\"/>"
      << "<text x=\"" << svg_number(lx + 14) << "\" y=\"31\">" << p << "</text>\n";
    lx += 90;
  }
  for (std::size_t i = 0; i < tl.rows.size(); ++i) {
    const double y = tl.top + tl.row_h * double(i);
    s << "<text x=\"4\" y=\"" << svg_number(y + 14) << "\">core " << tl.rows[i] << "</text>\n";
    s << "<line x1=\"" << tl.left << "\" x2=\"" << svg_number(tl.left + tl.plot_w) << "\" y1=\""
      << svg_number(y + tl.row_h - 1) << "\" y2=\"" << svg_number(y + tl.row_h - 1)
      << "\" stroke=\"#eee\"/>\n";
  }
}

/// A task: a compute task as a box in its core's row (with its micro-batch when wide enough); a
/// transfer or collective as a thin box in the lane of every shown core taking part.
void timeline_task_svg(std::ostringstream& s, const Timeline& tl, const sim::Task& t, double t0, double t1) {
  const double w = std::max(0.5, tl.x(t1) - tl.x(t0));
  const std::string title = xml_escape(t.name) + " (" + human_seconds(t1 - t0, true) + ")";
  if (t.kind == sim::TaskKind::Compute) {
    if (tl.row_of[std::size_t(t.core)] < 0) return;
    const double y = tl.row_y(t.core);
    s << "<rect x=\"" << svg_number(tl.x(t0)) << "\" y=\"" << svg_number(y + 2) << "\" width=\""
      << svg_number(w) << "\" height=\"" << svg_number(tl.row_h - tl.lane_h - 5) << "\" fill=\""
      << phase_colour(t.phase) << "\" stroke=\"#fff\" stroke-width=\"0.5\"><title>" << title
      << "</title></rect>\n";
    // Its micro-batch, and an interleaved pipeline's chunk on the stage ("3c1").
    const std::string label =
        std::to_string(t.micro_batch) + (t.chunk >= 0 ? "c" + std::to_string(t.chunk) : std::string());
    const double room = t.chunk >= 0 ? 6.0 * double(label.size()) : 12.0;
    if (t.micro_batch >= 0 && w > room) {
      s << "<text x=\"" << svg_number(tl.x(t0) + w / 2) << "\" y=\"" << svg_number(y + 14)
        << "\" fill=\"#fff\" text-anchor=\"middle\">" << label << "</text>\n";
    }
    return;
  }
  const char* colour =
      t.kind == sim::TaskKind::Transfer ? phase_colour("transfer") : phase_colour("collective");
  for (int c : t.members()) {
    if (tl.row_of[std::size_t(c)] < 0) continue;
    const double y = tl.row_y(c) + tl.row_h - tl.lane_h - 2;
    s << "<rect x=\"" << svg_number(tl.x(t0)) << "\" y=\"" << svg_number(y) << "\" width=\"" << svg_number(w)
      << "\" height=\"" << svg_number(tl.lane_h) << "\" fill=\"" << colour << "\" opacity=\"0.8\"><title>"
      << title << "</title></rect>\n";
  }
}

/// The time axis under the rows.
void timeline_axis_svg(std::ostringstream& s, const Timeline& tl) {
  const double axis_y = tl.top + tl.row_h * double(tl.rows.size()) + 8;
  s << "<line x1=\"" << tl.left << "\" x2=\"" << svg_number(tl.left + tl.plot_w) << "\" y1=\""
    << svg_number(axis_y) << "\" y2=\"" << svg_number(axis_y) << "\" stroke=\"#333\"/>\n";
  const double dt = tick_step(tl.step, 8);
  for (double t = 0; t <= tl.step * (1 + 1e-9); t += dt) {
    s << "<line x1=\"" << svg_number(tl.x(t)) << "\" x2=\"" << svg_number(tl.x(t)) << "\" y1=\""
      << svg_number(axis_y) << "\" y2=\"" << svg_number(axis_y + 4) << "\" stroke=\"#333\"/><text x=\""
      << svg_number(tl.x(t)) << "\" y=\"" << svg_number(axis_y + 16) << "\" text-anchor=\"middle\">"
      << human_seconds(t, true) << "</text>\n";
  }
}

}  // namespace

std::string timeline_svg(const sim::TaskGraph& graph, const sim::SimResult& r, int max_rows) {
  const Timeline tl(graph, r, max_rows);
  std::ostringstream s;
  timeline_frame_svg(s, tl, r);
  for (int id = 0; id < graph.size(); ++id)
    timeline_task_svg(s, tl, graph.task(id), r.tasks[id].start_s, r.tasks[id].end_s);
  timeline_axis_svg(s, tl);
  s << "</svg>\n";
  return s.str();
}

namespace {

/// Horizontal lines every round number of GiB up to `top_value` bytes, labelled on the left.
template <typename Y>
void gib_gridlines(std::ostringstream& s, double left, double right, double top_value, const Y& y) {
  const double gib = 1024.0 * 1024 * 1024;
  const double dy = tick_step(top_value / gib, 5);
  for (double v = 0; v * gib <= top_value; v += dy) {
    s << "<line x1=\"" << left << "\" x2=\"" << svg_number(right) << "\" y1=\"" << svg_number(y(v * gib))
      << "\" y2=\"" << svg_number(y(v * gib)) << "\" stroke=\"#eee\"/><text x=\"" << left - 4 << "\" y=\""
      << svg_number(y(v * gib) + 3) << "\" text-anchor=\"end\">" << svg_number(v) << " GiB</text>\n";
  }
}

/// One category's part of a core's bar, its title the core, the category and the bytes.
void memory_bar(std::ostringstream& s, double x, double w, double y, double h, const char* cat,
                const std::string& title) {
  s << "<rect x=\"" << svg_number(x) << "\" y=\"" << svg_number(y) << "\" width=\"" << svg_number(w)
    << "\" height=\"" << svg_number(h) << "\" fill=\"" << phase_colour(cat) << "\"><title>" << title
    << "</title></rect>\n";
}

/// The categories' colours, one under another from (x, y).
template <std::size_t N>
void memory_legend(std::ostringstream& s, double x, double y, const char* const (&cats)[N]) {
  for (const char* cat : cats) {
    s << "<rect x=\"" << svg_number(x + 10) << "\" y=\"" << svg_number(y)
      << "\" width=\"10\" height=\"10\" fill=\"" << phase_colour(cat) << "\"/><text x=\""
      << svg_number(x + 24) << "\" y=\"" << svg_number(y + 9) << "\">" << cat << "</text>\n";
    y += 16;
  }
}

}  // namespace

std::string memory_svg(const Json& result, int max_bars) {
  const auto& cores = result["cores"];
  std::vector<int> shown;
  for (std::size_t c = 0; c < cores.size() && int(shown.size()) < max_bars; ++c)
    if (cores[c]["peak_hbm_bytes"].get<double>() > 0) shown.push_back(int(c));
  const double capacity = result["hbm_capacity_bytes"].get<double>();
  double top_value = capacity;
  for (int c : shown) top_value = std::max(top_value, cores[c]["peak_hbm_bytes"].get<double>());
  top_value *= 1.1;
  const double left = 70, top = 40, plot_h = 260,
               bar_w = std::clamp(700.0 / std::max<std::size_t>(1, shown.size()), 4.0, 40.0);
  const double width = std::max(400.0, left + bar_w * double(shown.size()) + 140), height = top + plot_h + 50;
  auto y = [&](double bytes) { return top + plot_h * (1 - bytes / top_value); };
  const char* cats[] = {"weights", "optimizer", "gradients", "activations", "workspace"};

  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << svg_number(width) << "\" height=\""
    << svg_number(height) << "\" font-family=\"sans-serif\" font-size=\"10\">\n";
  s << "<text x=\"" << left
    << "\" y=\"16\" font-size=\"13\">Peak HBM per core, by category at the peak</text>\n";
  gib_gridlines(s, left, left + bar_w * double(shown.size()), top_value, y);
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const auto& core = cores[shown[i]];
    double base = 0;
    for (const char* cat : cats) {
      const double v = core["hbm_at_peak"][cat].get<double>();
      if (v <= 0) continue;
      memory_bar(s, left + bar_w * double(i) + 1, bar_w - 2, y(base + v), y(base) - y(base + v), cat,
                 "core " + std::to_string(shown[i]) + " " + cat + " " + human_bytes(v));
      base += v;
    }
    if (bar_w >= 14 || i % 8 == 0)
      s << "<text x=\"" << svg_number(left + bar_w * (double(i) + 0.5)) << "\" y=\""
        << svg_number(top + plot_h + 14) << "\" text-anchor=\"middle\">" << shown[i] << "</text>\n";
  }
  s << "<line x1=\"" << left << "\" x2=\"" << svg_number(left + bar_w * double(shown.size())) << "\" y1=\""
    << svg_number(y(capacity)) << "\" y2=\"" << svg_number(y(capacity))
    << "\" stroke=\"#d00\" stroke-width=\"2\" stroke-dasharray=\"6 3\"/>"
    << "<text x=\"" << svg_number(left + 4) << "\" y=\"" << svg_number(y(capacity) - 4)
    << "\" fill=\"#d00\">HBM capacity " << human_bytes(capacity) << "</text>\n";
  memory_legend(s, left + bar_w * double(shown.size()), top + 20, cats);
  s << "<text x=\"" << svg_number(left) << "\" y=\"" << svg_number(top + plot_h + 30)
    << "\">core</text>\n</svg>\n";
  return s.str();
}

std::string html_page_start(const std::string& title, const std::string& extra_css) {
  return "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + xml_escape(title) +
         "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}"
         "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px "
         "8px;font-size:13px;"
         "text-align:right}th{background:#f4f4f4}h2{margin-top:28px}svg{margin:6px 12px 6px "
         "0;vertical-align:top}" +
         extra_css + "</style></head><body>\n";
}

}  // namespace tpusim::reports
