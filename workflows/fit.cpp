#include "workflows/fit.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>

#include "reports/run_report.hpp"
#include "schedules/study.hpp"
#include "workflows/child_process.hpp"
#include "workflows/interrupt.hpp"
#include "workflows/intervals.hpp"

namespace tpusim::workflows {

namespace {

/// The search's probes, each value probed once, on the grid min + k * step.
class GridSearch {
 public:
  GridSearch(const FitSearch& s, const std::function<Probe(double)>& probe) : s_(s), probe_(probe) {}

  double at(double k) const { return s_.min + k * s_.step; }

  bool fits(double v) {
    if (auto it = seen_.find(v); it != seen_.end()) return it->second;
    Probe p = probe_(v);
    const bool ok = p.fits && p.error.empty();
    out_.probes.push_back(std::move(p));
    seen_[v] = ok;
    return ok;
  }

  /// Grid indices lo (fits) and hi (does not, or -1: none found below the limit): the top of the
  /// range, or doubling upwards from the start.
  std::pair<double, double> bracket() {
    double lo = 0, hi = -1;
    if (s_.max) {
      const double top = std::floor((*s_.max - s_.min) / s_.step + 1e-9);
      (fits(at(top)) ? lo : hi) = top;
      return {lo, hi};
    }
    double k = std::max(1.0, std::floor((std::max(s_.start, s_.min) - s_.min) / s_.step + 1e-9));
    while (hi < 0 && at(k) <= s_.limit) {
      if (fits(at(k))) {
        lo = k;
        k *= 2;
      } else {
        hi = k;
      }
    }
    return {lo, hi};
  }

  /// Bisection alone only ever sees fitting values below failing ones; a few check probes on
  /// both sides of the boundary can reveal fitting that is not monotonic.
  void check_around(double lo, double hi) {
    for (int j = 1; j <= 3; ++j) fits(at(std::floor(lo * j / 4.0)));
    if (hi < 0) return;
    const double top = s_.max ? std::floor((*s_.max - s_.min) / s_.step + 1e-9) : hi * 8;
    for (int j = 1; j <= 3; ++j) {
      const double k = std::floor(hi + (top - hi) * j / 3.0);
      if (k > hi && at(k) <= s_.limit) fits(at(k));
    }
  }

  /// Monotonic over what was probed: no fitting value above a non-fitting one.
  FitOutcome outcome() {
    bool failed_below = false;
    for (const auto& [v, ok] : seen_) {
      if (!ok)
        failed_below = true;
      else if (failed_below)
        out_.monotonic = false;
    }
    return std::move(out_);
  }

  FitOutcome& out() { return out_; }

