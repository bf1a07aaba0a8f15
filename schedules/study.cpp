#include "schedules/study.hpp"

#include <algorithm>
#include <cstdlib>

#include "schedules/perturbations.hpp"
#include "sim/collectives/collective_algorithm.hpp"

namespace tpusim {

void apply_override(Json& study, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError("--set", "", "\"" + assignment + "\"",
                      "dotted.path=value, e.g. batch=256 or schedule.kind=data_parallel");
  }
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  Json value;
  try {
    value = parse_json_strict(text, "--set", path);
  } catch (const Json::parse_error&) {
    value = text;  // a bare word is a string
  }
  Json* node = &study;
  std::size_t begin = 0;
  std::string walked;
  while (true) {
    const auto dot = path.find('.', begin);
    const std::string key = path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (key.empty()) throw ConfigError("--set", path, "an empty path component", "dotted.path=value");
    walked = walked.empty() ? key : walked + "." + key;
    Json* next = nullptr;
    if (node->is_array()) {
      const bool digits = key.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || std::stoull(key) >= node->size()) {
        throw ConfigError("--set", walked, "\"" + key + "\"",
                          "an index below " + std::to_string(node->size()) + " into the array at " + walked);
      }
      next = &(*node)[std::stoull(key)];
    } else if (node->is_object() || node->is_null()) {
      next = &(*node)[key];
    } else {
      throw ConfigError("--set", walked, show(*node), "an object or array to descend into");
    }
    if (dot == std::string::npos) {
      *next = value;
      return;
    }
    node = next;
    begin = dot + 1;
  }
}

