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

/// The case's error on step time, when it predicts one: step_time_s directly, examples/s turned
/// into the step's (the step is batch / throughput).
std::optional<double> step_time_error(const ValidationCase& c, const Json& predicted) {
  if (!predicted.is_number() || c.measured <= 0 || c.baseline_sets) return std::nullopt;
  const double e = predicted.get<double>() / c.measured - 1.0;
  if (c.quantity == "step_time_s") return e;
  if (c.quantity == "examples_per_s" && e > -1.0) return 1.0 / (1.0 + e) - 1.0;
  return std::nullopt;
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
  ValidatedError out;
  out.family = family;
  const fs::path dir = cases_dir.empty() ? config_dir() / "validation" : cases_dir;
  if (!fs::is_directory(dir)) return out;
  const Json recorded = recorded_predictions(dir);
  for (const ValidationCase& c : load_validation_cases(dir, {})) {
    const auto e = step_time_error(c, recorded.value(c.id, Json()));
    if (!e || family_of_prediction(c) != family) continue;
    out.cases.push_back(c.id);
    out.worst_abs_error = std::max(out.worst_abs_error, std::fabs(*e));
  }
  return out;
}

Json with_model_error(const ValidatedError& e, const Json& intervals) {
  const double n = double(e.cases.size());
  Json j{{"family", e.family}, {"cases", e.cases}};
  if (!e.sized()) {
    j["note"] = "too few validated predictions of " + e.family + " (" + std::to_string(e.cases.size()) +
                " step-time cases; at least " + std::to_string(ValidatedError::kMinCases) +
                ") to size the model's error: the interval above moves assumed figures only";
    return j;
  }
  const double worst = e.worst_abs_error;
  j["worst_abs_error"] = worst;
  j["coverage"] = n / (n + 1.0);
  j["method"] =
      "split conformal on the validated step-time errors of the family's predictions proper (in-sample "
      "cases left out): a new case's |predicted / measured - 1| is at most the largest of n with "
      "probability n / (n + 1); the step is the assumption interval divided by (1 + E) below and "
      "(1 - E) above";
  const auto& step = intervals.at("step_time_s");
  const double low = step[0].get<double>() / (1.0 + worst);
  const Json high = worst < 1.0 ? Json(step[1].get<double>() / (1.0 - worst)) : Json(nullptr);
  j["step_time_s"] = Json::array({low, high});
  if (intervals.contains("examples_per_s")) {
    const auto& rate = intervals.at("examples_per_s");
    j["examples_per_s"] = Json::array({worst < 1.0 ? Json(rate[0].get<double>() * (1.0 - worst)) : Json(0.0),
                                       Json(rate[1].get<double>() * (1.0 + worst))});
  }
  return j;
}

}  // namespace tpusim::workflows