 private:
  const FitSearch& s_;
  const std::function<Probe(double)>& probe_;
  FitOutcome out_;
  std::map<double, bool> seen_;
};

}  // namespace

FitOutcome fit_search(const FitSearch& s, const std::function<Probe(double)>& probe) {
  GridSearch g(s, probe);
  if (!g.fits(g.at(0))) return g.outcome();
  auto [lo, hi] = g.bracket();
  while (hi >= 0 && hi - lo > 1) {
    const double mid = std::floor((lo + hi) / 2);
    (g.fits(g.at(mid)) ? lo : hi) = mid;
  }
  g.out().max_fitting = g.at(lo);
  g.check_around(lo, hi);
  return g.outcome();
}

std::string value_text(double v) {
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 9e15)
    std::snprintf(buf, sizeof buf, "%lld", (long long)v);
  else
    std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

namespace {

/// The current value at a dotted path of the study (after overrides), if any: a number.
std::optional<Json> current_value(const std::string& study, const std::vector<std::string>& sets,
                                  const std::string& path) {
  Json j = read_json_file(study);
  for (const auto& s : sets) apply_override(j, s);
  const Json* node = &j;
  std::size_t begin = 0;
  while (true) {
    const auto dot = path.find('.', begin);
    const std::string key = path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (node->is_object() && node->contains(key))
      node = &(*node)[key];
    else if (node->is_array() && key.find_first_not_of("0123456789") == std::string::npos && !key.empty() &&
             std::stoull(key) < node->size())
      node = &(*node)[std::stoull(key)];
    else
      return std::nullopt;
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  if (!node->is_number()) throw ConfigError("--maximize", path, show(*node), "a numeric field of the study");
  return *node;
}

/// The upper bound the field's own check states at `value` ("an integer in [1, 100000]"), if the
/// study is invalid there because of the field itself: a --max beyond it is lowered to it, so
/// the bisection does not walk down from 1e308 a probe at a time.
std::optional<double> own_upper_bound(const std::string& study, const std::vector<std::string>& sets,
                                      const std::string& path, double value) {
  std::vector<std::string> at = sets;
  at.push_back(path + "=" + value_text(value));
  try {
    load_study(study, at);
  } catch (const ConfigError& e) {
    static const std::regex range(R"(in \[[^,\]]+, ([-+0-9.eE]+)\])");
    for (const auto& p : e.problems()) {
      std::smatch m;
      if (p.path == path && std::regex_search(p.expected, m, range)) return std::stod(m[1].str());
    }
  }
  return std::nullopt;
}

/// Refuses a search grid an integer field cannot take (a fractional --min or --step would make
/// every other probe invalid, which read as fitting that is not monotonic).
void check_grid(const FitSearch& search, const Json& current, const std::string& path) {
  if (!current.is_number_integer()) return;
  for (const auto& [option, v] : {std::pair{"--step", search.step}, std::pair{"--min", search.min}})
    if (v != std::floor(v))
      throw ConfigError(option, "", value_text(v), "a whole number: " + path + " is an integer field");
}

}  // namespace

namespace {

/// The search grid from the options, checked against the study's field (--max lowered to the
/// field's own bound, said on stderr).
FitSearch search_grid(const FitOptions& o) {
  FitSearch search;
  search.min = o.min.value_or(1);
  search.max = o.max;
  search.step = o.step.value_or(1);
  check_timeout("--probe-timeout", o.probe_timeout_s);
  o.plan.check();
  if (o.plan.on && o.intervals)
    throw ConfigError("--intervals", "", "with --plan",
                      "one of the two (intervals over re-planned searches: not yet)");
  if (!(search.step > 0)) throw ConfigError("--step", "", value_text(search.step), "a number > 0");
  if (o.max && *o.max < search.min)
    throw ConfigError("--max", "", value_text(*o.max), "a value >= --min (" + value_text(search.min) + ")");
  const std::optional<Json> current = current_value(o.study, o.sets, o.path);
  search.start = current ? current->get<double>() : search.min;
  if (current) check_grid(search, *current, o.path);
  if (o.max)
    if (const auto bound = own_upper_bound(o.study, o.sets, o.path, *o.max); bound && *bound < *o.max) {
      std::cerr << "tpusim fit: --max " << value_text(*o.max) << " lowered to " << value_text(*bound) << ", "
                << o.path << "'s own upper bound\n";
      search.max = std::max(*bound, search.min);
    }
  // The study must be valid with the searched field at its minimum (its own value may be
  // invalid with the overrides, e.g. fewer layers than the stages set).
  std::vector<std::string> at_min = o.sets;
  at_min.push_back(o.path + "=" + value_text(search.min));
  load_study(o.study, at_min);
  return search;
}

/// One probe with --plan: `tpusim plan` at `v` in a child. Its best plan's run is the result
/// ("plan" its label); no plan fitting is "does not fit", with the usable HBM and, as the peak,
/// nothing (no candidate ran within it).
Probe plan_probe(const FitOptions& o, double v) {
  std::vector<std::string> args = o.plan.arguments(o.study, job_count(o.jobs));
  for (const auto& s : o.sets) args.insert(args.end(), {"--set", s});
  args.insert(args.end(), {"--set", o.path + "=" + value_text(v)});
  const ChildResult child = run_self(args, o.probe_timeout_s);
  Probe p;
  p.value = v;
  if (child.exit_code == 2) {
    p.error = failure_text(child);  // invalid at this value: an answer
    return p;
  }
  Json plan;
  if ((child.exit_code == 0 || child.exit_code == 1) && !child.out.empty())
    plan = Json::parse(child.out, nullptr, false);
  if (!plan.is_object()) throw ProbeFailed(o.path + " = " + value_text(v) + ": " + failure_text(child));
  p.result = best_plan_run(plan);
  if (p.result.is_null()) {
    p.result = Json{{"fits", false},
                    {"plan", nullptr},
                    {"hbm_capacity_bytes", plan.value("hbm_capacity_bytes", Json(nullptr))}};
    return p;
  }
  p.fits = p.result["fits"].get<bool>();
  return p;
}

/// One probe: `tpusim run --require-fit` at `v` in a child (with --plan, a plan search). A value
/// whose resident state alone overflows answers at once (exit 1, a small result with
/// "simulated": false).
Probe run_probe(const FitOptions& o, double v) {
  if (o.plan.on) return plan_probe(o, v);
  std::vector<std::string> args = {"run", o.study, "--json", "--require-fit"};
  for (const auto& s : o.sets) args.insert(args.end(), {"--set", s});
  args.insert(args.end(), {"--set", o.path + "=" + value_text(v)});
  const ChildResult child = run_self(args, o.probe_timeout_s);
  Probe p;
  p.value = v;
  if (child.exit_code == 1 && !child.out.empty()) {  // ran (or was bounded): does not fit
    try {
      p.result = Json::parse(child.out);
      p.fits = false;
      return p;
    } catch (const Json::parse_error&) {
    }
  }
  if (child.exit_code != 0 && child.exit_code != 2) {
    // Exit 2 is "the study is invalid at this value" (an answer); anything else is a failure.
    throw ProbeFailed(o.path + " = " + value_text(v) + ": " + failure_text(child));
  }
  if (child.exit_code != 0) {
    p.error = failure_text(child);
    return p;
  }
  p.result = Json::parse(child.out);
  p.fits = p.result["fits"].get<bool>();
  return p;
}

/// " of <usable HBM>" after a peak (", usable ..." after a plan probe with none); nothing when
/// the answer does not say.
std::string capacity_text(const Probe& p) {
  const Json capacity = p.result.value("hbm_capacity_bytes", Json(nullptr));
  if (!capacity.is_number()) return "";
  return (p.result.contains("peak_hbm_bytes") ? " of " : ", usable ") +
         reports::human_bytes(capacity.get<double>());
}

/// A probe's verdict in words: fits or not, with its peak (and plan, with --plan).
std::string verdict_text(const Probe& p) {
  std::string text = p.fits ? "fits" : "does not fit";
  if (p.result.contains("plan"))
    return text + (p.result["plan"].is_null()
                       ? " (no plan runs in HBM)"
                       : ", with " + p.result["plan"].get<std::string>() + ", peak " +
                             reports::human_bytes(p.result["peak_hbm_bytes"].get<double>()));
  return text + ", " + (p.result.value("simulated", true) ? "peak " : "resident state alone ") +
         reports::human_bytes(p.result["peak_hbm_bytes"].get<double>());
}

/// --intervals: the answer's spread, a search per end of each assumption's range.
Json fit_intervals(const FitOptions& o, const FitSearch& search, double max_fitting) {
  std::vector<std::string> args = {"fit",        o.study,
                                   "--maximize", o.path,
                                   "--min",      value_text(search.min),
                                   "--step",     value_text(search.step),
                                   "--json"};
  if (search.max) args.insert(args.end(), {"--max", value_text(*search.max)});
  if (o.probe_timeout_s > 0) args.insert(args.end(), {"--probe-timeout", value_text(o.probe_timeout_s)});
  for (const auto& s : o.sets) args.insert(args.end(), {"--set", s});
  std::vector<std::string> unranged;
  const Study loaded = load_study(o.study, o.sets);
  const auto ranges = assumed_ranges(loaded, &unranged);
  const auto ends = run_variants(args, loaded, ranges, job_count(o.jobs), [](const Json& out) {
    std::map<std::string, double> q;
    if (out.contains("max_fitting") && out["max_fitting"].is_number()) q["max_fitting"] = out["max_fitting"];
    return q;
  });
  return intervals_json({{"max_fitting", max_fitting}}, ranges, ends, unranged);
}

}  // namespace

FitResult fit_study(const FitOptions& o) {
  FitResult r;
  r.search = search_grid(o);
  catch_stop_signals();  // from here an interrupt stops the probe and says what the others found
  {
    int made = 0;
    std::optional<double> fitting;
    const auto kept = [&] {
      return "the search was not finished: " + std::to_string(made) + " probes made (listed above), " +
             (fitting ? "the largest value that fit " + value_text(*fitting) : std::string("none fit"));
    };
    try {
      r.outcome = fit_search(r.search, [&](double v) {
        Probe p;
        try {
          p = run_probe(o, v);
        } catch (const ProbeFailed&) {
          throw_if_stopped(kept());  // the probe the interrupt killed is no failure
          throw;
        }
        throw_if_stopped(kept());
        if (o.probe_done)
          o.probe_done(value_text(p.value),
                       !p.error.empty() ? std::string("invalid at this value") : verdict_text(p));
        ++made;
        if (p.fits && p.error.empty() && (!fitting || v > *fitting)) fitting = v;
        return p;
      });
    } catch (const ProbeFailed& e) {
      r.failure = e.what();
      return r;
    }
  }
  if (!r.outcome.max_fitting && !r.outcome.probes.front().error.empty()) {
    throw ConfigError("--min", o.path, value_text(r.search.min),
                      "a value at which the study is valid (there: " + r.outcome.probes.front().error + ")");
  }
  if (o.intervals && r.outcome.max_fitting) {
    r.intervals = fit_intervals(o, r.search, *r.outcome.max_fitting);
    throw_if_stopped("the intervals were not finished; the largest value that fits is " +
                     value_text(*r.outcome.max_fitting));
  }
  return r;
}

Json fit_json(const FitOptions& o, const FitResult& r) {
  Json probes = Json::array();
  Json best = nullptr;
  for (const auto& p : r.outcome.probes) {
    Json row{{"value", p.value}, {"fits", p.fits && p.error.empty()}};
    if (!p.error.empty())
      row["error"] = p.error;
    else
      row["peak_hbm_bytes"] = p.result.value("peak_hbm_bytes", Json(nullptr));
    if (o.plan.on && p.error.empty()) row["plan"] = p.result["plan"];
    probes.push_back(row);
    if (r.outcome.max_fitting && p.value == *r.outcome.max_fitting) best = p.result;
  }
  Json out{{"field", o.path},
           {"max_fitting", r.outcome.max_fitting ? Json(*r.outcome.max_fitting) : Json(nullptr)},
           {"monotonic", r.outcome.monotonic},
           {"probes", probes},
           {"result", best}};
  if (!r.intervals.is_null()) out["intervals"] = r.intervals;
  return out;
}

std::string fit_text(const FitOptions& o, const FitResult& r) {
  std::ostringstream out;
  out << "tpusim fit: " << o.path << " in " << o.study << "\n";
  for (const auto& p : r.outcome.probes) {
    out << "  " << o.path << " = " << value_text(p.value) << ": ";
    if (!p.error.empty())
      out << "invalid or failed (" << p.error.substr(0, p.error.find('\n', p.error.find('\n') + 1)) << ")\n";
    else
      out << verdict_text(p) << capacity_text(p) << "\n";
  }
  const Json& spread = r.intervals;
  if (r.outcome.max_fitting)
    out << "largest value that fits: " << value_text(*r.outcome.max_fitting)
        << (spread.is_null()
                ? ""
                : " (" + value_text(spread["max_fitting"][0].get<double>()) + "–" +
                      value_text(spread["max_fitting"][1].get<double>()) + " over the ranges of " +
                      std::to_string(spread["assumptions"].size()) + " assumptions, one at a time)")
        << "\n";
  else
    out << "even " << o.path << " = " << value_text(r.search.min) << " does not fit\n";
  if (!r.outcome.monotonic)
    out << "warning: fitting is not monotonic over the probed values; the answer is a boundary, not "
           "necessarily the largest\n";
  return out.str();
}

}  // namespace tpusim::workflows
