// Reports of a sweep (records as written to results.jsonl, meta as in sweep.json):
// self-contained report.html (inline SVG and CSS, no network) and report.md with its charts
// as SVG files. Charts follow the axes: examples/s against the micro-batch count (or the last
// numeric axis, or else the first axis of names as categories) per partition count, measured
// and ideal bubble as K x M heatmaps, peak HBM against K with the capacity line; points that do
// not fit are drawn hollow; then the best configurations that fit and the failures.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace tpusim::reports {

using Json = nlohmann::json;

/// What the sweep reports read of a record (as written to results.jsonl): its settings, its
/// error and its result's scalar figures plus the two breakdown figures the comparison table
/// shows (`breakdown.step_split_s.update`, `breakdown.exposed_communication_s`). A sweep keeps
/// only this in memory; the reports are written from it, so they read nothing it drops.
Json sweep_summary(const Json& record);
/// A result's days and cost to its training target (JSON pointers), which a sweep's summary keeps
/// and its results.csv has as columns when the points have a target.
const std::vector<const char*>& time_to_train_pointers();

/// Chart name ("throughput", "bubble", "memory") -> SVG. Only the charts the axes allow.
std::map<std::string, std::string> sweep_charts(const Json& meta, const std::vector<Json>& records);
std::string sweep_html(const Json& meta, const std::vector<Json>& records);
std::string sweep_markdown(const Json& meta, const std::vector<Json>& records);

/// A line chart: one polyline per series of (x, y) points, in the given order; an optional
/// horizontal reference line (e.g. the HBM capacity). x is drawn on a log2 scale when `log_x`;
/// y on a log10 scale when its values span more than a factor of 30.
struct LineChart {
  std::string title, x_label, y_label;
  std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>> series;
  bool log_x = false;
  double reference = -1;  ///< < 0: none
  std::string reference_label;
  /// Non-empty: x is a category's index into these names (a swept axis of names or layouts),
  /// drawn evenly spaced and labelled by name.
  std::vector<std::string> x_categories;
  /// (series name, x) of points drawn hollow and marked "does not fit".
  std::set<std::pair<std::string, double>> not_fitting;
  /// x labelled at regular steps (a continuous quantity: a cost) instead of at each point's x.
  bool regular_x_ticks = false;
};
std::string line_chart_svg(const LineChart& chart);

/// A heatmap of `values[row][col]` (NaN: no data), labelled with the values as percentages.
std::string heatmap_svg(const std::string& title, const std::string& row_label,
                        const std::vector<std::string>& rows, const std::string& col_label,
                        const std::vector<std::string>& cols, const std::vector<std::vector<double>>& values);

}  // namespace tpusim::reports
