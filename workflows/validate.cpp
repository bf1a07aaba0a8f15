#include "workflows/validate.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <iostream>
#include <map>
#include <mutex>
#include <stdexcept>

#include "reports/validation_report.hpp"
#include "schedules/study.hpp"
#include "workflows/child_process.hpp"
#include "workflows/conformal.hpp"
#include "workflows/fit.hpp"
#include "workflows/interrupt.hpp"
#include "workflows/intervals.hpp"
#include "workflows/output_file.hpp"

namespace fs = std::filesystem;

namespace tpusim::workflows {

const std::vector<ValidationQuantity>& validation_quantities() {
  static const std::vector<ValidationQuantity> q = {{"step_time_s", "s"},
                                                    {"examples_per_s", "examples/s"},
                                                    {"max_fitting", ""},
                                                    {"activation_bytes_total", "bytes"},
                                                    {"parameter_bytes_total", "bytes"},
                                                    {"peak_hbm_bytes", "bytes"},
                                                    {"params", "parameters"},
                                                    {"mxu_utilization", "fraction"},
                                                    {"bubble_fraction", "fraction"},
                                                    {"fits", "1 if it fits"}};
  return q;
}

namespace {

std::vector<std::string> parse_sets(const Json& sets, const std::string& path, Problems& problems) {
  std::vector<std::string> out;
  if (!sets.is_array()) {
    problems.add(path, sets, "an array of \"dotted.path=value\" strings");
    return out;
  }
  for (std::size_t i = 0; i < sets.size(); ++i) {
    const Json& s = sets[i];
    if (!s.is_string() || s.get<std::string>().find('=') == std::string::npos)
      problems.add(index_path(path, i), s, "a \"dotted.path=value\" string");
    else
      out.push_back(s.get<std::string>());
  }
  return out;
}

/// The measured value's unit is the quantity's (a ratio's when relative; any name for a fit's field).
void check_unit(const ValidationCase& c, const std::string& path, Problems& problems) {
  std::string expected = "ratio";
  if (!c.baseline_sets)
    for (const auto& q : validation_quantities())
      if (q.name == c.quantity) expected = q.unit;
  if (expected.empty() ? c.unit.empty() : c.unit != expected)
    problems.add(path, Json(c.unit),
                 expected.empty() ? "the fitted field's unit (a name such as \"layers\")"
                                  : "\"" + expected + "\", the unit of " + c.quantity +
                                        (c.baseline_sets ? " relative to a baseline" : ""));
}

FitSpec parse_fit(Fields& f) {
  FitSpec s;
  s.maximize = f.string("maximize");
  s.min = f.number("min", -1e15, 1e15);
  s.max = f.number("max", -1e15, 1e15);
  s.step = f.positive("step");
  if (f.problems().empty() && s.max < s.min)
    f.problems().add(f.path_of("max"), Json(s.max), "a value >= fit.min (" + value_text(s.min) + ")");
  f.finish();
  return s;
}

}  // namespace

std::vector<std::string> ValidationCase::command() const {
  std::vector<std::string> args;
  if (fit) {
    args = {"fit",        study,
            "--maximize", fit->maximize,
            "--min",      value_text(fit->min),
            "--max",      value_text(fit->max),
            "--step",     value_text(fit->step),
            "--json"};
  } else {
    args = {"run", study, "--json"};
  }
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  return args;
}

std::vector<std::string> ValidationCase::baseline_command() const {
  std::vector<std::string> args = command();
  for (const auto& s : baseline_sets.value_or(std::vector<std::string>{}))
    args.insert(args.end(), {"--set", s});
  return args;
}

std::string ValidationCase::compared() const { return baseline_sets ? quantity + "/baseline" : quantity; }

namespace {

/// A case's "measured": value, unit (the quantity's) and source.
void parse_measured(const Json& m, ValidationCase& c, Problems& problems) {
  Fields mf(m, "measured", problems);
  if (!mf.ok()) return;
  c.measured = mf.positive("value");
  c.unit = mf.string("unit");
  if (problems.empty()) check_unit(c, mf.path_of("unit"), problems);
  c.source = mf.string("source");
  mf.finish();
}

/// A case's "tolerance": relative, and an absolute one (or a fit's grid steps), and its source.
void parse_tolerance(const Json& t, ValidationCase& c, Problems& problems) {
  Fields tf(t, "tolerance", problems);
  if (!tf.ok()) return;
  c.tolerance = tf.number("relative", 1e-6, 10);
  if (tf.has("absolute")) c.tolerance_absolute = tf.number("absolute", 0, 1e300);
  if (tf.has("grid_steps")) {
    const double steps = tf.number("grid_steps", 0, 1e6);
    if (!c.fit)
      problems.add(tf.path_of("grid_steps"), Json(steps), "no grid_steps: only a fit case searches a grid");
    else
      c.tolerance_absolute = steps * c.fit->step;
  }
  c.tolerance_source = tf.string("source");
  tf.finish();
}

}  // namespace

ValidationCase parse_validation_case(const Json& json, const fs::path& file, Problems& problems) {
  ValidationCase c;
  c.file = file.string();
  Fields f(json, "", problems);
  if (!f.ok()) return c;
  f.string("schema", {"tpusim.validation_case/1"});
  c.id = f.string("id");
  if (problems.empty() && c.id != file.stem().string())
    problems.add("id", Json(c.id), "the case file's name without .json (\"" + file.stem().string() + "\")");
  c.description = f.string("description");
  const std::string study = f.string("study");
  c.study = study.empty() ? study
                          : (fs::path(study).is_absolute() ? fs::path(study) : file.parent_path() / study)
                                .lexically_normal()
                                .string();
  if (const Json* sets = f.optional("set")) c.sets = parse_sets(*sets, "set", problems);
  std::vector<std::string> names;
  for (const auto& q : validation_quantities()) names.push_back(q.name);
  c.quantity = f.string("quantity", names);
  if (const Json* relative = f.optional("relative_to")) {
    Fields rf(*relative, "relative_to", problems);
    if (rf.ok()) {
      if (const Json* sets = rf.value("set"))
        c.baseline_sets = parse_sets(*sets, "relative_to.set", problems);
      rf.finish();
    }
  }
  if (const Json* fit = f.optional("fit")) {
    Fields ff(*fit, "fit", problems);
    if (ff.ok()) c.fit = parse_fit(ff);
  }
  if (problems.empty() && (c.quantity == "max_fitting") != c.fit.has_value())
    problems.add("fit", std::string(c.fit ? "an object" : "missing"),
                 c.quantity == "max_fitting"
                     ? "{\"maximize\", \"min\", \"max\", \"step\"} for quantity max_fitting"
                     : "no fit: only quantity max_fitting searches");
  if (const Json* m = f.value("measured")) parse_measured(*m, c, problems);
  if (const Json* t = f.value("tolerance")) parse_tolerance(*t, c, problems);
  f.finish();
  return c;
}

std::vector<ValidationCase> load_validation_cases(const fs::path& dir, const std::vector<std::string>& ids) {
  std::map<std::string, fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".json") files[entry.path().stem().string()] = entry.path();
  if (ec || files.empty())
    throw ConfigError("validate", "", dir.string(), "a folder of validation cases (*.json)");
  std::vector<std::string> wanted = ids;
  if (wanted.empty())
    for (const auto& [id, p] : files) wanted.push_back(id);
  std::vector<ValidationCase> cases;
  for (const auto& id : wanted) {
    auto it = files.find(id);
    if (it == files.end()) {
      std::string known;
      for (const auto& [k, p] : files) known += (known.empty() ? "" : ", ") + k;
      throw ConfigError("validate", "CASE", "\"" + id + "\"", "a case of " + dir.string() + ": " + known);
    }
    Problems problems(it->second.string());
    ValidationCase c = parse_validation_case(read_json_file(it->second), it->second, problems);
    problems.throw_if_any();
    cases.push_back(std::move(c));
  }
  return cases;
}

