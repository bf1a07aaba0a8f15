// Prediction intervals: how far a prediction moves over the plausible ranges of what it assumes.
// Every assumed hardware figure may give a "range" (with a "range_source"), and a study may list
// its own unpublished values with ranges ("assumptions"). The interval is found one assumption at
// a time: each is moved to each end of its range with the others at their values (a child run
// each, 2 per assumption), and each assumption's largest moves down and up are taken as
// log-ratios to the point, combined as independent errors in quadrature: low = point x
// exp(-sqrt(sum of squared downward log-ratios)), high likewise upwards. (Every assumption at its
// worst at once, the method before, multiplied the ratios: honest by being vague, 101 % wide on
// average over seven held-out cases; summed shifts, before that, went below zero.)
// Corners would take 2^n runs (n is 15 or more) and sampling a distribution nobody published;
// quadrature assumes the assumptions' errors independent (none cancels or amplifies another) and
// each range a comparable bound on its own.
#pragma once

#include <array>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hardware/json_fields.hpp"

namespace tpusim {
struct Study;
}

namespace tpusim::workflows {

/// One assumption a prediction leans on, with the range it is plausible over.
struct AssumedRange {
  std::string name;  ///< the hardware figure's dotted path, or the study key
  std::string kind;  ///< "hardware" or "study"
  Json value, low, high;
  std::string source;  ///< where the range comes from
};

/// The study's ranged assumptions: its hardware's figures with a range (a figure the study
/// overrides has none), then the study's own. `unranged` (if given) receives the hardware
/// figures whose source is an assumption but that give no range: they move nothing.
std::vector<AssumedRange> assumed_ranges(const Study& study, std::vector<std::string>* unranged = nullptr);

/// The extra `tpusim` arguments that run the study with `r` at `end`: `--set hardware=FILE` (a
/// copy of the study's hardware with the figure changed, written under `dir`) or `--set key=end`.
std::vector<std::string> variant_args(const Study& study, const AssumedRange& r, const Json& end,
                                      const std::filesystem::path& file);

/// What one child at one end of one range gave: a value per quantity, or why it gave none.
struct EndResult {
  std::map<std::string, double> values;
  std::string failure;
  /// Its step was simulated with contention between collectives sharing links left out
  /// (engine.approximate in the child's result).
  bool approximate = false;
};

/// Quantities of a child's JSON output (those it lacks are left out).
using QuantityExtractor = std::function<std::map<std::string, double>(const Json& output)>;

/// Runs `args` plus each range's variant at its low and high end, `jobs` children at once.
std::vector<std::array<EndResult, 2>> run_variants(const std::vector<std::string>& args, const Study& study,
                                                   const std::vector<AssumedRange>& ranges, int jobs,
                                                   const QuantityExtractor& extract);

/// [low, high] of a quantity from its point value and its value at each end of each range (a
/// missing end moves nothing): the ratios to the point multiplied (the shifts summed by sign when
/// the point is not positive). Always contains the point; a positive point gives a low end >= 0.
std::array<double, 2> interval_of(double point,
                                  const std::vector<std::array<std::optional<double>, 2>>& ends);

/// The result's "intervals": the method, [low, high] per quantity of `point`, and per assumption
/// its range, source and the value of every quantity at each end (or why there is none).
Json intervals_json(const std::map<std::string, double>& point, const std::vector<AssumedRange>& ranges,
                    const std::vector<std::array<EndResult, 2>>& ends,
                    const std::vector<std::string>& unranged);

/// The method in one sentence (README, reports).
extern const char* const kIntervalMethod;

}  // namespace tpusim::workflows
