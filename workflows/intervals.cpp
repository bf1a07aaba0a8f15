#include "workflows/intervals.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "schedules/study.hpp"
#include "workflows/child_process.hpp"
#include "workflows/output_file.hpp"

namespace fs = std::filesystem;

namespace tpusim::workflows {

const char* const kIntervalMethod =
    "one assumption at a time: each ranged assumption moved to each end of its range with the others at "
    "their values; each move is taken as the logarithm of its ratio to the point, and the moves, as "
    "independent errors, combine in quadrature on each side: low = the point x exp(-sqrt(sum of the squared "
    "downward log-ratios)), high = the point x exp(sqrt(sum of the squared upward ones))";

std::vector<AssumedRange> assumed_ranges(const Study& study, std::vector<std::string>* unranged) {
  std::vector<AssumedRange> out;
  for (const auto& [path, range] : study.hardware.ranges) {
    if (!study.reads_figure(path)) continue;
    const Json* node = json_at(study.hardware_json, path);
    if (!node || !node->is_object() || !node->contains("value")) continue;
    out.push_back({path, "hardware", (*node)["value"], range.low, range.high, range.source});
  }
  if (unranged)
    for (const auto& [path, source] : study.hardware.sources)
      if (source.rfind("assumption", 0) == 0 && !study.hardware.ranges.count(path) &&
          study.reads_figure(path))
        unranged->push_back(path);
  for (const auto& a : study.assumptions) out.push_back({a.key, "study", a.value, a.low, a.high, a.source});
  return out;
}

std::vector<std::string> variant_args(const Study& study, const AssumedRange& r, const Json& end,
                                      const fs::path& file) {
  if (r.kind == "study") return {"--set", r.name + "=" + end.dump()};
  Json hardware = study.hardware_json;
  Problems problems("intervals");
  apply_hardware_overrides(hardware, Json{{r.name, end}}, "", problems);
  problems.throw_if_any();
  write_output_file(file, hardware.dump(2) + "\n", "--intervals");
  return {"--set", "hardware=" + file.string()};
}

std::vector<std::array<EndResult, 2>> run_variants(const std::vector<std::string>& args, const Study& study,
                                                   const std::vector<AssumedRange>& ranges, int jobs,
                                                   const QuantityExtractor& extract) {
  static int calls = 0;
  const fs::path dir = fs::temp_directory_path() /
                       ("tpusim-intervals-" + std::to_string(::getpid()) + "-" + std::to_string(calls++));
  fs::create_directories(dir);
  std::vector<std::vector<std::string>> commands;
  for (std::size_t i = 0; i < ranges.size(); ++i)
    for (int e = 0; e < 2; ++e) {
      const Json& end = e == 0 ? ranges[i].low : ranges[i].high;
      std::vector<std::string> c = args;
      const auto extra = variant_args(study, ranges[i], end,
                                      dir / ("r" + std::to_string(i) + "-" + std::to_string(e) + ".json"));
      c.insert(c.end(), extra.begin(), extra.end());
      commands.push_back(std::move(c));
    }
  std::vector<std::array<EndResult, 2>> out(ranges.size());
  parallel_for(commands.size(), jobs, [&](std::size_t k) {
    EndResult& r = out[k / 2][k % 2];
    const Json& end = k % 2 == 0 ? ranges[k / 2].low : ranges[k / 2].high;
    if (end == ranges[k / 2].value) return;  // the point itself: no shift
    try {
      const ChildResult child = run_self(commands[k]);
      if (child.exit_code != 0 && child.out.empty()) {
        r.failure = failure_text(child);
        return;
      }
      const Json out = Json::parse(child.out);
      r.values = extract(out);
      r.approximate = out.contains("engine") && out["engine"].value("approximate", false);
    } catch (const std::exception& e) {
      r.failure = e.what();
    }
  });
  std::error_code ec;
  fs::remove_all(dir, ec);
  return out;
}

std::array<double, 2> interval_of(double point,
                                  const std::vector<std::array<std::optional<double>, 2>>& ends) {
  // Each assumption's largest move down and up, as the logarithm of its ratio to the point; the
  // moves are independent errors, so they combine in quadrature (root sum of squares) on each
  // side, and a positive quantity's low end stays positive. A point of zero (nothing to take a
  // ratio of) combines the shifts themselves so.
  double down = 0, up = 0, below = 0, above = 0;
  bool to_zero = false;
  for (const auto& e : ends) {
    double r_down = 1, r_up = 1, s_down = 0, s_up = 0;
    for (const auto& v : e)
      if (v) {
        const double r = point > 0 ? std::max(0.0, *v / point) : 1;
        r_down = std::min(r_down, r);
        r_up = std::max(r_up, r);
        s_down = std::min(s_down, *v - point);
        s_up = std::max(s_up, *v - point);
      }
    to_zero = to_zero || r_down <= 0;
    if (r_down > 0) down += std::pow(std::log(r_down), 2);
    up += std::pow(std::log(r_up), 2);
    below += s_down * s_down;
    above += s_up * s_up;
  }
  if (point > 0) return {to_zero ? 0.0 : point * std::exp(-std::sqrt(down)), point * std::exp(std::sqrt(up))};
  return {point - std::sqrt(below), point + std::sqrt(above)};
}

Json intervals_json(const std::map<std::string, double>& point, const std::vector<AssumedRange>& ranges,
                    const std::vector<std::array<EndResult, 2>>& ends,
                    const std::vector<std::string>& unranged) {
  Json j{{"method", kIntervalMethod}};
  for (const auto& [q, p] : point) {
    std::vector<std::array<std::optional<double>, 2>> at(ranges.size());
    for (std::size_t i = 0; i < ranges.size(); ++i)
      for (int e = 0; e < 2; ++e) {
        const auto& values = ends[i][std::size_t(e)].values;
        if (auto it = values.find(q); it != values.end()) at[i][std::size_t(e)] = it->second;
      }
    const auto iv = interval_of(p, at);
    j[q] = Json::array({iv[0], iv[1]});
  }
  Json list = Json::array(), approximate = Json::array();
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const auto& r = ranges[i];
    for (int e = 0; e < 2; ++e)
      if (ends[i][std::size_t(e)].approximate)
        approximate.push_back(r.name + (e == 0 ? " at low" : " at high"));
    Json a{{"name", r.name},
           {"kind", r.kind},
           {"value", r.value},
           {"range", Json::array({r.low, r.high})},
           {"range_source", r.source}};
    for (int e = 0; e < 2; ++e) {
      const EndResult& end = ends[i][std::size_t(e)];
      const char* key = e == 0 ? "at_low" : "at_high";
      if (!end.failure.empty())
        a[key] = Json{{"failure", end.failure}};
      else if (end.values.empty())
        a[key] = nullptr;  // the end is the value itself
      else
        a[key] = end.values;
    }
    list.push_back(std::move(a));
  }
  j["assumptions"] = list;
  j["assumed_without_range"] = unranged;
  if (!approximate.empty()) j["approximate_ends"] = approximate;
  return j;
}

}  // namespace tpusim::workflows