namespace {

/// A hardware file's problems, carried into the study's prefixed so the user knows which file.
void carry_hardware_problems(const ConfigError& e, Problems& problems) {
  for (const auto& p : e.problems())
    problems.add(p.path.empty() ? "hardware" : "hardware(" + e.context() + ")." + p.path, p.found,
                 p.expected);
}

/// {"base": NAME_OR_PATH, "override": {"dotted.figure": value, ...}}: the base's figures with the
/// overrides applied, named after them. Returns whether the hardware loaded.
bool parse_overridden_hardware(const Json& hw, const std::filesystem::path& base_dir, Study& study,
                               Problems& problems) {
  Fields h(hw, "hardware", problems);
  const std::string base = h.string("base");
  const Json* overrides = h.optional("override");
  h.finish();
  if (!problems.empty()) return false;
  try {
    const std::filesystem::path file = hardware_file(base, base_dir);
    Json json = read_json_file(file);
    if (overrides) apply_hardware_overrides(json, *overrides, "hardware.override", problems);
    if (!problems.empty()) return false;
    study.hardware = parse_hardware(json, file.string() + " with the study's overrides");
    study.hardware_json = std::move(json);
    if (overrides && !overrides->empty()) {
      std::string keys;
      for (auto it = overrides->begin(); it != overrides->end(); ++it)
        keys += (keys.empty() ? "" : ", ") + it.key();
      study.hardware.name += " (overridden: " + keys + ")";
    }
    return true;
  } catch (const ConfigError& e) {
    carry_hardware_problems(e, problems);
    return false;
  }
}

/// "hardware": a name, a path to a hardware JSON file, or a base with overrides. Returns whether
/// the hardware loaded.
bool parse_study_hardware(const Json& hw, const std::filesystem::path& base_dir, Study& study,
                          Problems& problems) {
  if (hw.is_object()) return parse_overridden_hardware(hw, base_dir, study, problems);
  if (!hw.is_string() || hw.get<std::string>().empty()) {
    problems.add("hardware", hw,
                 "a hardware name (e.g. \"tpu-v3\"), a path to a hardware JSON file, or {\"base\": ..., "
                 "\"override\": {...}}");
    return false;
  }
  try {
    const std::filesystem::path file = hardware_file(hw.get<std::string>(), base_dir);
    study.hardware_json = read_json_file(file);
    study.hardware = parse_hardware(study.hardware_json, file.string());
    return true;
  } catch (const ConfigError& e) {
    carry_hardware_problems(e, problems);
    return false;
  }
}

/// The hosts' what-ifs (optional): "input_pipeline" and "training_loop".
void parse_host_settings(Fields& top, Study& study, Problems& problems) {
  if (const Json* input = top.optional("input_pipeline")) {
    Fields f(*input, "input_pipeline", problems);
    if (f.ok()) {
      // A rate, a cost per step, or both: the preparation of a step takes the cost plus the
      // busiest host's examples at the rate.
      if (f.has("examples_per_s_per_host") || !f.has("seconds_per_step_per_host"))
        study.host_examples_per_s = f.number("examples_per_s_per_host", 1e-3, 1e12);
      if (f.has("seconds_per_step_per_host"))
        study.host_seconds_per_step = f.number("seconds_per_step_per_host", 0.0, 1e6);
    }
    f.finish();
  }
  if (const Json* loop = top.optional("training_loop")) {
    Fields f(*loop, "training_loop", problems);
    if (f.ok()) {
      study.steps_per_loop = f.integer("steps_per_loop", 1, std::int64_t(1) << 40);
      study.host_seconds_per_loop = f.number("host_seconds_per_loop", 0.0, 1e6);
    }
    f.finish();
  }
}

/// "target": {"tokens" | "examples" | "steps": amount}, one of them, tokens only for a model
/// whose examples are tokens; "price_per_chip_hour": USD per chip and hour.
void parse_target(Fields& top, Study& study, Problems& problems) {
  if (top.has("price_per_chip_hour"))
    study.price_per_chip_hour = top.number("price_per_chip_hour", 1e-9, 1e9);
  const Json* t = top.optional("target");
  if (!t && study.price_per_chip_hour > 0)
    problems.add(
        "price_per_chip_hour", Json(study.price_per_chip_hour),
        "a target too ({\"tokens\": N}, {\"examples\": N} or {\"steps\": N}): the cost is of training to it");
  if (!t) return;
  const std::string expected =
      "{\"tokens\": N}, {\"examples\": N} or {\"steps\": N}: one of them, a number > 0";
  if (!t->is_object() || t->size() != 1) {
    problems.add("target", *t, expected);
    return;
  }
  const std::string unit = t->begin().key();
  const Json& amount = t->begin().value();
  const std::string path = "target." + unit;
  if (unit != "tokens" && unit != "examples" && unit != "steps")
    problems.add(path, amount, expected);
  else if (!amount.is_number() || !(amount.get<double>() > 0) || amount.get<double>() > 1e30)
    problems.add(path, amount, "a number > 0 (at most 1e30)");
  else if (unit == "tokens" && study.model.tokens_per_example <= 0 && problems.empty())
    problems.add(path, amount,
                 "examples or steps: a " + study.model.kind + " model's examples are not tokens");
  else
    study.target = {unit, amount.get<double>()};
}

/// The training run's figures: configs/training-run.json's, then the study's "training_run".
void parse_training_run(Fields& top, Study& study, Problems& problems) {
  const std::filesystem::path file = config_dir() / "training-run.json";
  const Json defaults = read_json_file(file);
  using Figure = Study::TrainingRun::Figure;
  auto& run = study.training_run;
  struct Entry {
    const char* key;
    Figure* figure;
    double min, max;
  };
  const std::vector<Entry> figures = {
      {"failures_per_chip_hour", &run.failures_per_chip_hour, 0, 1},
      {"failures_per_host_hour", &run.failures_per_host_hour, 0, 1},
      {"checkpoint_write_bytes_per_s_per_host", &run.write_bytes_per_s, 1e3, 1e15},
      {"checkpoint_read_bytes_per_s_per_host", &run.read_bytes_per_s, 1e3, 1e15},
      {"restart_s", &run.restart_s, 0, 1e7}};
  for (const auto& [key, figure, min, max] : figures) {
    const Json& d = defaults.at(key);
    *figure = {d.at("value").get<double>(), d.at("range")[0].get<double>(), d.at("range")[1].get<double>(),
               d.at("source").get<std::string>()};
  }
  const Json* given = top.optional("training_run");
  if (!given) return;
  Fields f(*given, "training_run", problems);
  if (!f.ok()) return;
  for (const auto& [key, figure, min, max] : figures)
    if (f.has(key)) {
      const double v = f.number(key, min, max);
      *figure = {v, v, v, "the study's training_run"};
    }
  run.checkpoint_every_steps = f.integer_or("checkpoint_every_steps", 0, 1, std::int64_t(1) << 40);
  run.evaluation_every_steps = f.integer_or("evaluation_every_steps", 0, 1, std::int64_t(1) << 40);
  run.evaluation_steps = f.integer_or("evaluation_steps", 0, 1, std::int64_t(1) << 40);
  if (problems.empty() && (run.evaluation_every_steps > 0) != (run.evaluation_steps > 0))
    problems.add("training_run", *given, "evaluation_every_steps and evaluation_steps together, or neither");
  f.finish();
}

/// "schedule": its kind picks the registered schedule, which reads the rest.
void parse_schedule(const Json& schedule, Study& study, Problems& problems) {
  Fields f(schedule, "schedule", problems);
  if (!f.ok()) return;
  std::vector<std::string> kinds;
  for (const auto& [k, _] : schedule_registry()) kinds.push_back(k);
  const std::string kind = f.string("kind", kinds);
  if (!problems.empty()) return;
  study.schedule = schedule_registry().at(kind)(f, study, problems);
  f.finish();
}

/// "hbm_margin": bytes, or "N%" of the device's `usable` HBM; less than all of it.
double parse_hbm_margin(const Json& margin, double usable, Problems& problems) {
  double bytes = -1;
  if (margin.is_number()) bytes = margin.get<double>();
  if (margin.is_string()) {
    // Digits (a decimal point among them) and "%": "%" alone, " 5%", "0x5%" or "1e1%" are none.
    const std::string text = margin.get<std::string>();
    const std::string number = text.size() > 1 && text.back() == '%' ? text.substr(0, text.size() - 1) : "";
    const bool decimal = number.find_first_not_of("0123456789.") == std::string::npos &&
                         number.find_first_of("0123456789") != std::string::npos &&
                         std::count(number.begin(), number.end(), '.') <= 1;
    const double percent = decimal ? std::strtod(number.c_str(), nullptr) : -1;
    if (percent >= 0 && percent < 100) bytes = usable * percent / 100.0;
  }
  if (!(bytes >= 0 && bytes < usable)) {
    problems.add("hbm_margin", margin,
                 "bytes of HBM to leave free on every device (a number >= 0) or a percentage of its usable "
                 "HBM (\"5%\"), less than all of its " +
                     std::to_string(std::int64_t(usable)) + " usable bytes");
    return 0;
  }
  return bytes;
}

/// precision.matmul: the format the layers' products with a weight run in, one the chip's MXUs
/// have (core.int8_peak_ratio_to_bf16, fp8_peak_ratio_to_bf16).
void set_matmul_precision(const std::string& name, Study& study, Problems& problems) {
  CoreSpec& core = study.hardware.core;
  std::vector<std::string> have;
  for (const auto q : {MatmulPrecision::Bf16, MatmulPrecision::Int8, MatmulPrecision::Fp8}) {
    if (core.peak_ratio(q)) have.emplace_back(to_string(q));
    if (name == to_string(q)) core.matmul_precision = q;
  }
  if (!core.peak_ratio(core.matmul_precision)) {
    std::string list;
    for (const auto& h : have) list += (list.empty() ? "" : " or ") + h;
    problems.add("precision.matmul", Json(name),
                 list + ": " + study.hardware.name + "'s MXUs have no " + name +
                     " mode (its file gives no core." + name + "_peak_ratio_to_bf16)");
    core.matmul_precision = MatmulPrecision::Bf16;
  }
}

/// "precision": {"matmul": "bf16" | "int8" | "fp8", "weights": "fp32" | "bf16", "optimizer":
/// "fp32" | "bf16"}: the matmuls' format (set_matmul_precision); the dtype the weights are held,
/// read and updated in, and their gradients computed and reduced in (fp32 masters by default, as
/// the frameworks train: shared/HARDWARE.md; bf16 as MaxText's weight_dtype bfloat16 or
/// Mesh-TensorFlow's slice_dtype bfloat16, not its master_dtype, the checkpoint's); the
/// optimizer slots' (by default the weights': optax's moments take the parameters' dtype and
/// MaxText's mu_dtype defaults to its weight_dtype, read in optax and AI-Hypercomputer/maxtext,
/// not in shared/).
void parse_precision(Fields& top, Study& study, Problems& problems) {
  const Json* p = top.optional("precision");
  if (!p) return;
  Fields f(*p, "precision", problems);
  if (!f.ok()) return;
  const std::string name = f.string_or("matmul", "bf16", {"bf16", "int8", "fp8"});
  auto bytes = [&](const char* key, const char* fallback) {
    return f.string_or(key, fallback, {"fp32", "bf16"}) == "bf16" ? 2.0 : kFp32Bytes;
  };
  const double weights = bytes("weights", "fp32");
  const double slots = bytes("optimizer", weights == 2.0 ? "bf16" : "fp32");
  f.finish();
  if (!problems.empty()) return;
  study.model.store_state_in(weights, slots);
  set_matmul_precision(name, study, problems);
}

/// The hardware's collective algorithms must be registered names (the hardware layer cannot know
/// them), and "megacore" what its chips allow; then the study sees the hardware as its devices.
void parse_devices(Fields& top, Study& study, Problems& problems) {
  const ChipSpec& chip = study.hardware.chip;
  const std::string figure = "hardware(" + study.hardware.file + ").chip.collective_algorithms";
  const std::string problem = sim::collective_algorithms_problem(chip.collective_algorithms);
  if (!problem.empty()) problems.add(figure + ".value", Json(chip.collective_algorithms), problem);
  // Each alternative of its range is a list that --intervals will run: checked as the value is.
  if (const auto r = study.hardware.ranges.find("chip.collective_algorithms");
      r != study.hardware.ranges.end())
    for (const auto& [end, list] : {std::pair{0, &r->second.low}, std::pair{1, &r->second.high}}) {
      std::vector<std::string> names;
      for (const auto& n : *list)
        if (n.is_string()) names.push_back(n.get<std::string>());
      const std::string why = names.size() == list->size() ? sim::collective_algorithms_problem(names)
                                                           : "a list of algorithm names";
      if (!why.empty()) problems.add(figure + ".range[" + std::to_string(end) + "]", *list, why);
    }
  // A chip of one TensorCore is one device either way: megacore asks nothing of it.
  study.megacore = top.boolean_or("megacore", chip.megacore) && chip.cores > 1;
  if (study.megacore && !chip.megacore) {
    problems.add("megacore", Json(true),
                 "false: " + study.hardware.name +
                     " chips cannot run one program on their TensorCores as one device (its chip.megacore is "
                     "false: each TensorCore is a device with its own HBM)");
    study.megacore = false;
  }
  study.hardware = device_view(study.hardware, study.megacore);
  if (const Json* margin = top.optional("hbm_margin")) {
    study.hbm_margin_bytes = parse_hbm_margin(*margin, study.hardware.core.usable_hbm_bytes(), problems);
    study.hardware.core.hbm_reserved_bytes += study.hbm_margin_bytes;
  }
}

/// The key of an assumption already listed that is `key`, or contains it, or lies inside it
/// ("model" and "model.layers" would move one value twice), or "".
std::string overlapping_key(const std::vector<StudyAssumption>& listed, const std::string& key) {
  for (const auto& a : listed)
    if (a.key == key || key.rfind(a.key + ".", 0) == 0 || a.key.rfind(key + ".", 0) == 0) return a.key;
  return "";
}

/// "inferred_from": the ids of the validation cases a value was inferred from.
std::vector<std::string> read_case_ids(const Json& ids, Fields& f, Problems& problems) {
  std::vector<std::string> out;
  const bool strings = ids.is_array() && std::all_of(ids.begin(), ids.end(), [](const Json& id) {
                         return id.is_string() && !id.get<std::string>().empty();
                       });
  if (strings)
    for (const auto& id : ids) out.push_back(id.get<std::string>());
  else
    problems.add(f.path_of("inferred_from"), ids,
                 "an array of the validation case ids the value was inferred from");
  return out;
}

/// An end of an assumption's range must leave the study valid: the study with `key` at `end`
/// (its assumptions aside) is parsed, and a problem at `path` says why not.
void check_range_end(const Json& json, const std::string& key, const Json& end, const std::string& path,
                     const Study& study, const std::filesystem::path& base_dir, Problems& problems) {
  Json variant = Json::object();  // the study without its assumptions, not copied only to be dropped
  for (auto it = json.begin(); it != json.end(); ++it)
    if (it.key() != "assumptions") variant[it.key()] = it.value();
  apply_override(variant, key + "=" + end.dump());
  try {
    parse_study(variant, study.file, base_dir);
  } catch (const ConfigError& e) {
    const std::string why = e.problems().empty()
                                ? std::string(e.what())
                                : e.problems().front().path + ": expected " + e.problems().front().expected;
    problems.add(path, end, "a value the study is valid with (with it: " + why + ")");
  }
}

/// "assumptions": [{"key", "range": [low, high], "source", "inferred_from"?}]: each key a value of
/// the study, each end of its range of the value's type (numbers around it) and a study that is
/// valid with it; "inferred_from" lists the validation cases the value was inferred from.
void parse_assumptions(const Json& list, const Json& json, const std::filesystem::path& base_dir,
                       Study& study, Problems& problems) {
  if (!list.is_array()) {
    problems.add("assumptions", list, "an array of {\"key\", \"range\": [low, high], \"source\"}");
    return;
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    Fields f(list[i], index_path("assumptions", i), problems);
    if (!f.ok()) continue;
    StudyAssumption a;
    a.key = f.string("key");
    const Json* range = f.value("range");
    a.source = f.string("source");
    if (const Json* ids = f.optional("inferred_from")) a.inferred_from = read_case_ids(*ids, f, problems);
    f.finish();
    const Json* value = a.key.empty() ? nullptr : json_at(json, a.key);
    if (!a.key.empty() && (!value || a.key.rfind("assumptions", 0) == 0)) {
      problems.add(f.path_of("key"), Json(a.key),
                   "a dotted path of a value in this study (e.g. schedule.microbatches)");
      continue;
    }
    if (!value || !range) continue;
    if (const std::string other = overlapping_key(study.assumptions, a.key); !other.empty()) {
      problems.add(f.path_of("key"), Json(a.key),
                   "a value no other assumption covers (\"" + other +
                       "\" is listed before: each assumption is counted once)");
      continue;
    }
    const auto same = [&](const Json& end) {
      return end.is_number() ? value->is_number() : end.type() == value->type();
    };
    if (!range->is_array() || range->size() != 2 || !same((*range)[0]) || !same((*range)[1]) ||
        (value->is_number() && !((*range)[0].get<double>() <= value->get<double>() &&
                                 value->get<double>() <= (*range)[1].get<double>()))) {
      problems.add(f.path_of("range"), *range,
                   "[low, high] of the value's type around its value (" + value->dump() + ")");
      continue;
    }
    a.value = *value;
    a.low = (*range)[0];
    a.high = (*range)[1];
    for (int end = 0; end < 2; ++end)
      if ((*range)[end] != *value)  // the study itself, already valid
        check_range_end(json, a.key, (*range)[end], index_path(f.path_of("range"), std::size_t(end)), study,
                        base_dir, problems);
    study.assumptions.push_back(std::move(a));
  }
}

/// "slices": identical slices over the data-center network, each taking batch / slices examples.
void read_slices(Fields& top, Study& study, Problems& problems) {
  study.slices = int(top.integer_or("slices", 1, 1, 4096));
  if (study.slices == 1 || !problems.empty()) return;
  if (!study.hardware.dcn.present)
    problems.add("slices", Json(study.slices),
                 "1: hardware " + study.hardware.name +
                     " describes no data-center network (its file has no \"dcn\" figures) to join slices");
  else if (study.batch % study.slices != 0)
    problems.add("batch", Json(study.batch),
                 "a multiple of the " + std::to_string(study.slices) +
                     " slices (each slice takes an equal share of the batch)");
  else
    study.batch /= study.slices;
}

}  // namespace