namespace {

const Json& field(const Json& output, const std::string& key) {
  if (!output.is_object() || !output.contains(key))
    throw std::runtime_error("the output has no \"" + key + "\" to compare");
  return output[key];
}

/// Summed over the cores, what each holds at its HBM peak under the given kinds.
double at_peak_total(const Json& output, std::initializer_list<const char*> kinds) {
  double total = 0;
  for (const auto& core : field(output, "cores"))
    for (const char* kind : kinds) total += field(core, "hbm_at_peak").value(kind, 0.0);
  return total;
}

}  // namespace

std::optional<double> output_quantity(const std::string& quantity, const Json& output) {
  if (quantity == "activation_bytes_total") return at_peak_total(output, {"activations", "workspace"});
  if (quantity == "parameter_bytes_total")
    return at_peak_total(output, {"weights", "gradients", "optimizer"});
  const Json& v = field(output, quantity);
  if (v.is_null()) return std::nullopt;                  // a fit where even fit.min does not fit
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;  // "fits": a run that trained fitted
  if (!v.is_number()) throw std::runtime_error("the output's \"" + quantity + "\" is not a number");
  return v.get<double>();
}

std::optional<double> predicted_value(const ValidationCase& c, const Json& output) {
  return output_quantity(c.quantity, output);
}

