#include "workflows/time_to_train.hpp"

#include <cmath>
#include <limits>

#include "hardware/topology.hpp"

namespace tpusim {

namespace {

constexpr double kSecondsPerDay = 86400;
using Figure = Study::TrainingRun::Figure;

/// Steps to the target: as given, or its examples or tokens over what one step takes, rounded up.
double steps_to(const Study& study) {
  const double examples = double(study.global_batch());
  if (study.target.unit == "steps") return std::ceil(study.target.amount);
  if (study.target.unit == "examples") return std::ceil(study.target.amount / examples);
  return std::ceil(study.target.amount / (examples * double(study.model.tokens_per_example)));
}

/// Which value of each figure: the point, or the end that makes the run lose most or least.
enum class End { Point, Worst, Best };
double at(const Figure& f, End end, bool higher_is_worse) {
  if (end == End::Point) return f.value;
  return (end == End::Worst) == higher_is_worse ? f.high : f.low;
}

struct Goodput {
  double value = 1, checkpoint_s = 0, every_steps = 0, young_steps = 0, mtbf_s = 0, bytes_per_host = 0;
};

/// The hosts of every slice, over which a checkpoint spreads the model's state.
double hosts(const Study& s) { return double(hosts_of_slice(s.slice, s.hardware.chip)) * double(s.slices); }

/// Young's first-order model: per second of training, a checkpoint's write every interval tau
/// (delta / tau) and, per interruption (one every MTBF), half an interval's work lost, the
/// restore and the restart ((tau / 2 + R) / MTBF); tau by default Young's optimum sqrt(2 delta
/// MTBF), in whole steps, and at most the run's `steps` (a run shorter than an interval loses at
/// most itself); an evaluation's forward passes besides.
Goodput goodput(const Study& s, double steps, double step_s, double forward_s, End end) {
  const auto& run = s.training_run;
  Goodput g;
  const double chips = double(s.slice.chips()) * double(s.slices), h = hosts(s);
  const double per_hour =
      chips * at(run.failures_per_chip_hour, end, true) + h * at(run.failures_per_host_hour, end, true);
  g.bytes_per_host = s.state_bytes() / h;
  g.checkpoint_s = g.bytes_per_host / at(run.write_bytes_per_s, end, false);
  const double recover =
      g.bytes_per_host / at(run.read_bytes_per_s, end, false) + at(run.restart_s, end, true);
  g.mtbf_s = per_hour > 0 ? 3600 / per_hour : std::numeric_limits<double>::infinity();
  g.young_steps = std::isfinite(g.mtbf_s)
                      ? std::max(1.0, std::round(std::sqrt(2 * g.checkpoint_s * g.mtbf_s) / step_s))
                      : 0;
  g.every_steps =
      std::min(steps, run.checkpoint_every_steps > 0 ? double(run.checkpoint_every_steps) : g.young_steps);
  double overhead = 0;
  if (g.every_steps > 0) {
    const double tau = g.every_steps * step_s;
    overhead += g.checkpoint_s / tau + (std::isfinite(g.mtbf_s) ? (tau / 2 + recover) / g.mtbf_s : 0.0);
  }
  if (run.evaluation_every_steps > 0)
    overhead += double(run.evaluation_steps) * forward_s / (double(run.evaluation_every_steps) * step_s);
  g.value = 1 / (1 + overhead);
  return g;
}

double forward_seconds(const Json& result) {
  const Json& c = result.at("breakdown").at("compute_s");
  return c.contains("forward") ? c["forward"].get<double>() : 0.0;
}

}  // namespace

void add_time_to_train(const Study& study, Json& result) {
  if (study.target.unit.empty()) return;
  const double steps = steps_to(study), step_s = result.at("step_time_s").get<double>();
  const double days = steps * step_s / kSecondsPerDay, forward = forward_seconds(result);
  const Goodput g = goodput(study, steps, step_s, forward, End::Point);
  Json t{{"target", {{study.target.unit, study.target.amount}}},
         {"steps", steps},
         {"days", days},
         {"examples_per_step", double(study.global_batch())},
         {"goodput", g.value},
         {"days_with_goodput", days / g.value},
         {"checkpoint",
          {{"bytes_per_host", g.bytes_per_host},
           {"seconds", g.checkpoint_s},
           {"every_steps", g.every_steps > 0 ? Json(g.every_steps) : Json(nullptr)},
           {"young_optimal_every_steps", g.young_steps > 0 ? Json(g.young_steps) : Json(nullptr)}}},
         {"interruptions",
          {{"mtbf_hours", std::isfinite(g.mtbf_s) ? Json(g.mtbf_s / 3600) : Json(nullptr)},
           {"expected", std::isfinite(g.mtbf_s) ? days / g.value * kSecondsPerDay / g.mtbf_s : 0.0}}}};
  if (study.model.tokens_per_example > 0)
    t["tokens_per_s"] = double(study.global_batch()) * double(study.model.tokens_per_example) / step_s;
  const Json* interval = result.contains("intervals") && result["intervals"].contains("step_time_s")
                             ? &result["intervals"]["step_time_s"]
                             : nullptr;
  const double lo = interval ? steps * (*interval)[0].get<double>() / kSecondsPerDay : days;
  const double hi = interval ? steps * (*interval)[1].get<double>() / kSecondsPerDay : days;
  if (interval) t["days_interval"] = {lo, hi};
  // The run's figures at the ends of their ranges together: the interval of what it loses.
  const double best = goodput(study, steps, step_s, forward, End::Best).value;
  const double worst = goodput(study, steps, step_s, forward, End::Worst).value;
  t["goodput_interval"] = {worst, best};
  t["days_with_goodput_interval"] = {lo / best, hi / worst};
  result["time_to_train"] = t;
  if (!(study.price_per_chip_hour > 0)) return;
  const double chips = double(study.slice.chips()) * double(study.slices), price = study.price_per_chip_hour;
  const double per_day = chips * 24 * price;
  Json c{{"chips", chips},
         {"price_per_chip_hour", price},
         {"chip_hours", chips * days * 24},
         {"usd", days * per_day},
         {"usd_with_goodput", days / g.value * per_day},
         {"usd_with_goodput_interval", {lo / best * per_day, hi / worst * per_day}}};
  if (interval) c["usd_interval"] = {lo * per_day, hi * per_day};
  result["cost"] = c;
}

}  // namespace tpusim
