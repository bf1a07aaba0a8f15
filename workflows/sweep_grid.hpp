// The points of a sweep: axes given as `PATH=v1,v2,...` (numbers, strings, JSON values, or
// ranges `a..b` (+1), `a..b:+k` (arithmetic), `a..b:xk` (geometric)), combined as a cartesian
// product of the --grid axes (the first varies slowest) times one axis of the --zip values
// moving together. Pure functions: tested without processes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tpusim::workflows {

using Json = nlohmann::json;

struct Axis {
  std::string path;
  std::vector<Json> values;
};

/// Parses `PATH=v1,v2,...`. Throws ConfigError (naming the option and the text) when malformed.
Axis parse_axis(const std::string& option, const std::string& text);

/// Values of one item: a range expands, anything else is one value.
std::vector<Json> parse_values(const std::string& option, const std::string& text);

/// One point: an assignment per swept path, in axis order.
struct Point {
  std::size_t index = 0;                               ///< position in the full sweep
  std::vector<std::pair<std::string, Json>> settings;  ///< path -> value
  /// A canonical identity, independent of order and formatting: "path=json;path=json".
  std::string key() const;
  /// `--set path=value` arguments for a child run.
  std::vector<std::string> set_arguments() const;
};

/// The most points one sweep enumerates (each point's settings live in memory).
inline constexpr double kMaxSweepPoints = 1e6;

/// Every point of the sweep, in order. The zip axes must all have the same length; a path on
/// two axes, a value twice on one axis or more than kMaxSweepPoints points is bad input.
std::vector<Point> enumerate_points(const std::vector<Axis>& grid, const std::vector<Axis>& zip);

/// Shard `i` of `n` (0 <= i < n): the points whose index is i modulo n.
std::vector<Point> shard_points(const std::vector<Point>& points, int i, int n);

/// Parses "--shard i/n". Throws ConfigError.
std::pair<int, int> parse_shard(const std::string& text);

}  // namespace tpusim::workflows
