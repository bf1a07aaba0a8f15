// The statistics of the model's error, apart from where the residuals come from: a validated
// step-time residual per prediction proper, the family's error E that sizes a band (split
// conformal: of n residuals the k-th smallest, k = ceil(0.8 (n + 1)) but at most n, bounds a new
// case's with probability k / (n + 1)), the leave-one-out variant `validate --intervals` tests
// itself with, and an interval widened by E. A family of fewer than five residuals does not size
// its own E: it takes every family's.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "hardware/json_fields.hpp"

namespace tpusim::workflows {

/// A family's validated error on step time, as split conformal sizes it: of the n residuals it
/// comes from, the k-th smallest |error|, k = ceil((n + 1) x kTargetCoverage) but at most n, bounds
/// a new case's with probability k / (n + 1).
struct ValidatedError {
  std::string family;
  std::vector<std::string> cases;  ///< the family's predictions proper it comes from (ids)
  double error_bound = 0;          ///< E: the k-th smallest |predicted / measured - 1|
  std::size_t rank = 0;            ///< k
  /// Too few cases of its own: E is every family's (`all_cases` of them).
  bool widened = false;
  std::size_t all_cases = 0;
  /// The fewest cases that size a family's own error, and an interval at all; the coverage sought.
  static constexpr std::size_t kMinCases = 5, kMinAllCases = 3;
  static constexpr double kTargetCoverage = 0.8;
  std::size_t n() const { return widened ? all_cases : cases.size(); }
  bool sized() const { return n() >= kMinAllCases; }
  double coverage() const { return double(rank) / double(n() + 1); }
};

/// The relative error of the step time a prediction implies: a step time's own; a rate
/// (examples_per_s, mxu_utilization: the step's inverse) turned into the step's. None otherwise.
std::optional<double> step_error(const std::string& quantity, double measured, double predicted);

/// How validate's leave-one-out bands are made (its report's intervals.bands.method).
extern const char* const kBandMethod;

/// One validated step-time residual of a prediction proper.
struct Residual {
  std::string id, family;
  double error = 0;
};

/// The model error that sizes `id`'s band, from the other residuals only: the bound of its
/// family's others, or, when the family (with `id`) has fewer than ValidatedError::kMinCases,
/// of every other. `id` empty (a new case): every residual counts.
ValidatedError leave_one_out(const std::vector<Residual>& residuals, const std::string& id,
                             const std::string& family);

/// `interval` of `quantity` widened by a model error `e` on the step: a step time divided by
/// (1 + e) below and (1 - e) above, a rate multiplied by (1 - e) and (1 + e); null where e >= 1
/// leaves no bound.
std::array<Json, 2> widened_interval(const std::string& quantity, const std::array<double, 2>& interval,
                                     double e);

}  // namespace tpusim::workflows
