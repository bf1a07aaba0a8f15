#include "workflows/sweep_grid.hpp"

#include <cmath>
#include <map>
#include <set>

#include "hardware/errors.hpp"

namespace tpusim::workflows {

namespace {

bool parse_number(const std::string& s, double& out) {
  try {
    std::size_t used = 0;
    out = std::stod(s, &used);
    return used == s.size() && std::isfinite(out);
  } catch (...) {
    return false;
  }
}

Json number_json(double v) {
  if (v == std::floor(v) && std::fabs(v) < 9e15) return Json(std::int64_t(v));
  return Json(v);
}

std::vector<std::string> split_top_level(const std::string& text) {
  // Commas inside brackets or braces belong to a JSON value.
  std::vector<std::string> items;
  std::string current;
  int depth = 0;
  bool in_string = false;
  for (char c : text) {
    if (c == '"') in_string = !in_string;
    if (!in_string && (c == '[' || c == '{')) ++depth;
    if (!in_string && (c == ']' || c == '}')) --depth;
    if (c == ',' && depth == 0 && !in_string) {
      items.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  items.push_back(current);
  return items;
}

}  // namespace

std::vector<Json> parse_values(const std::string& option, const std::string& text) {
  const auto dots = text.find("..");
  if (dots != std::string::npos && text.find_first_of("[{\"") == std::string::npos) {
    const std::string expected = "a range a..b, a..b:+k or a..b:xk with numbers (e.g. 1..32:x2)";
    const auto colon = text.find(':', dots);
    double a = 0, b = 0, k = 1;
    const bool ok_a = parse_number(text.substr(0, dots), a);
    const bool ok_b = parse_number(
        text.substr(dots + 2, colon == std::string::npos ? std::string::npos : colon - dots - 2), b);
    char mode = '+';
    bool ok_k = true;
    if (colon != std::string::npos) {
      const std::string step = text.substr(colon + 1);
      mode = step.empty() ? '?' : step[0];
      ok_k = (mode == '+' || mode == 'x') && parse_number(step.substr(1), k);
    }
    if (!ok_a || !ok_b || !ok_k || b < a || (mode == '+' && k <= 0) || (mode == 'x' && (k <= 1 || a <= 0))) {
      throw ConfigError(option, "", "\"" + text + "\"", expected);
    }
    std::vector<Json> values;
    for (double v = a; v <= b * (1 + 1e-12); v = mode == '+' ? v + k : v * k) {
      values.push_back(number_json(v));
      if (values.size() > 100000)
        throw ConfigError(option, "", "\"" + text + "\"", "a range of at most 100000 values");
    }
    return values;
  }
  if (text.empty())
    throw ConfigError(option, "", "an empty value", "a value (number, string, JSON) or a range");
  try {
    return {Json::parse(text)};
  } catch (const Json::parse_error&) {
    return {Json(text)};
  }
}

Axis parse_axis(const std::string& option, const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    throw ConfigError(option, "", "\"" + text + "\"",
                      "PATH=v1,v2,... (e.g. schedule.stages=1,2,4,8 or schedule.microbatches=1..32:x2)");
  }
  Axis axis;
  axis.path = text.substr(0, eq);
  std::string values = text.substr(eq + 1);
  if (values.front() == '[' && values.back() == ']') {
    // A JSON array lists the values themselves.
    try {
      for (const auto& v : Json::parse(values)) axis.values.push_back(v);
      return axis;
    } catch (const Json::parse_error&) {
      // not an array of values after all: fall through to comma splitting
    }
  }
  for (const auto& item : split_top_level(values)) {
    for (auto& v : parse_values(option, item)) axis.values.push_back(std::move(v));
  }
  return axis;
}

std::string Point::key() const {
  std::map<std::string, std::string> sorted;
  for (const auto& [path, value] : settings) sorted[path] = value.dump();
  std::string key;
  for (const auto& [path, value] : sorted) key += (key.empty() ? "" : ";") + path + "=" + value;
  return key;
}

std::vector<std::string> Point::set_arguments() const {
  std::vector<std::string> args;
  for (const auto& [path, value] : settings) {
    args.push_back("--set");
    args.push_back(path + "=" + (value.is_string() ? value.get<std::string>() : value.dump()));
  }
  return args;
}

namespace {

/// The --zip axes' values, position by position, must differ somewhere: two equal positions
/// would be one point twice (one key, one result).
void check_zip_tuples(const std::vector<Axis>& zip, std::size_t length) {
  std::set<std::string> seen;
  for (std::size_t i = 0; i < length; ++i) {
    std::string tuple;
    for (const auto& z : zip) tuple += z.path + "=" + z.values[i].dump() + ";";
    if (!seen.insert(tuple).second)
      throw ConfigError("--zip", zip.front().path,
                        "position " + std::to_string(i + 1) + " (" + tuple + ") twice",
                        "each combination of the --zip values once");
  }
}

}  // namespace

std::vector<Point> enumerate_points(const std::vector<Axis>& grid, const std::vector<Axis>& zip) {
  std::vector<Axis> axes = grid;
  // A path swept twice, or a value listed twice on one axis, would give two points one key
  // (and silently one result); a grid beyond kMaxSweepPoints would not fit in memory.
  std::set<std::string> paths;
  double count = 1;
  for (const auto* list : {&grid, &zip})
    for (const auto& a : *list) {
      const std::string option = list == &grid ? "--grid" : "--zip";
      if (!paths.insert(a.path).second)
        throw ConfigError(option, a.path, "a path swept twice",
                          "each path on one axis only (list all its values there)");
      // A --zip axis may repeat a value (tpu-v4 with two slices): its points differ by the others.
      std::set<std::string> values;
      for (const auto& v : a.values)
        if (list == &grid && !values.insert(v.dump()).second)
          throw ConfigError(option, a.path, v.dump() + " twice", "each value once on an axis");
      if (list == &grid) count *= double(a.values.size());
    }
  if (!zip.empty()) count *= double(zip.front().values.size());
  if (count > kMaxSweepPoints)
    throw ConfigError("--grid", "", Json(count).dump() + " points",
                      "at most " + std::to_string(std::int64_t(kMaxSweepPoints)) +
                          " points in one sweep (split it with --shard or fewer values)");
  std::size_t zip_len = 0;
  for (const auto& z : zip) {
    if (zip_len != 0 && z.values.size() != zip_len) {
      throw ConfigError("--zip", z.path, std::to_string(z.values.size()) + " values",
                        std::to_string(zip_len) + " values, like the other --zip axes (they move together)");
    }
    zip_len = z.values.size();
  }
  std::vector<Point> points(1);
  for (const auto& axis : axes) {
    std::vector<Point> next;
    for (const auto& p : points)
      for (const auto& v : axis.values) {
        Point q = p;
        q.settings.emplace_back(axis.path, v);
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  if (!zip.empty()) {
    check_zip_tuples(zip, zip_len);
    std::vector<Point> next;
    for (const auto& p : points)
      for (std::size_t i = 0; i < zip_len; ++i) {
        Point q = p;
        for (const auto& z : zip) q.settings.emplace_back(z.path, z.values[i]);
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  if (grid.empty() && zip.empty()) points.clear();
  for (std::size_t i = 0; i < points.size(); ++i) points[i].index = i;
  return points;
}

std::vector<Point> shard_points(const std::vector<Point>& points, int i, int n) {
  std::vector<Point> out;
  for (const auto& p : points)
    if (int(p.index % std::size_t(n)) == i) out.push_back(p);
  return out;
}

std::pair<int, int> parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  double i = 0, n = 0;
  if (slash == std::string::npos || !parse_number(text.substr(0, slash), i) ||
      !parse_number(text.substr(slash + 1), n) || n < 1 || i < 0 || i >= n || i != std::floor(i) ||
      n != std::floor(n)) {
    throw ConfigError("--shard", "", "\"" + text + "\"", "i/n with 0 <= i < n (e.g. 0/3, 1/3, 2/3)");
  }
  return {int(i), int(n)};
}

}  // namespace tpusim::workflows