namespace {

/// A command line a shell runs as it is: "tpusim" and the arguments, quoted where they need it.
std::string command_text(const std::vector<std::string>& args) {
  std::string text = "tpusim";
  for (const auto& a : args)
    text += " " + (a.find_first_of(" {}\"'") == std::string::npos ? a : "'" + a + "'");
  return text;
}

}  // namespace

Json validation_record(const ValidationCase& c, std::optional<double> predicted, const std::string& failure) {
  Json r{{"id", c.id},
         {"quantity", c.compared()},
         {"unit", c.unit},
         {"measured", c.measured},
         {"predicted", predicted ? Json(*predicted) : Json(nullptr)},
         {"error", predicted ? Json(*predicted / c.measured - 1.0) : Json(nullptr)},
         {"tolerance", std::max(c.tolerance, c.tolerance_absolute / c.measured)},
         {"within", predicted && (std::fabs(*predicted / c.measured - 1.0) <= c.tolerance ||
                                  std::fabs(*predicted - c.measured) <= c.tolerance_absolute)},
         {"source", c.source},
         {"tolerance_source", c.tolerance_source},
         {"description", c.description},
         {"command", command_text(c.command())}};
  if (c.baseline_sets) r["baseline_command"] = command_text(c.baseline_command());
  if (!failure.empty()) r["failure"] = failure;
  return r;
}

namespace {

/// Cases within tolerance, and the mean and worst |error| of those with a prediction (a verdict,
/// "fits", is counted within or not and left out of the errors).
struct ErrorTally {
  double sum = 0, worst = 0;
  std::size_t n = 0, within = 0, missing = 0, verdicts = 0;
  std::string worst_id;

  std::size_t cases() const { return n + missing + verdicts; }

  void add(const Json& c) {
    within += c["within"].get<bool>() ? 1 : 0;
    if (c["quantity"] == "fits") {
      ++verdicts;
      return;
    }
    if (c["error"].is_null()) {
      ++missing;
      return;
    }
    const double e = std::fabs(c["error"].get<double>());
    sum += e;
    ++n;
    if (e >= worst) {
      worst = e;
      worst_id = c["id"].get<std::string>();
    }
  }

  Json row(std::size_t total) const {
    return Json{{"cases", total},
                {"within", within},
                {"no_prediction", missing},
                {"mean_abs_error", n ? Json(sum / double(n)) : Json(nullptr)},
                {"worst_abs_error", n ? Json(worst) : Json(nullptr)},
                {"worst_case", n ? Json(worst_id) : Json(nullptr)}};
  }
};

}  // namespace

Json validation_summary(const Json& cases) {
  std::map<std::string, ErrorTally> by;
  ErrorTally predicted;                                       // the cases no study value was inferred from
  std::map<std::string, std::array<ErrorTally, 2>> hardware;  // per generation: all, predictions proper
  for (const auto& c : cases) {
    by[c["quantity"].get<std::string>()].add(c);
    by[""].add(c);
    if (!c.value("in_sample", false)) predicted.add(c);
    if (c.contains("hardware")) {
      auto& h = hardware[c["hardware"].get<std::string>()];
      h[0].add(c);
      if (!c.value("in_sample", false)) h[1].add(c);
    }
  }
  Json per = Json::object();
  for (const auto& [q, a] : by)
    if (!q.empty()) per[q] = a.row(a.cases());
  Json all = by[""].row(cases.size());
  all["per_quantity"] = per;
  all["predicted"] = predicted.row(predicted.cases());
  Json per_hardware = Json::object();
  for (const auto& [name, h] : hardware) {
    per_hardware[name] = h[0].row(h[0].cases());
    per_hardware[name]["predicted"] = h[1].row(h[1].cases());
  }
  all["per_hardware"] = per_hardware;
  return all;
}

/// The leave-one-out bands' coverage and mean width over the predictions proper that have one.
Json band_summary(const Json& cases) {
  std::size_t n = 0, inside = 0, bounded = 0;
  double width = 0;
  for (const auto& c : cases) {
    if (!c.contains("band")) continue;
    ++n;
    inside += c["band_inside"].get<bool>() ? 1 : 0;
    if (c["band_relative_width"].is_number()) {
      ++bounded;
      width += c["band_relative_width"].get<double>();
    }
  }
  return Json{{"cases", n},
              {"inside", inside},
              {"coverage", n ? Json(double(inside) / double(n)) : Json(nullptr)},
              {"mean_relative_width", bounded ? Json(width / double(bounded)) : Json(nullptr)},
              {"unbounded", n - bounded},
              {"method", kBandMethod}};
}

