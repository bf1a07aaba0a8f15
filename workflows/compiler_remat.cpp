#include "workflows/compiler_remat.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "hardware/errors.hpp"
#include "schedules/study.hpp"
#include "workflows/child_process.hpp"

namespace tpusim::workflows {

std::vector<Json> stronger_remat_policies(const Json& policy, bool recomputes_layers) {
  std::vector<Json> ladder = {Json(false), Json("save_dots")};
  if (recomputes_layers) ladder.push_back(Json(true));
  const auto at = std::find(ladder.begin(), ladder.end(), policy);
  if (at == ladder.end()) return {};
  return std::vector<Json>(at + 1, ladder.end());
}

namespace {

/// The study run again under `policy`, the compiler's own re-materialization off (it is what is
/// being modelled): its result, or a message saying why it gave none.
Json run_with_policy(const RerunnableStudy& rerun, const Json& policy, const std::string& out, bool trace) {
  std::vector<std::string> args = rerun.run_args({"schedule.remat=" + policy.dump(), "compiler_remat=false"});
  if (!out.empty()) args.insert(args.end(), {"--out", out});
  if (trace) args.push_back("--trace");
  const ChildResult child = run_self(args);
  if (child.out.empty()) return Json{{"failure", failure_text(child)}};
  return Json::parse(child.out);
}

/// Whether the step's overflow is its resident state (weights, optimizer slots): no recompute
/// reduces that.
bool resident_state_over(const Json& result) {
  for (const char* key : {"overflow", "worst_overflow"}) {
    const Json& o = result.value(key, Json());
    if (o.is_object() && o.value("task", "") == "resident state") return true;
  }
  return false;
}

/// The share of the layers the stronger policy must cover for the step to fit: the overflow
/// over what it saves on every layer (layers alike: what it saves grows with the layers it covers).
double share_needed(const Json& naive, const Json& fitted) {
  const double p0 = naive["peak_hbm_bytes"].get<double>(), p1 = fitted["peak_hbm_bytes"].get<double>();
  const double usable = naive["hbm_capacity_bytes"].get<double>();
  return p0 > p1 ? std::clamp((p0 - usable) / (p0 - p1), 0.0, 1.0) : 1.0;
}

/// What the compiler's re-materialization did to a step that fits with it, and the result made
/// the compiler's: it recomputes only as much as it must, so the step's time (and what follows
/// from it) is the naive step's plus that share of the whole model's recompute.
Json refitted(const Json& from, const Json& policy, const Json& naive, Json fitted) {
  const double share = share_needed(naive, fitted);
  const double t0 = naive["step_time_s"].get<double>(), t1 = fitted["step_time_s"].get<double>();
  const double h0 = naive["hardware_flops_per_step"].get<double>(),
               h1 = fitted["hardware_flops_per_step"].get<double>();
  const double step = t0 + share * (t1 - t0), flops = h0 + share * (h1 - h0);
  // The mixed program's own peak: the naive peak less that share of what the policy saves on
  // every layer (HBM's usable size, when a share of the layers is enough).
  const double p0 = naive["peak_hbm_bytes"].get<double>(), p1 = fitted["peak_hbm_bytes"].get<double>();
  const double peak = p0 - share * (p0 - p1);
  const Json cost = {
      {"fits", true},
      {"policy", policy},
      {"naive_policy", from},
      {"share_of_layers_needed", share},
      {"seconds_added", step - t0},
      {"naive_step_time_s", t0},
      {"naive_peak_hbm_bytes", p0},
      {"peak_hbm_bytes", peak},
      {"every_layer", {{"step_time_s", t1}, {"peak_hbm_bytes", p1}, {"bytes_saved", p0 - p1}}},
      {"method",
       "XLA re-materializes until the program fits: the study's policy raised one step (none, save_dots, "
       "full) "
       "until the step fits on every layer, then the share of layers that policy must cover (the overflow "
       "over what it saves on every layer). step_time_s, examples_per_s, the utilizations and "
       "hardware_flops_per_step are the naive step's plus that share of the recompute, peak_hbm_bytes "
       "(and compiler_remat.peak_hbm_bytes) the naive peak less that share of what it saves; the "
       "breakdown, the cores' figures, the timeline and memory charts are the run with every layer "
       "re-materialized (its peak compiler_remat.every_layer.peak_hbm_bytes)"}};
  fitted["examples_per_s"] = fitted["examples_per_s"].get<double>() * t1 / step;
  fitted["mxu_utilization"] = fitted["mxu_utilization"].get<double>() * t1 / step;
  fitted["hardware_flops_utilization"] =
      fitted["hardware_flops_utilization"].get<double>() * (h1 > 0 ? flops / h1 : 1.0) * t1 / step;
  fitted["hardware_flops_per_step"] = flops;
  fitted["step_time_s"] = step;
  fitted["peak_hbm_bytes"] = peak;
  fitted["compiler_remat"] = cost;
  return fitted;
}

}  // namespace

std::optional<Json> compiler_rematerialized(const Study& study, const RerunnableStudy& rerun,
                                            const Json& naive, const std::string& out, bool trace) {
  if (!study.compiler_remat || naive.value("fits", true) || resident_state_over(naive)) return std::nullopt;
  const Json schedule = study.schedule->resolved();
  if (!schedule.is_object() || !schedule.contains("remat")) return std::nullopt;
  std::vector<Json> tried;
  const bool layers = study.hardware.core.compiler_remat_recomputes_layers;
  for (const Json& policy : stronger_remat_policies(schedule["remat"], layers)) {
    tried.push_back(policy);
    spdlog::info(
        "the step is over HBM: simulating it again with remat {} (the compiler's re-materialization)",
        policy.dump());
    Json fitted = run_with_policy(rerun, policy, out, trace);
    if (fitted.contains("failure")) {
      spdlog::warn("remat {} could not be simulated: {}", policy.dump(),
                   fitted["failure"].get<std::string>());
      break;
    }
    if (!fitted.value("fits", false)) continue;
    return refitted(schedule["remat"], policy, naive, std::move(fitted));
  }
  Json answer = naive;
  answer["compiler_remat"] =
      Json{{"fits", false},
           {"tried", tried},
           {"method", std::string("the study's policy raised one step (none, save_dots") +
                          (layers ? ", full) at a time"
                                  : ") at a time, the compiler recomputing no whole layer "
                                    "(core.compiler_remat_recomputes_layers false)") +
                          ": the step is over HBM under each"}};
  return answer;
}

}  // namespace tpusim::workflows
