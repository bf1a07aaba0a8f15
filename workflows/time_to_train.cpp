#include "workflows/time_to_train.hpp"

#include <cmath>

namespace tpusim {

namespace {

constexpr double kSecondsPerDay = 86400;

/// Steps to the target: as given, or its examples or tokens over what one step takes, rounded up.
double steps_to(const Study& study) {
  const double examples = double(study.global_batch());
  if (study.target.unit == "steps") return std::ceil(study.target.amount);
  if (study.target.unit == "examples") return std::ceil(study.target.amount / examples);
  return std::ceil(study.target.amount / (examples * double(study.model.tokens_per_example)));
}

}  // namespace

void add_time_to_train(const Study& study, Json& result) {
  if (study.target.unit.empty()) return;
  const double steps = steps_to(study), step_s = result.at("step_time_s").get<double>();
  const double days = steps * step_s / kSecondsPerDay;
  Json t{{"target", {{study.target.unit, study.target.amount}}},
         {"steps", steps},
         {"days", days},
         {"examples_per_step", double(study.global_batch())},
         {"goodput", 1.0}};
  if (study.model.tokens_per_example > 0)
    t["tokens_per_s"] = double(study.global_batch()) * double(study.model.tokens_per_example) / step_s;
  const Json* interval = result.contains("intervals") && result["intervals"].contains("step_time_s")
                             ? &result["intervals"]["step_time_s"]
                             : nullptr;
  if (interval)
    t["days_interval"] = {steps * (*interval)[0].get<double>() / kSecondsPerDay,
                          steps * (*interval)[1].get<double>() / kSecondsPerDay};
  result["time_to_train"] = t;
  if (!(study.price_per_chip_hour > 0)) return;
  const double chips = double(study.slice.chips()) * double(study.slices), price = study.price_per_chip_hour;
  Json c{{"chips", chips},
         {"price_per_chip_hour", price},
         {"chip_hours", chips * days * 24},
         {"usd", chips * days * 24 * price}};
  if (interval)
    c["usd_interval"] = {t["days_interval"][0].get<double>() * 24 * chips * price,
                         t["days_interval"][1].get<double>() * 24 * chips * price};
  result["cost"] = c;
}

}  // namespace tpusim