Json interval_summary(const Json& cases) {
  struct Acc {
    std::size_t n = 0, inside = 0;
    double width = 0;
  };
  std::map<std::string, Acc> by;
  for (const auto& c : cases) {
    if (!c.contains("interval")) continue;
    for (const std::string& q : {c["quantity"].get<std::string>(), std::string()}) {
      Acc& a = by[q];
      ++a.n;
      a.inside += c["inside"].get<bool>() ? 1 : 0;
      a.width += c["relative_width"].get<double>();
    }
  }
  auto row = [](const Acc& a) {
    return Json{{"cases", a.n},
                {"inside", a.inside},
                {"coverage", a.n ? Json(double(a.inside) / double(a.n)) : Json(nullptr)},
                {"mean_relative_width", a.n ? Json(a.width / double(a.n)) : Json(nullptr)}};
  };
  Json out = row(by[""]);
  Json per = Json::object();
  for (const auto& [q, a] : by)
    if (!q.empty()) per[q] = row(a);
  out["per_quantity"] = per;
  return out;
}

std::optional<Json> scaled_hardware(const Json& hardware, const std::string& figure, double factor) {
  Json copy = hardware;
  Json* node = &copy;
  std::size_t begin = 0;
  while (begin <= figure.size()) {
    const auto dot = figure.find('.', begin);
    const std::string key = figure.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (!node->is_object() || !node->contains(key)) return std::nullopt;
    node = &(*node)[key];
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  if (!node->is_object() || !node->contains("value")) return std::nullopt;
  node->erase("range");  // the moved value is a what-if, not an assumption with its range
  node->erase("range_source");
  Json& value = (*node)["value"];
  if (value.is_boolean())
    value = !value.get<bool>();
  else if (value.is_number())
    value = factor * value.get<double>();
  else if (value.is_array() && value.size() > 1 && value[0].is_string())
    std::rotate(value.begin(), value.begin() + 1, value.end());  // a list of choices: the next one first
  else
    return std::nullopt;
  return copy;
}

namespace {

/// The hardware figures of the cases' studies whose source is an assumption, once each, then
/// the studies' own assumptions ("study": its file name, "figure": the key), once each.
Json assumed_figures(const std::vector<Study>& studies) {
  std::map<std::pair<std::string, std::string>, std::string> seen, own;
  for (const auto& s : studies) {
    for (const auto& [path, source] : s.hardware.sources)
      if (source.rfind("assumption", 0) == 0 && s.reads_figure(path)) seen[{s.hardware.name, path}] = source;
    for (const auto& a : s.assumptions) own[{fs::path(s.file).filename().string(), a.key}] = a.source;
  }
  Json list = Json::array();
  for (const auto& [key, source] : seen)
    list.push_back(Json{{"hardware", key.first}, {"figure", key.second}, {"source", source}});
  for (const auto& [key, source] : own)
    list.push_back(Json{{"study", key.first}, {"figure", key.second}, {"source", source}});
  return list;
}

/// One command's value of the case's quantity; throws std::runtime_error saying why there is none.
double run_value(const ValidationCase& c, const std::vector<std::string>& args) {
  const ChildResult child = run_self(args);
  if (child.exit_code != 0) throw std::runtime_error(failure_text(child));
  const auto value = predicted_value(c, Json::parse(child.out));
  if (!value) throw std::runtime_error("no value fits (even fit.min does not)");
  return *value;
}

Json run_case(const ValidationCase& c) {
  try {
    double predicted = run_value(c, c.command());
    if (c.baseline_sets) {
      const double baseline = run_value(c, c.baseline_command());
      if (!(baseline > 0))
        throw std::runtime_error("the baseline's " + c.quantity + " is " + value_text(baseline));
      predicted /= baseline;
    }
    return validation_record(c, predicted);
  } catch (const std::exception& e) {
    return validation_record(c, std::nullopt, e.what());
  }
}

/// One case run with one assumption moved: an assumed hardware figure up by 10 % (its changed
/// hardware file), or a study's own assumption at an end of its range ("key=value").
struct SensitivityRun {
  std::size_t c;
  std::string figure;
  std::string hardware_file;
};

std::vector<SensitivityRun> sensitivity_runs(const std::vector<ValidationCase>& cases,
                                             const std::vector<Study>& studies, const Json& assumptions,
                                             const fs::path& dir) {
  std::vector<SensitivityRun> runs;
  std::map<std::string, std::string> files;  // a changed hardware file's text -> its path
  for (std::size_t a = 0; a < assumptions.size(); ++a) {
    if (!assumptions[a].contains("hardware")) continue;
    const std::string hw = assumptions[a]["hardware"], figure = assumptions[a]["figure"];
    for (std::size_t c = 0; c < cases.size(); ++c) {
      if (studies[c].hardware.name != hw) continue;
      const auto scaled = scaled_hardware(studies[c].hardware_json, figure, 1.1);
      if (!scaled) continue;
      const std::string text = scaled->dump(2) + "\n";
      if (!files.count(text)) {
        const fs::path file = dir / ("hardware-" + std::to_string(files.size()) + ".json");
        write_output_file(file, text, "--sensitivity");
        files[text] = file.string();
      }
      runs.push_back(SensitivityRun{c, figure, files[text]});
    }
  }
  for (std::size_t c = 0; c < cases.size(); ++c)
    for (const auto& a : studies[c].assumptions)
      for (const Json* end : {&a.low, &a.high})
        if (*end != a.value) runs.push_back(SensitivityRun{c, a.key + "=" + end->dump(), ""});
  return runs;
}

/// How much each case's prediction moves when each assumed figure of its hardware moves up by
/// 10 % (a flag: turned over): every (case, figure) pair runs in a child with a changed copy of
/// the hardware the case runs on (its in-place overrides included).
void add_sensitivity(const std::vector<ValidationCase>& cases, const std::vector<Study>& studies,
                     const Json& assumptions, std::vector<Json>& records, int jobs) {
  const fs::path dir = fs::temp_directory_path() / ("tpusim-sensitivity-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<SensitivityRun> runs = sensitivity_runs(cases, studies, assumptions, dir);
  std::vector<std::optional<double>> moved(runs.size());
  parallel_for(runs.size(), jobs, [&](std::size_t i) {
    ValidationCase c = cases[runs[i].c];
    c.sets.push_back(runs[i].hardware_file.empty() ? runs[i].figure : "hardware=" + runs[i].hardware_file);
    const Json r = run_case(c);
    if (!r["predicted"].is_null()) moved[i] = r["predicted"].get<double>();
  });
  std::error_code ec;
  fs::remove_all(dir, ec);
  for (auto& r : records) r["sensitivity"] = Json::object();
  for (std::size_t i = 0; i < runs.size(); ++i) {
    Json& r = records[runs[i].c];
    if (r["predicted"].is_null() || !moved[i])
      r["sensitivity"][runs[i].figure] = nullptr;
    else
      r["sensitivity"][runs[i].figure] = *moved[i] / r["predicted"].get<double>() - 1.0;
  }
}

/// A case's interval from its prediction at each end of each range (records get "interval",
/// "inside", "relative_width" and "interval_assumptions").
void record_interval(Json& r, const std::vector<AssumedRange>& ranges,
                     const std::vector<std::array<std::optional<double>, 2>>& ends) {
  if (r["predicted"].is_null()) return;
  const double p = r["predicted"].get<double>();
  const auto iv = interval_of(p, ends);
  r["interval"] = Json::array({iv[0], iv[1]});
  r["inside"] = iv[0] <= r["measured"].get<double>() && r["measured"].get<double>() <= iv[1];
  r["relative_width"] = p != 0 ? (iv[1] - iv[0]) / std::fabs(p) : 0.0;
  Json list = Json::array();
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    Json a{{"name", ranges[k].name}, {"range", Json::array({ranges[k].low, ranges[k].high})}};
    for (int e = 0; e < 2; ++e)
      a[e == 0 ? "at_low" : "at_high"] =
          ends[k][std::size_t(e)] ? Json(*ends[k][std::size_t(e)]) : Json(nullptr);
    list.push_back(std::move(a));
  }
  r["interval_assumptions"] = list;
}

/// --intervals: each case run with each ranged assumption of its study at each end of its range;
/// records get "interval" [low, high], "inside" (the measured value in it), "relative_width"
/// ((high - low) / predicted) and "interval_assumptions" (the prediction at each end).
void add_intervals(const std::vector<ValidationCase>& cases, const std::vector<Study>& studies,
                   std::vector<Json>& records, int jobs) {
  static int calls = 0;
  const fs::path dir =
      fs::temp_directory_path() /
      ("tpusim-validate-intervals-" + std::to_string(::getpid()) + "-" + std::to_string(calls++));
  fs::create_directories(dir);
  struct Run {
    std::size_t c, range;
    int end;
    std::vector<std::string> sets;
  };
  std::vector<std::vector<AssumedRange>> ranges(cases.size());
  std::vector<Run> runs;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    ranges[c] = assumed_ranges(studies[c]);
    for (std::size_t r = 0; r < ranges[c].size(); ++r)
      for (int e = 0; e < 2; ++e) {
        const Json& end = e == 0 ? ranges[c][r].low : ranges[c][r].high;
        if (end == ranges[c][r].value) continue;
        const fs::path file =
            dir / (std::to_string(c) + "-" + std::to_string(r) + "-" + std::to_string(e) + ".json");
        const auto args = variant_args(studies[c], ranges[c][r], end, file);
        runs.push_back(Run{c, r, e, {args[1]}});  // args: {"--set", "path=value"}
      }
  }
  std::vector<std::optional<double>> values(runs.size());
  std::vector<std::string> failures(runs.size());
  parallel_for(runs.size(), jobs, [&](std::size_t i) {
    ValidationCase c = cases[runs[i].c];
    c.sets.insert(c.sets.end(), runs[i].sets.begin(), runs[i].sets.end());
    const Json r = run_case(c);
    if (r["predicted"].is_null())
      failures[i] = r.value("failure", "no prediction");
    else
      values[i] = r["predicted"].get<double>();
  });
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::vector<std::vector<std::array<std::optional<double>, 2>>> ends(cases.size());
  for (std::size_t c = 0; c < cases.size(); ++c) ends[c].resize(ranges[c].size());
  for (std::size_t i = 0; i < runs.size(); ++i)
    ends[runs[i].c][runs[i].range][std::size_t(runs[i].end)] = values[i];
  for (std::size_t c = 0; c < cases.size(); ++c) record_interval(records[c], ranges[c], ends[c]);
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (!failures[i].empty())
      records[runs[i].c]["interval_failures"].push_back(ranges[runs[i].c][runs[i].range].name + " at " +
                                                        (runs[i].end == 0 ? "low" : "high") + ": " +
                                                        failures[i]);
}

/// `--hardware-override figure=value` assignments as {"figure": value}; a value is JSON.
Json parse_hardware_overrides(const std::vector<std::string>& assignments) {
  Json overrides = Json::object();
  for (const auto& a : assignments) {
    const auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError("--hardware-override", "", "\"" + a + "\"",
                        "figure=value, e.g. core.hbm_sustained_bandwidth_fraction=0.85");
    const std::string figure = a.substr(0, eq), text = a.substr(eq + 1);
    try {
      overrides[figure] = Json::parse(text);
    } catch (const Json::parse_error&) {
      throw ConfigError("--hardware-override", figure, "\"" + text + "\"",
                        "a JSON value (a number, true or false, an array)");
    }
  }
  return overrides;
}

/// `--hardware-override figure=value`s as one `--set` for a case: the hardware its study names
/// as a base, these figures overridden on top of the study's own in-place overrides.
std::string hardware_override_set(const ValidationCase& c, const Json& overrides) {
  const Json study = study_json(c.study, c.sets);
  const Json hw = study.value("hardware", Json());
  Json merged = hw.is_object() ? hw.value("override", Json::object()) : Json::object();
  for (auto it = overrides.begin(); it != overrides.end(); ++it) merged[it.key()] = it.value();
  return "hardware=" +
         Json{{"base", hw.is_object() ? hw.value("base", Json()) : hw}, {"override", merged}}.dump();
}

/// The case's study with its overrides. Every study a case runs must be valid before anything
/// runs (a broken case is bad input, not a miss): with the case's overrides, with a fit's field at
/// fit.min (where `tpusim fit` checks it), and with the baseline's overrides added. Throws
/// ConfigError naming the case file.
Study case_study(const ValidationCase& c) {
  auto load = [&](std::vector<std::string> sets, bool at_min, const std::string& path,
                  const std::string& what) {
    if (at_min) sets.push_back(c.fit->maximize + "=" + value_text(c.fit->min));
    try {
      return load_study(c.study, sets);
    } catch (const ConfigError& e) {
      throw ConfigError(c.file, path, c.study, "a valid study with " + what + ":\n" + e.what());
    }
  };
  Study study = load(c.sets, false, "study", "the case's overrides");
  if (c.fit) load(c.sets, true, "fit.min", "the case's overrides and the fitted field at fit.min");
  if (c.baseline_sets) {
    std::vector<std::string> sets = c.sets;
    sets.insert(sets.end(), c.baseline_sets->begin(), c.baseline_sets->end());
    for (bool at_min : {false, c.fit.has_value()})
      load(sets, at_min, "relative_to.set", "the case's and the baseline's overrides");
  }
  return study;
}

/// A case whose study inferred a value from it (an assumption's "inferred_from") is explained by
/// that value, not predicted: the record says which values, and the summary counts it apart.
void mark_in_sample(const ValidationCase& c, const Study& study, Json& record) {
  Json inferred = Json::array();
  for (const auto& a : study.assumptions)
    if (std::find(a.inferred_from.begin(), a.inferred_from.end(), c.id) != a.inferred_from.end())
      inferred.push_back(fs::path(study.file).filename().string() + ":" + a.key);
  record["in_sample"] = !inferred.empty();
  if (!inferred.empty()) record["inferred_from_it"] = inferred;
}

}  // namespace

