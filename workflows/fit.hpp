// `tpusim fit`: the largest value of a numeric study field for which the step still fits in
// HBM, found by probing (exponential search up when no maximum is given, then bisection on the
// grid min + k * step, then three check probes on each side of the boundary to catch fitting
// that is not monotonic). Probes run in child processes; the search itself is a pure function of
// a probe callback, tested on its own.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "workflows/plan.hpp"

namespace tpusim::workflows {

/// What one probe found.
struct Probe {
  double value = 0;
  bool fits = false;
  std::string error;      ///< non-empty when the study is invalid or failed at this value
  nlohmann::json result;  ///< the run's result.json (null on error)
};

struct FitSearch {
  double min = 1;
  std::optional<double> max;  ///< absent: search upwards from `start` by doubling
  double step = 1;
  double start = 1;    ///< where the upward search begins (the field's current value)
  double limit = 1e9;  ///< never probe beyond this when searching upwards
};

struct FitOutcome {
  std::optional<double> max_fitting;  ///< none when even the minimum does not fit
  std::vector<Probe> probes;          ///< in the order they ran
  bool monotonic = true;              ///< false if a larger probed value fit where a smaller did not
};

/// A probe that could not answer (its simulation failed, it crashed or was killed): an error
/// of the search, never counted as "does not fit".
class ProbeFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A number as a command-line value that reads back exactly: an integer without a fraction,
/// anything else with 17 significant digits.
std::string value_text(double v);

/// Runs the search. `probe` evaluates one value (and may throw ProbeFailed, which ends the search).
FitOutcome fit_search(const FitSearch& search, const std::function<Probe(double)>& probe);

/// Exit code of `tpusim fit` when a probe failed (distinct from 0: answered, even "nothing fits").
constexpr int kFitProbeFailed = 3;

struct FitOptions {
  std::string study;              ///< the study file
  std::string path;               ///< --maximize: the dotted path of a numeric field
  std::vector<std::string> sets;  ///< --set overrides
  std::optional<double> min, max, step;
  /// > 0: a probe still running after that long is killed (a failed probe).
  double probe_timeout_s = 0;
  /// The answer's spread over the ranges of the study's assumptions (workflows/intervals.hpp), a
  /// search per end of each range, `jobs` at once.
  bool intervals = false;
  int jobs = 0;
  /// Each probe a `tpusim plan` search instead of one run: the largest value some plan runs in
  /// HBM (the probe's result is that plan's run, "plan" its label).
  PlanPerPoint plan;
  /// Each probe as it ends, for a front end to show: its value and its verdict in words. Empty:
  /// nothing is shown.
  std::function<void(const std::string& value, const std::string& verdict)> probe_done;
};

/// What a fit gave: the grid searched, the probes and the answer, the spread with `intervals`,
/// or why a probe failed (then no answer: `failure` non-empty).
struct FitResult {
  FitSearch search;
  FitOutcome outcome;
  nlohmann::json intervals;  ///< null without --intervals or an answer
  std::string failure;
};

/// Runs the search, each probe in a child process (progress through the options). Throws ConfigError for
/// bad input (the field, the grid, a study invalid at --min).
FitResult fit_study(const FitOptions& options);
/// `tpusim fit --json`'s output.
nlohmann::json fit_json(const FitOptions& options, const FitResult& result);
/// `tpusim fit`'s table: every probe, the answer, and a warning when fitting is not monotonic.
std::string fit_text(const FitOptions& options, const FitResult& result);

}  // namespace tpusim::workflows
