#include "workflows/model_error.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "hardware/errors.hpp"
#include "hardware/hardware_spec.hpp"
#include "schedules/study.hpp"
#include "workflows/validate.hpp"

namespace fs = std::filesystem;

namespace tpusim::workflows {

namespace {

/// The case's error on step time, when it predicts one (a ratio to a baseline does not).
std::optional<double> case_step_error(const ValidationCase& c, const Json& predicted) {
  if (!predicted.is_number() || c.baseline_sets) return std::nullopt;
  return step_error(c.quantity, c.measured, predicted.get<double>());
}

/// The family of the case's study, when it is a prediction proper (no study value inferred from
/// it); none otherwise or when the study no longer loads.
std::optional<std::string> family_of_prediction(const ValidationCase& c) {
  try {
    const Study study = load_study(c.study, c.sets);
    for (const auto& a : study.assumptions)
      if (std::find(a.inferred_from.begin(), a.inferred_from.end(), c.id) != a.inferred_from.end())
        return std::nullopt;
    return model_family(study.model.kind);
  } catch (const ConfigError&) {
    return std::nullopt;
  }
}

}  // namespace

ValidatedError validated_error(const std::string& family, const fs::path& cases_dir) {
  const fs::path dir = cases_dir.empty() ? config_dir() / "validation" : cases_dir;
  std::vector<Residual> residuals;
  if (fs::is_directory(dir)) {
    const Json recorded = recorded_predictions(dir);
    for (const ValidationCase& c : load_validation_cases(dir, {})) {
      const auto e = case_step_error(c, recorded.value(c.id, Json()));
      const auto f = e ? family_of_prediction(c) : std::nullopt;
      if (f) residuals.push_back(Residual{c.id, *f, *e});
    }
  }
  return leave_one_out(residuals, "", family);
}

Json with_model_error(const ValidatedError& e, const Json& intervals) {
  Json j{{"family", e.family}, {"cases", e.cases}};
  if (!e.sized()) {
    j["note"] = "too few validated predictions (" + std::to_string(e.all_cases) +
                " step-time cases of every family; at least " + std::to_string(ValidatedError::kMinAllCases) +
                ") to size the model's error: the interval above moves assumed figures only";
    return j;
  }
  const double bound = e.error_bound;
  j["error_bound"] = bound;
  j["rank"] = e.rank;
  j["of_cases"] = e.n();
  j["coverage"] = e.coverage();
  if (e.widened)
    j["note"] = "only " + std::to_string(e.cases.size()) + " validated step-time predictions of " + e.family +
                " (fewer than " + std::to_string(ValidatedError::kMinCases) +
                "): the model's error is sized on every family's " + std::to_string(e.all_cases) + " instead";
  j["method"] =
      "split conformal on the validated step-time errors of the family's predictions proper (in-sample cases "
      "left out; a family of fewer than 5 takes every family's): of n errors the k-th smallest, k = "
      "ceil(0.8 (n + 1)) but at most n, bounds a new case's |predicted / measured - 1| with probability k / "
      "(n + 1); the step is the assumption interval divided by (1 + E) below and (1 - E) above";
  const auto& step = intervals.at("step_time_s");
  const std::array<double, 2> s{step[0].get<double>(), step[1].get<double>()};
  const auto w = widened_interval("step_time_s", s, bound);
  j["step_time_s"] = Json::array({w[0], w[1]});
  if (intervals.contains("examples_per_s")) {
    const auto& rate = intervals.at("examples_per_s");
    const auto r = widened_interval("examples_per_s", {rate[0].get<double>(), rate[1].get<double>()}, bound);
    j["examples_per_s"] = Json::array({r[0], r[1]});
  }
  return j;
}

}  // namespace tpusim::workflows
