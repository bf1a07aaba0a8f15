// The model's own error, as `validate` measures it, added to a prediction interval: an interval
// that only moves assumed hardware figures is not an error bar. The error of a workload family
// (models/model.hpp model_family) is taken from the shipped validation cases' recorded
// predictions of step time (configs/validation/recorded/predictions.json, which
// `validate --check` keeps equal to what the simulator predicts today), predictions proper only:
// a case whose study inferred a value from it never counts. A rate (examples/s, MXU utilization)
// counts as the step time it implies.
//
// Method (split conformal, absolute relative residuals; workflows/conformal.hpp): of n
// exchangeable cases' |predicted / measured - 1| the k-th smallest, E, bounds a new case's error
// with probability k / (n + 1). The interval with the model's error is [low / (1 + E), high /
// (1 - E)] around the assumption interval [low, high] (the measured step is predicted / (1 +
// error)). A family of fewer than five cases does not size its own E: it takes every family's
// instead (wider, never narrower), and says so. `validate --intervals` sizes each case's band
// from the other cases only (leave-one-out), so its coverage is measured on cases the band never
// saw.
#pragma once

#include <filesystem>
#include <string>

#include "hardware/json_fields.hpp"
#include "workflows/conformal.hpp"

namespace tpusim::workflows {

/// The validated step-time error of `family`, from the cases in `cases_dir` (default: the
/// configs directory's validation/). A folder without cases or recorded predictions gives none.
ValidatedError validated_error(const std::string& family, const std::filesystem::path& cases_dir = {});

/// run --intervals' "with_model_error": the family, its cases, E, the coverage n / (n + 1) and
/// step_time_s and examples_per_s widened by E around `intervals` (the assumption intervals); or,
/// with too few cases, a note saying so and no interval.
Json with_model_error(const ValidatedError& e, const Json& intervals);

}  // namespace tpusim::workflows
