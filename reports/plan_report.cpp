#include "reports/plan_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "reports/svg.hpp"

namespace tpusim::reports {

namespace {

std::string num(double v, const char* format) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

struct Row {
  std::string plan, step, throughput, peak, cores;
};

Row row(const Json& p) {
  auto d = [&](const char* k) { return p.value(k, Json(nullptr)).is_number() ? p[k].get<double>() : NAN; };
  return {p["plan"].get<std::string>(), std::isnan(d("step_time_s")) ? "-" : human_seconds(d("step_time_s")),
          std::isnan(d("examples_per_s")) ? "-" : num(d("examples_per_s"), "%.1f"),
          std::isnan(d("peak_hbm_bytes")) ? "-" : human_bytes(d("peak_hbm_bytes")),
          std::to_string(p["cores_used"].get<int>())};
}

std::string counts(const Json& plan) {
  std::string text = std::to_string(plan["evaluated"].get<int>()) +
                     " candidates: " + std::to_string(plan["pruned"]["invalid"].get<int>()) + " invalid, " +
                     std::to_string(plan["pruned"]["memory"].get<int>()) +
                     " pruned by memory (their resident state, or what their programs hold, over HBM" +
                     (plan["pruned"].value("interleaved_by_twin", 0) > 0
                          ? "; " + std::to_string(plan["pruned"]["interleaved_by_twin"].get<int>()) +
                                " of them interleaved pipelines whose uninterleaved twin is over, not bounded"
                          : std::string()) +
                     "), " + std::to_string(plan["simulated"].get<int>()) + " simulated";
  if (!plan.value("complete", true)) {
    const Json& left = plan["not_examined"];
    char after[32];
    std::snprintf(after, sizeof after, "%.1f s", plan["stopped"]["after_s"].get<double>());
    text += "; INCOMPLETE: stopped by " + plan["stopped"]["by"].get<std::string>() + " after " + after +
            ", " + std::to_string(left["unbounded"].get<int>()) + " candidates not bounded and " +
            std::to_string(left["unsimulated"].get<int>()) +
            " not simulated that could still beat the top: the best plan found so far";
  }
  return text;
}

/// Simulated plans with a result: (peak HBM GiB, examples/s, fits, label).
struct Point {
  double x, throughput;
  bool fits;
  std::string plan;
};

/// Simulated plans with a result; x: their peak HBM per device (GiB) or the devices they use.
std::vector<Point> points(const Json& plan, bool by_cores) {
  std::vector<Point> out;
  for (const char* list : {"top", "others"})
    for (const auto& p : plan[list])
      if (p.value("examples_per_s", Json(nullptr)).is_number())
        out.push_back(
            {by_cores ? p["cores_used"].get<double>() : p["peak_hbm_bytes"].get<double>() / double(1 << 30),
             p["examples_per_s"].get<double>(), p.value("fits", false), p["plan"].get<std::string>()});
  return out;
}

/// A line per top plan that fits only as the compiler re-materializes part of its layers
/// (compiler_remat in its summary), each after `indent`.
std::string compiler_remat_notes(const Json& plan, const std::string& indent) {
  std::string text;
  int i = 0;
  for (const auto& p : plan["top"]) {
    ++i;
    if (!p.contains("compiler_remat")) continue;
    char share[32];
    std::snprintf(share, sizeof share, "%.0f %%",
                  100.0 * p["compiler_remat"]["share_of_layers_needed"].get<double>());
    text += indent + "#" + std::to_string(i) + " fits as the compiler re-materializes " + share +
            " of its layers (" + p["compiler_remat"]["policy"].dump() + ")\n";
  }
  return text;
}

}  // namespace

namespace {

/// ", 16.0 days to the target (16.1 with goodput), $98403 with goodput" for the best plan.
std::string formatted_days(const Json& t, const Json& cost) {
  char buf[160];
  std::snprintf(buf, sizeof buf, ", %.3g days to the target (%.3g with goodput)", t["days"].get<double>(),
                t["days_with_goodput"].get<double>());
  std::string out = buf;
  if (cost.is_object()) {
    std::snprintf(buf, sizeof buf, ", $%.0f with goodput", cost["usd_with_goodput"].get<double>());
    out += buf;
  }
  return out;
}

}  // namespace

std::string plan_text(const Json& plan) {
  std::ostringstream s;
  s << "tpusim plan: " << counts(plan) << "\n";
  if (plan["best"].is_null()) {
    s << "no plan fits\n";
    return s.str();
  }
  char line[256];
  std::snprintf(line, sizeof line, "%-4s %-44s %12s %12s %12s %6s\n", "#", "plan", "step", "examples/s",
                "peak HBM", "devices");
  s << line;
  int i = 0;
  for (const auto& p : plan["top"]) {
    const Row r = row(p);
    std::snprintf(line, sizeof line, "%-4d %-44s %12s %12s %12s %6s\n", ++i, r.plan.c_str(), r.step.c_str(),
                  r.throughput.c_str(), r.peak.c_str(), r.cores.c_str());
    s << line;
  }
  s << compiler_remat_notes(plan, "  ");
  s << "best: " << plan["best"]["plan"].get<std::string>();
  const Json& best = plan["best"].value("result", Json());
  if (best.is_object() && best.contains("time_to_train"))
    s << formatted_days(best["time_to_train"], best.value("cost", Json()));
  s << "\n";
  // The closest losers of each kind: the first few of each reason.
  int shown = 0;
  for (const auto& p : plan["others"]) {
    if (p["why"].get<std::string>().rfind("invalid", 0) == 0) continue;
    if (++shown > 8) break;
    s << "  " << p["plan"].get<std::string>() << ": " << p["why"].get<std::string>() << "\n";
  }
  return s.str();
}

std::string plan_markdown(const Json& plan) {
  std::ostringstream md;
  md << "# tpusim plan\n\nStudy `" << plan["study"].get<std::string>() << "`; " << counts(plan) << ".\n\n";
  if (plan["best"].is_null()) {
    md << "No plan fits.\n";
  } else {
    md << "Best: **" << plan["best"]["plan"].get<std::string>() << "** (`best.json` runs it).\n\n";
    md << "| # | plan | step | examples/s | peak HBM per device | devices |\n| ---: | --- | ---: | ---: | "
          "---: | "
          "---: |\n";
    int i = 0;
    for (const auto& p : plan["top"]) {
      const Row r = row(p);
      md << "| " << ++i << " | " << r.plan << " | " << r.step << " | " << r.throughput << " | " << r.peak
         << " | " << r.cores << " |\n";
    }
    if (const std::string notes = compiler_remat_notes(plan, "- "); !notes.empty()) md << "\n" << notes;
  }
  // The 50 nearest losers; every one is in plan.json (a search over thousands made this page long).
  constexpr std::size_t kShown = 50;
  const auto& others = plan["others"];
  md << "\n## Why the others lose\n\n";
  if (others.size() > kShown)
    md << "The first " << kShown << " of " << others.size()
       << " (every one, with its reason, in `plan.json`).\n\n";
  md << "| plan | why |\n| --- | --- |\n";
  for (std::size_t i = 0; i < others.size() && i < kShown; ++i)
    md << "| " << others[i]["plan"].get<std::string>() << " | " << others[i]["why"].get<std::string>()
       << " |\n";
  return md.str();
}

namespace {

/// Throughput against x over the simulated plans (filled: fits), with the front of those that
/// fit: no other fitting plan is faster at a smaller x.
/// The Pareto front of the plans that fit, by x ascending: no other fitting plan is faster at a
/// smaller x.
std::vector<Point> pareto_front(const std::vector<Point>& pts) {
  std::vector<Point> fit, front;
  for (const auto& p : pts)
    if (p.fits) fit.push_back(p);
  std::stable_sort(fit.begin(), fit.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  for (const auto& p : fit)
    if (front.empty() || p.throughput > front.back().throughput) front.push_back(p);
  return front;
}

std::string scatter_svg(const std::vector<Point>& pts, const char* cls, const std::string& title,
                        const std::string& x_label, double capacity = -1) {
  const double w = 420, h = 300, left = 70, top = 30;
  const std::vector<Point> on_front = pareto_front(pts);
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"" << cls << "\" width=\"" << left + w + 20
    << "\" height=\"" << top + h + 50 + 14 * double(on_front.size())
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s << "<text x=\"" << left << "\" y=\"18\" font-size=\"13\">" << xml_escape(title) << "</text>\n";
  if (pts.empty()) {
    s << "<text x=\"" << left << "\" y=\"" << top + 20 << "\">no simulated plans</text>\n</svg>\n";
    return s.str();
  }
  double x1 = 0, y1 = 0;
  for (const auto& p : pts) x1 = std::max(x1, p.x), y1 = std::max(y1, p.throughput);
  x1 = std::max(x1, capacity);
  x1 *= 1.1, y1 *= 1.1;
  auto X = [&](double v) { return left + v / x1 * w; };
  auto Y = [&](double v) { return top + h - v / y1 * h; };
  s << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << w << "\" height=\"" << h
    << "\" fill=\"none\" stroke=\"#999\"/>\n";
  for (double v = 0; v <= x1; v += tick_step(x1, 6))
    s << "<text x=\"" << svg_number(X(v)) << "\" y=\"" << top + h + 14 << "\" text-anchor=\"middle\">"
      << num(v, "%g") << "</text>\n";
  for (double v = 0; v <= y1; v += tick_step(y1, 6))
    s << "<text x=\"" << left - 4 << "\" y=\"" << svg_number(Y(v) + 4) << "\" text-anchor=\"end\">"
      << num(v, "%g") << "</text>\n";
  s << "<text x=\"" << left + w / 2 << "\" y=\"" << top + h + 32 << "\" text-anchor=\"middle\">"
    << xml_escape(x_label) << "</text>\n<text transform=\"translate(14," << top + h / 2
    << ") rotate(-90)\" text-anchor=\"middle\">examples/s</text>\n";
  std::string front;
  for (const auto& p : on_front) front += svg_number(X(p.x)) + "," + svg_number(Y(p.throughput)) + " ";
  if (!front.empty())
    s << "<polyline class=\"front\" points=\"" << front << "\" fill=\"none\" stroke=\"#e15759\"/>\n";
  if (capacity > 0)
    s << "<line class=\"capacity\" x1=\"" << svg_number(X(capacity)) << "\" x2=\"" << svg_number(X(capacity))
      << "\" y1=\"" << top << "\" y2=\"" << top + h
      << "\" stroke=\"#d00\" stroke-dasharray=\"6 3\"/><text x=\"" << svg_number(X(capacity) - 4) << "\" y=\""
      << top + 12 << "\" text-anchor=\"end\" fill=\"#d00\">HBM capacity</text>\n";
  // The front's plans numbered beside their points and named under the chart (the rest in their
  // tooltips).
  for (std::size_t i = 0; i < on_front.size(); ++i)
    s << "<text class=\"label\" x=\"" << svg_number(X(on_front[i].x) + 5) << "\" y=\""
      << svg_number(Y(on_front[i].throughput) - 5) << "\" font-weight=\"bold\">" << i + 1 << "</text>\n";
  for (std::size_t i = 0; i < on_front.size(); ++i)
    s << "<text class=\"label\" x=\"" << left << "\" y=\"" << top + h + 50 + 14 * double(i) << "\">" << i + 1
      << ": " << xml_escape(on_front[i].plan) << "</text>\n";
  for (const auto& p : pts)
    s << "<circle class=\"plan" << (p.fits ? " fits" : "") << "\" cx=\"" << svg_number(X(p.x)) << "\" cy=\""
      << svg_number(Y(p.throughput)) << "\" r=\"4\" fill=\"" << (p.fits ? "#4e79a7" : "none")
      << "\" stroke=\"#4e79a7\"><title>" << xml_escape(p.plan) << "</title></circle>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace

std::string pareto_svg(const Json& plan) {
  const double capacity = plan.value("hbm_capacity_bytes", -1.0);
  return scatter_svg(points(plan, false), "pareto", "throughput against peak HBM per device",
                     "peak HBM per device (GiB)", capacity > 0 ? capacity / double(1 << 30) : -1);
}

std::string plan_html(const Json& plan) {
  std::ostringstream h;
  h << html_page_start("tpusim plan", "td,th{text-align:left}") << "<h1>tpusim plan</h1>\n<p>"
    << xml_escape(plan["study"].get<std::string>()) << ": " << xml_escape(counts(plan)) << ".</p>\n";
  h << pareto_svg(plan);
  // Against the cores used too, when the plans differ in that (a pipeline on part of the slice).
  const auto by_cores = points(plan, true);
  if (std::any_of(by_cores.begin(), by_cores.end(),
                  [&](const Point& p) { return p.x != by_cores.front().x; }))
    h << scatter_svg(by_cores, "cores", "throughput against devices used", "devices used");
  if (!plan["best"].is_null()) {
    h << "<h2>Best: " << xml_escape(plan["best"]["plan"].get<std::string>()) << "</h2>\n<table class=\"top\">"
      << "<tr><th>#</th><th>plan</th><th>step</th><th>examples/s</th><th>peak HBM per "
         "device</th><th>devices</th></tr>\n";
    int i = 0;
    for (const auto& p : plan["top"]) {
      const Row r = row(p);
      h << "<tr><td>" << ++i << "</td><td>" << xml_escape(r.plan) << "</td><td>" << r.step << "</td><td>"
        << r.throughput << "</td><td>" << r.peak << "</td><td>" << r.cores << "</td></tr>\n";
    }
    h << "</table>\n";
  } else {
    h << "<h2>No plan fits</h2>\n";
  }
  h << "<h2>Why the others lose</h2>\n<table class=\"others\"><tr><th>plan</th><th>why</th></tr>\n";
  for (const auto& p : plan["others"])
    h << "<tr><td>" << xml_escape(p["plan"].get<std::string>()) << "</td><td>"
      << xml_escape(p["why"].get<std::string>()) << "</td></tr>\n";
  h << "</table>\n</body></html>\n";
  return h.str();
}

}  // namespace tpusim::reports