fs::path recorded_predictions_file(const fs::path& cases_dir) {
  return cases_dir / "recorded" / "predictions.json";
}

Json recorded_predictions(const fs::path& cases_dir) {
  const fs::path file = recorded_predictions_file(cases_dir);
  Json recorded = Json::object();
  if (!fs::exists(file)) return recorded;
  const Json j = read_json_file(file);
  Problems problems(file.string());
  Fields f(j, "", problems);
  f.string("schema", {"tpusim.validation_recorded/1"});
  f.string("source");
  if (const Json* p = f.value("predictions"); p && p->is_object()) recorded = *p;
  f.finish();
  problems.throw_if_any();
  return recorded;
}

namespace {

/// Each case's recorded prediction and whether this run's is the same (1e-9 relative): "recorded"
/// and "unmoved" in its record. A case without one has moved.
void compare_with_recorded(const fs::path& dir, Json& cases) {
  const Json recorded = recorded_predictions(dir);
  for (auto& c : cases) {
    const Json r = recorded.value(c["id"].get<std::string>(), Json(nullptr));
    c["recorded"] = r;
    const bool same = r.is_number() && c["predicted"].is_number() &&
                      std::fabs(c["predicted"].get<double>() - r.get<double>()) <=
                          1e-9 * std::max(std::fabs(r.get<double>()), 1e-300);
    c["unmoved"] = same;
  }
}

/// Writes this run's predictions as the recorded ones (every case's, failed ones as null).
void record_predictions(const fs::path& dir, const Json& cases) {
  Json predictions = Json::object();
  for (const auto& c : cases) predictions[c["id"].get<std::string>()] = c["predicted"];
  const Json j{
      {"schema", "tpusim.validation_recorded/1"},
      {"source", "tpusim validate --record: the predictions `tpusim validate --check` compares with"},
      {"predictions", predictions}};
  std::error_code ec;
  fs::create_directories(recorded_predictions_file(dir).parent_path(), ec);
  write_output_file(recorded_predictions_file(dir), j.dump(2) + "\n", "--record");
}

}  // namespace

