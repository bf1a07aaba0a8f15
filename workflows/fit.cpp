#include "workflows/fit.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <regex>

#include "reports/run_report.hpp"
#include "schedules/study.hpp"
#include "workflows/child_process.hpp"
#include "workflows/intervals.hpp"

namespace tpusim::workflows {

FitOutcome fit_search(const FitSearch& s, const std::function<Probe(double)>& probe) {
  FitOutcome out;
  std::map<double, bool> seen;
  auto eval = [&](double v) {
    auto it = seen.find(v);
    if (it != seen.end()) return it->second;
    Probe p = probe(v);
    const bool fits = p.fits && p.error.empty();
    out.probes.push_back(std::move(p));
    seen[v] = fits;
    return fits;
  };
  // Values live on the grid min + k * step.
  auto on_grid = [&](double k) { return s.min + k * s.step; };
  if (!eval(on_grid(0))) return out;

  double lo = 0, hi = -1;  // grid indices: lo fits; hi does not (or -1: unknown)
  if (s.max) {
    const double top = std::floor((*s.max - s.min) / s.step + 1e-9);
    if (eval(on_grid(top))) {
      lo = top;
    } else {
      hi = top;
    }
  } else {
    double k = std::max(1.0, std::floor((std::max(s.start, s.min) - s.min) / s.step + 1e-9));
    while (hi < 0) {
      if (on_grid(k) > s.limit) break;
      if (eval(on_grid(k))) {
        lo = k;
        k *= 2;
      } else {
        hi = k;
      }
    }
  }
  while (hi >= 0 && hi - lo > 1) {
    const double mid = std::floor((lo + hi) / 2);
    if (eval(on_grid(mid)))
      lo = mid;
    else
      hi = mid;
  }
  out.max_fitting = on_grid(lo);
  // Bisection alone only ever sees fitting values below failing ones; a few check probes on
  // both sides of the boundary can reveal fitting that is not monotonic.
  for (int j = 1; j <= 3; ++j) eval(on_grid(std::floor(lo * j / 4.0)));
  if (hi >= 0) {
    const double top = s.max ? std::floor((*s.max - s.min) / s.step + 1e-9) : hi * 8;
    for (int j = 1; j <= 3; ++j) {
      const double k = std::floor(hi + (top - hi) * j / 3.0);
      if (k > hi && on_grid(k) <= s.limit) eval(on_grid(k));
    }
  }
  // Monotonic over what was probed: no fitting value above a non-fitting one.
  bool failed_below = false;
  for (const auto& [v, fits] : seen) {
    if (!fits)
      failed_below = true;
    else if (failed_below)
      out.monotonic = false;
  }
  return out;
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

int cmd_fit(const std::string& study, const std::string& path, const std::vector<std::string>& sets,
            std::optional<double> min, std::optional<double> max, std::optional<double> step, bool as_json,
            double probe_timeout_s, bool intervals, int jobs) {
  FitSearch search;
  search.min = min.value_or(1);
  search.max = max;
  search.step = step.value_or(1);
  check_timeout("--probe-timeout", probe_timeout_s);
  if (!(search.step > 0)) throw ConfigError("--step", "", value_text(search.step), "a number > 0");
  if (max && *max < search.min)
    throw ConfigError("--max", "", value_text(*max), "a value >= --min (" + value_text(search.min) + ")");
  const std::optional<Json> current = current_value(study, sets, path);
  search.start = current ? current->get<double>() : search.min;
  if (current) check_grid(search, *current, path);
  if (max)
    if (const auto bound = own_upper_bound(study, sets, path, *max); bound && *bound < *max) {
      std::cerr << "tpusim fit: --max " << value_text(*max) << " lowered to " << value_text(*bound) << ", "
                << path << "'s own upper bound\n";
      search.max = max = std::max(*bound, search.min);
    }
  // The study must be valid with the searched field at its minimum (its own value may be
  // invalid with the overrides, e.g. fewer layers than the stages set).
  std::vector<std::string> at_min = sets;
  at_min.push_back(path + "=" + value_text(search.min));
  load_study(study, at_min);

  auto run_probe = [&](double v) {
    // --require-fit: a value whose resident state alone overflows answers at once (exit 1,
    // a small result with "simulated": false) instead of simulating the step.
    std::vector<std::string> args = {"run", study, "--json", "--require-fit"};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    args.insert(args.end(), {"--set", path + "=" + value_text(v)});
    const ChildResult child = run_self(args, probe_timeout_s);
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
      throw ProbeFailed(path + " = " + value_text(v) + ": " + failure_text(child));
    }
    if (child.exit_code != 0) {
      p.error = failure_text(child);
      return p;
    }
    p.result = Json::parse(child.out);
    p.fits = p.result["fits"].get<bool>();
    return p;
  };
  // Each probe as it finishes, on stderr: a line updated in place on a terminal, a line each
  // otherwise (a search of a large study takes minutes and must not look stuck).
  const bool tty = isatty(STDERR_FILENO);
  int probes_done = 0;
  const auto started = std::chrono::steady_clock::now();
  auto report = [&](double v, const std::string& verdict) {
    char line[512];
    std::snprintf(line, sizeof line, "%stpusim fit: probe %d: %s = %s: %s (%.0f s elapsed)%s",
                  tty ? "\r\033[K" : "", ++probes_done, path.c_str(), value_text(v).c_str(), verdict.c_str(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                  tty ? "" : "\n");
    std::cerr << line << std::flush;
  };
  auto probe = [&](double v) {
    Probe p = run_probe(v);
    if (!p.error.empty())
      report(v, "invalid at this value");
    else
      report(v, std::string(p.fits ? "fits" : "does not fit") + ", peak " +
                    reports::human_bytes(p.result["peak_hbm_bytes"].get<double>()));
    return p;
  };
  FitOutcome outcome;
  try {
    outcome = fit_search(search, probe);
    if (tty && probes_done > 0) std::cerr << "\n";
  } catch (const ProbeFailed& e) {
    std::cerr << "tpusim fit: a probe failed, so the search has no answer: " << e.what() << "\n";
    return kFitProbeFailed;
  }
  if (!outcome.max_fitting && !outcome.probes.front().error.empty()) {
    throw ConfigError("--min", path, value_text(search.min),
                      "a value at which the study is valid (there: " + outcome.probes.front().error + ")");
  }

  Json probes = Json::array();
  Json best = nullptr;
  for (const auto& p : outcome.probes) {
    Json row{{"value", p.value}, {"fits", p.fits && p.error.empty()}};
    if (!p.error.empty())
      row["error"] = p.error;
    else
      row["peak_hbm_bytes"] = p.result["peak_hbm_bytes"];
    probes.push_back(row);
    if (outcome.max_fitting && p.value == *outcome.max_fitting) best = p.result;
  }
  Json spread = nullptr;
  if (intervals && outcome.max_fitting) {
    std::vector<std::string> args = {"fit",        study,
                                     "--maximize", path,
                                     "--min",      value_text(search.min),
                                     "--step",     value_text(search.step),
                                     "--json"};
    if (max) args.insert(args.end(), {"--max", value_text(*max)});
    if (probe_timeout_s > 0) args.insert(args.end(), {"--probe-timeout", value_text(probe_timeout_s)});
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    std::vector<std::string> unranged;
    const Study loaded = load_study(study, sets);
    const auto ranges = assumed_ranges(loaded, &unranged);
    const auto ends = run_variants(args, loaded, ranges, job_count(jobs), [](const Json& out) {
      std::map<std::string, double> q;
      if (out.contains("max_fitting") && out["max_fitting"].is_number())
        q["max_fitting"] = out["max_fitting"];
      return q;
    });
    spread = intervals_json({{"max_fitting", *outcome.max_fitting}}, ranges, ends, unranged);
  }
  if (as_json) {
    Json out{{"field", path},
             {"max_fitting", outcome.max_fitting ? Json(*outcome.max_fitting) : Json(nullptr)},
             {"monotonic", outcome.monotonic},
             {"probes", probes},
             {"result", best}};
    if (!spread.is_null()) out["intervals"] = spread;
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "tpusim fit: " << path << " in " << study << "\n";
    for (const auto& p : outcome.probes) {
      std::cout << "  " << path << " = " << value_text(p.value) << ": ";
      if (!p.error.empty())
        std::cout << "invalid or failed (" << p.error.substr(0, p.error.find('\n', p.error.find('\n') + 1))
                  << ")\n";
      else
        std::cout << (p.fits ? "fits" : "does not fit") << ", "
                  << (p.result.value("simulated", true) ? "peak " : "resident state alone ")
                  << reports::human_bytes(p.result["peak_hbm_bytes"].get<double>()) << " of "
                  << reports::human_bytes(p.result["hbm_capacity_bytes"].get<double>()) << "\n";
    }
    if (outcome.max_fitting)
      std::cout << "largest value that fits: " << value_text(*outcome.max_fitting)
                << (spread.is_null()
                        ? ""
                        : " (" + value_text(spread["max_fitting"][0].get<double>()) + "–" +
                              value_text(spread["max_fitting"][1].get<double>()) + " over the ranges of " +
                              std::to_string(spread["assumptions"].size()) + " assumptions, one at a time)")
                << "\n";
    else
      std::cout << "even " << path << " = " << value_text(search.min) << " does not fit\n";
    if (!outcome.monotonic)
      std::cout << "warning: fitting is not monotonic over the probed values; the answer is a boundary, not "
                   "necessarily the largest\n";
  }
  return 0;
}

}  // namespace tpusim::workflows