Study parse_study(const Json& json, const std::string& context, const std::filesystem::path& base_dir) {
  Study study;
  study.json = json;
  study.file = context;
  Problems problems(context);
  Fields top(json, "", problems);
  if (!top.ok()) problems.throw_if_any();
  if (const Json* d = top.optional("description"); d && !d->is_string())
    problems.add("description", *d, "a string (free text describing the study)");
  top.string_or("schema", "tpusim.study/1", {"tpusim.study/1"});
  const Json* hw = top.value("hardware");
  const bool have_hardware = hw && parse_study_hardware(*hw, base_dir, study, problems);
  if (have_hardware) {
    parse_devices(top, study, problems);
  } else {  // known keys, read once the hardware loads: its error alone is reported
    top.optional("megacore");
    top.optional("hbm_margin");
    top.optional("precision");
  }
  if (const Json* slice = top.value("slice"); slice && have_hardware) {
    study.slice = parse_slice(*slice, "slice", study.hardware, problems);
  }
  if (const Json* p = top.optional("perturbations"); p && problems.empty())
    study.network = read_perturbations(*p, Topology(study.slice), problems);
  if (const Json* model = top.value("model")) study.model = build_model(*model, "model", problems);
  if (have_hardware) {
    study.model.pad_activations_to(study.hardware.core.activation_tile_lanes());
    parse_precision(top, study, problems);
  }
  study.batch = top.integer("batch", 1, std::int64_t(1) << 40);
  read_slices(top, study, problems);
  if (const Json* opt = top.value("optimizer"))
    study.optimizer = parse_optimizer(*opt, "optimizer", problems);
  parse_host_settings(top, study, problems);
  parse_target(top, study, problems);
  parse_training_run(top, study, problems);
  study.compiler_remat = top.boolean_or("compiler_remat", true);
  const Json* schedule = top.value("schedule");
  const Json* assumptions = top.optional("assumptions");
  top.finish();
  problems.throw_if_any();
  if (schedule) parse_schedule(*schedule, study, problems);
  problems.throw_if_any();
  if (assumptions) parse_assumptions(*assumptions, json, base_dir, study, problems);
  problems.throw_if_any();
  return study;
}