namespace {

/// Every case's record, `jobs` at a time, in case order; progress on stderr.
std::vector<Json> run_cases(const std::vector<ValidationCase>& cases, int jobs) {
  std::vector<Json> records(cases.size());
  std::mutex lock;
  std::size_t done = 0;
  parallel_for(cases.size(), jobs, [&](std::size_t i) {
    records[i] = run_case(cases[i]);
    std::lock_guard<std::mutex> guard(lock);
    ++done;
    std::fprintf(stderr, "[%zu/%zu] %s\n", done, cases.size(), cases[i].id.c_str());
  });
  return records;
}

void write_validation_outputs(const std::string& out, const Json& report) {
  make_output_directory(out);
  write_output_file(fs::path(out) / "validation.json", report.dump(2) + "\n");
  write_output_file(fs::path(out) / "validation.md", reports::validation_markdown(report));
  write_output_file(fs::path(out) / "validation.html", reports::validation_html(report));
}

/// Whether the run passed: every case within its tolerance or, with --check (a regression
/// check), every prediction as recorded (1e-9 relative), within its tolerance or not; a
/// prediction that moved must be explained and recorded with the change.
ValidationOutcome outcome_of(const ValidateOptions& o, Json report) {
  ValidationOutcome outcome;
  outcome.passed = true;
  for (const auto& c : report["cases"]) {
    outcome.passed = outcome.passed && (o.check ? c.value("unmoved", false) : c["within"].get<bool>());
    if (o.check && !c.value("unmoved", false)) outcome.moved.push_back(c["id"].get<std::string>());
  }
  outcome.report = std::move(report);
  return outcome;
}

}  // namespace

