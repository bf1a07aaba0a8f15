// The model's own error, as `validate` measures it, added to a prediction interval: an interval
// that only moves assumed hardware figures is not an error bar. The error of a workload family
// (models/model.hpp model_family) is taken from the shipped validation cases' recorded
// predictions of step time (configs/validation/recorded/predictions.json, which
// `validate --check` keeps equal to what the simulator predicts today), predictions proper only:
// a case whose study inferred a value from it never counts.
//
// Method (split conformal, absolute relative residuals): with n exchangeable cases whose largest
// |predicted / measured - 1| is E, a new case's error is at most E with probability n / (n + 1).
// The interval with the model's error is [low / (1 + E), high / (1 - E)] around the assumption
// interval [low, high] (the measured step is predicted / (1 + error)); below three cases it is
// not sized, and the result says so.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "hardware/json_fields.hpp"

namespace tpusim::workflows {

/// A family's validated error on step time.
struct ValidatedError {
  std::string family;
  std::vector<std::string> cases;  ///< the predictions proper it comes from (ids)
  double worst_abs_error = 0;      ///< E: the largest |predicted / measured - 1| among them
  /// The fewest cases that size an interval.
  static constexpr std::size_t kMinCases = 3;
  bool sized() const { return cases.size() >= kMinCases; }
};

/// The validated step-time error of `family`, from the cases in `cases_dir` (default: the
/// configs directory's validation/). A folder without cases or recorded predictions gives none.
ValidatedError validated_error(const std::string& family, const std::filesystem::path& cases_dir = {});

/// run --intervals' "with_model_error": the family, its cases, E, the coverage n / (n + 1) and
/// step_time_s and examples_per_s widened by E around `intervals` (the assumption intervals); or,
/// with too few cases, a note saying so and no interval.
Json with_model_error(const ValidatedError& e, const Json& intervals);

}  // namespace tpusim::workflows