Study with_schedule(const Study& base, const Json& schedule) {
  Study study = base;
  study.json["schedule"] = schedule;
  study.schedule.reset();
  Problems problems(base.file);
  parse_schedule(schedule, study, problems);
  problems.throw_if_any();
  return study;
}

Json study_json(const std::filesystem::path& file, const std::vector<std::string>& overrides) {
  return with_overrides(read_json_file(file), overrides);
}

Json with_overrides(Json json, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) {
    apply_override(json, o);
    // A value the user sets is a choice: an assumption about it (or about a part of it) goes.
    const std::string path = o.substr(0, o.find('='));
    if (!json.is_object() || !json.contains("assumptions") || !json["assumptions"].is_array()) continue;
    Json kept = Json::array();
    for (const auto& a : json["assumptions"]) {
      const std::string key =
          a.is_object() && a.contains("key") && a["key"].is_string() ? a["key"].get<std::string>() : "";
      const bool set =
          !key.empty() && (key == path || key.rfind(path + ".", 0) == 0 || path.rfind(key + ".", 0) == 0);
      if (!set) kept.push_back(a);
    }
    json["assumptions"] = kept;
  }
  return json;
}

Study load_study(const std::filesystem::path& file, const std::vector<std::string>& overrides) {
  return parse_study(study_json(file, overrides), file.string(), file.parent_path());
}

}  // namespace tpusim