namespace {

fs::path cases_dir(const ValidateOptions& o) {
  return o.dir.empty() ? config_dir() / "validation" : fs::path(o.dir);
}

/// The cases `o` names with its hardware overrides applied, and their studies.
std::pair<std::vector<ValidationCase>, std::vector<Study>> load_cases(const ValidateOptions& o) {
  std::vector<ValidationCase> cases = load_validation_cases(cases_dir(o), o.ids);
  const Json overrides = parse_hardware_overrides(o.hardware_overrides);
  if (!overrides.empty())
    for (auto& c : cases) c.sets.push_back(hardware_override_set(c, overrides));
  std::vector<Study> studies;
  for (const auto& c : cases) studies.push_back(case_study(c));
  return {std::move(cases), std::move(studies)};
}

void finish_record(const ValidationCase& c, const Study& study, Json& record) {
  mark_in_sample(c, study, record);
  record["hardware"] = study.hardware.name;  // the summary's generations
  record["family"] = model_family(study.model.kind);
}

/// The step-time residuals of the predictions proper among `records` (a ratio to a baseline, a
/// verdict or a size is none).
std::vector<Residual> step_residuals(const std::vector<Json>& records) {
  std::vector<Residual> out;
  for (const Json& r : records) {
    if (r.value("in_sample", false) || r.contains("baseline_command") || !r["predicted"].is_number())
      continue;
    const auto e = step_error(r["quantity"], r["measured"], r["predicted"]);
    if (e) out.push_back(Residual{r["id"], r["family"], *e});
  }
  return out;
}

/// --intervals, the model's error added leave-one-out: each prediction proper's band is its
/// assumption interval widened by the conformal bound of its family's other cases' step errors
/// (every family's, below five cases: conformal.hpp), so whether it holds the measurement is a
/// test on a case the bound never saw.
void add_bands(std::vector<Json>& records) {
  const auto residuals = step_residuals(records);
  for (Json& r : records) {
    const bool proper = std::any_of(residuals.begin(), residuals.end(),
                                    [&](const Residual& x) { return x.id == r["id"].get<std::string>(); });
    if (!proper || !r.contains("interval")) continue;
    const ValidatedError e = leave_one_out(residuals, r["id"], r["family"]);
    const auto band = widened_interval(r["quantity"], {r["interval"][0], r["interval"][1]}, e.error_bound);
    const double m = r["measured"], p = r["predicted"];
    const bool bounded = !band[1].is_null();
    r["band"] = Json::array({band[0], band[1]});
    r["band_inside"] = band[0].get<double>() <= m && (!bounded || m <= band[1].get<double>());
    r["band_relative_width"] =
        bounded ? Json((band[1].get<double>() - band[0].get<double>()) / p) : Json(nullptr);
    r["band_model_error"] = Json{{"error_bound", e.error_bound},
                                 {"rank", e.rank},
                                 {"cases", e.n()},
                                 {"of", e.widened ? "every family" : e.family},
                                 {"coverage", e.coverage()}};
  }
}

}  // namespace

