#include "workflows/conformal.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

namespace tpusim::workflows {

const char* const kBandMethod =
    "leave-one-out split conformal: each prediction proper's assumption interval widened by E, sized "
    "from its family's other predictions proper only (every family's when its own has fewer than 5 "
    "cases): of their n |errors of the implied step time|, the k-th smallest, k = ceil(0.8 (n + 1)) but "
    "at most n (covers a new case with probability k / (n + 1), at least 80 % once n >= 4); a step time "
    "divided by (1 + E) below and (1 - E) above, a rate multiplied by (1 - E) and (1 + E). A band's E "
    "never saw its case; the hardware figures chosen on shared cases (docs/CALIBRATION.md) are not "
    "re-chosen without it";

std::optional<double> step_error(const std::string& quantity, double measured, double predicted) {
  if (!(measured > 0) || !std::isfinite(predicted)) return std::nullopt;
  const double e = predicted / measured - 1.0;
  if (quantity == "step_time_s") return e;
  if ((quantity == "examples_per_s" || quantity == "mxu_utilization") && e > -1.0)
    return 1.0 / (1.0 + e) - 1.0;
  return std::nullopt;
}

namespace {

/// The k-th smallest of `errors` (absolute), k = ceil((n + 1) x target) but at most n, and k.
std::pair<double, std::size_t> conformal_bound(std::vector<double> errors) {
  if (errors.empty()) return {0.0, 0};
  std::sort(errors.begin(), errors.end());
  const double n = double(errors.size());
  const auto k = std::size_t(std::min(n, std::ceil((n + 1.0) * ValidatedError::kTargetCoverage - 1e-9)));
  return {errors[k - 1], k};
}

}  // namespace

ValidatedError leave_one_out(const std::vector<Residual>& residuals, const std::string& id,
                             const std::string& family) {
  ValidatedError out;
  out.family = family;
  std::vector<double> own, all;
  bool member = false;
  for (const Residual& r : residuals) {
    if (r.id == id) {
      member = member || r.family == family;
      continue;
    }
    all.push_back(std::fabs(r.error));
    if (r.family != family) continue;
    out.cases.push_back(r.id);
    own.push_back(std::fabs(r.error));
  }
  out.all_cases = all.size();
  out.widened = own.size() + (member ? 1 : 0) < ValidatedError::kMinCases;
  std::tie(out.error_bound, out.rank) = conformal_bound(out.widened ? all : own);
  return out;
}

std::array<Json, 2> widened_interval(const std::string& quantity, const std::array<double, 2>& interval,
                                     double e) {
  if (quantity == "step_time_s")
    return {Json(interval[0] / (1.0 + e)), e < 1.0 ? Json(interval[1] / (1.0 - e)) : Json(nullptr)};
  return {Json(e < 1.0 ? interval[0] * (1.0 - e) : 0.0), Json(interval[1] * (1.0 + e))};
}

}  // namespace tpusim::workflows