Json validation_report(const ValidateOptions& o, Json records) {
  const auto [cases, studies] = load_cases(o);
  const Json assumptions = assumed_figures(studies);
  if (o.check) compare_with_recorded(cases_dir(o), records);
  Json report{{"schema", "tpusim.validation/1"},
              {"cases", records},
              {"summary", validation_summary(records)},
              {"assumption_knobs", assumptions.size()},
              {"assumptions", assumptions},
              {"hardware_overrides", parse_hardware_overrides(o.hardware_overrides)}};
  if (o.intervals) {
    report["intervals"] = interval_summary(records);
    report["intervals"]["method"] = kIntervalMethod;
    report["intervals"]["bands"] = band_summary(records);
  }
  return report;
}

ValidationOutcome validate_cases(const ValidateOptions& o) {
  if ((o.check || o.record) && !o.hardware_overrides.empty())
    throw ConfigError(o.check ? "--check" : "--record", "", "with --hardware-override",
                      "the shipped hardware: recorded predictions are the unmodified ones");
  if (o.jobs < 0)
    throw ConfigError("-j", "", std::to_string(o.jobs),
                      "a number of parallel cases >= 1 (0: the number of cores)");
  const auto [cases, studies] = load_cases(o);
  const int jobs = job_count(o.jobs);
  catch_stop_signals();  // from here an interrupt stops the cases' children; nothing is reported
  std::vector<Json> records = run_cases(cases, jobs);
  throw_if_stopped("the cases were not all simulated; no report written");
  for (std::size_t i = 0; i < cases.size(); ++i) finish_record(cases[i], studies[i], records[i]);
  if (o.sensitivity) add_sensitivity(cases, studies, assumed_figures(studies), records, jobs);
  if (o.intervals) {
    add_intervals(cases, studies, records, jobs);
    add_bands(records);
  }
  throw_if_stopped("the cases were not all simulated; no report written");
  Json all = Json::array();
  for (auto& r : records) all.push_back(std::move(r));
  const Json report = validation_report(o, std::move(all));
  if (!o.out.empty()) write_validation_outputs(o.out, report);
  if (o.record) record_predictions(cases_dir(o), report["cases"]);
  return outcome_of(o, report);
}

}  // namespace tpusim::workflows
