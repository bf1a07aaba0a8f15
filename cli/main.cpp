// The tpusim command: parses arguments, calls the library's workflows (workflows/: run, check,
// describe, fit, sweep, validate, plan) and prints what they give.
// Exit codes: 0 success; 1 the simulation ran and something failed (deadlock, --require-fit
// not met); 2 bad input (the message names the JSON path, the value and what is expected).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "cli/describe.hpp"
#include "cli/progress_lines.hpp"
#include "cli/run_progress.hpp"
#include "cli/signals.hpp"
#include "reports/plan_report.hpp"
#include "reports/run_report.hpp"
#include "reports/validation_report.hpp"
#include "workflows/dask_runner.hpp"
#include "workflows/fit.hpp"
#include "workflows/interrupt.hpp"
#include "workflows/plan.hpp"
#include "workflows/plan_space.hpp"
#include "workflows/run.hpp"
#include "workflows/sweep.hpp"
#include "workflows/validate.hpp"

namespace fs = std::filesystem;
using namespace tpusim;

namespace {

/// With --require-fit, a resident state alone over HBM: said on stderr (and the small answer
/// with --json); exit 1.
int resident_overflow_exit(const workflows::RunOptions& o, const Json& over) {
  std::cerr << "tpusim: the study does not fit in HBM (--require-fit): core " << over.at("core").get<int>()
            << " holds " << reports::human_bytes(over.at("peak_hbm_bytes").get<double>())
            << " of resident state (" << over.at("resident").get<std::string>() << ") of "
            << reports::human_bytes(over.at("hbm_capacity_bytes").get<double>()) << " usable, over by "
            << reports::human_bytes(over.at("overflow").at("bytes_over").get<double>())
            << "; the step was not simulated\n";
  if (o.json) std::cout << over.dump(2) << "\n";
  return 1;
}

int cmd_run(const workflows::RunOptions& o) {
  // One simulation in this process cannot stop part-way and keep anything (its children, the
  // uniform pod's run and the intervals' ends, die with it).
  cli::exit_on_stop_signals(o.out.empty() ? "the step was not finished"
                                          : "the step was not finished; nothing was written to --out");
  cli::RunProgress progress;  // from the start: a slow graph build shows in its elapsed time
  const workflows::RunOutcome run = workflows::run_study(
      o, [&](int done, int total, double simulated_s) { progress.update(done, total, simulated_s); });
  if (!run.simulated) return resident_overflow_exit(o, run.result);
  if (o.json) {
    std::cout << run.result.dump(2) << "\n";
  } else {
    std::cout << reports::summary_text(run.result);
    if (!o.out.empty())
      std::cout << "  wrote             " << o.out
                << "/: result.json report.md report.html timeline.svg memory.svg"
                << (run.result.contains("perturbations") ? " chips.svg" : "")
                << (o.trace ? " trace.json" : "") << "\n";
  }
  if (o.require_fit && !run.fits) {
    std::cerr << "tpusim: the study does not fit in HBM (--require-fit)\n";
    return 1;
  }
  return 0;
}

int cmd_fit(workflows::FitOptions o, bool json) {
  std::optional<cli::ProbeProgress> progress(std::in_place, o.path);
  o.probe_done = [&](const std::string& value, const std::string& verdict) {
    progress->probe_done(value, verdict);
  };
  const workflows::FitResult r = workflows::fit_study(o);
  progress.reset();  // its line ends before the answer
  if (!r.failure.empty()) {
    std::cerr << "tpusim fit: a probe failed, so the search has no answer: " << r.failure << "\n";
    return workflows::kFitProbeFailed;
  }
  std::cout << (json ? workflows::fit_json(o, r).dump(2) + "\n" : workflows::fit_text(o, r));
  return 0;
}

int cmd_sweep(workflows::SweepOptions o) {
  cli::SweepProgress progress;
  o.started = [&](std::size_t points, std::size_t recorded) { progress.started(points, recorded); };
  o.point_done = [&](const std::string& key, const std::string& error) { progress.point_done(key, error); };
  const workflows::SweepOutcome s = workflows::sweep_study(o);
  std::cout << "tpusim sweep: " << s.points.size() << " points (" << s.failed << " failed) in " << s.dir
            << ": results.jsonl results.csv report.html report.md\n";
  return s.failed == 0 ? 0 : 1;
}

int cmd_merge(const std::vector<std::string>& dirs, const std::string& out) {
  const workflows::SweepOutcome s = workflows::merge_sweeps(dirs, out);
  std::cout << "tpusim merge: " << s.points.size() << " of " << s.points_in_sweep << " points (" << s.failed
            << " failed) in " << s.dir << "\n";
  return s.failed == 0 ? 0 : 1;
}

int cmd_validate(const workflows::ValidateOptions& o) {
  const workflows::ValidationOutcome v = workflows::validate_cases(o);
  if (o.json)
    std::cout << v.report.dump(2) << "\n";
  else
    std::cout << reports::validation_text(v.report);
  if (!v.moved.empty()) {
    std::cerr << "tpusim validate --check: predictions moved from the recorded ones:";
    for (const auto& id : v.moved) std::cerr << " " << id;
    std::cerr << " (record them with --record once the change is explained)\n";
  }
  return v.passed ? 0 : 1;
}

int cmd_plan(workflows::PlanOptions o) {
  std::optional<cli::RunProgress> bounding;  // a line while the candidates are bounded
  o.bounding_progress = [&](int done, int total) {
    if (done < 0) return bounding.reset();
    if (!bounding) bounding.emplace("bounding candidates", "candidates");
    bounding->update(done, total);
  };
  o.search_log = [](const std::string& line) { std::cerr << line << "\n" << std::flush; };
  const workflows::PlanOutcome p = workflows::plan_study(o);
  if (o.json)
    std::cout << p.plan.dump(2) << "\n";
  else
    std::cout << reports::plan_text(p.plan);
  if (!p.stop_reason.empty())
    std::cerr << "tpusim plan: incomplete, stopped by " << p.stop_reason << ": the best plan found so far\n";
  if (p.signal) return 128 + p.signal;
  if (p.plan["best"].is_null()) {
    std::cerr << "tpusim plan: no plan fits; the closest: " << p.closest << "\n";
    return 1;
  }
  return 0;
}

int cmd_check(const std::string& file, const std::vector<std::string>& sets) {
  const std::string what = workflows::check_study(file, sets);
  std::cout << file << ": ok " << what << "\n";
  return 0;
}

/// What a subcommand does once its options are parsed: an exit code.
using Action = std::function<int()>;
/// Every subcommand with its action (options live as long as the actions).
using Commands = std::vector<std::pair<CLI::App*, Action>>;

/// The study file and its repeatable `--set` overrides, as the study commands take them.
void add_study(CLI::App* cmd, std::string& study, std::vector<std::string>& sets,
               const std::string& about = "study JSON file") {
  cmd->add_option("study", study, about)->required();
  cmd->add_option("--set", sets, "override a study field: dotted.path=value (repeatable)");
}

/// --hbm-margin BYTES|N%: the study's "hbm_margin" (HBM left free on every device), as a --set.
void add_hbm_margin(CLI::App* cmd, std::vector<std::string>& sets) {
  cmd->add_option("--hbm-margin",
                  "HBM to leave free on every device: bytes, or a percentage of its usable HBM "
                  "(\"5%\"); the study's hbm_margin")
      ->each([&sets](const std::string& v) {
        char* end = nullptr;
        std::strtod(v.c_str(), &end);
        const bool number = !v.empty() && end && *end == '\0';
        sets.push_back("hbm_margin=" + (number ? v : nlohmann::json(v).dump()));
      });
}

/// CLI11's "Could not convert: --top = 1e9" as the other bad inputs are said: the option, the
/// value found and what is expected (the kind of number, and the option's own description).
std::string conversion_problem(const CLI::App& app, const std::string& what) {
  const std::string prefix = "Could not convert: ";
  const auto eq = what.find(" = ");
  if (what.rfind(prefix, 0) != 0 || eq == std::string::npos) return what;
  const std::string name = what.substr(prefix.size(), eq - prefix.size()), value = what.substr(eq + 3);
  const CLI::Option* option = nullptr;
  for (const CLI::App* sub : app.get_subcommands())
    if (!option) option = sub->get_option_no_throw(name);
  if (!option) option = app.get_option_no_throw(name);
  std::string expected = "a value of the option's type";
  if (option) {
    const std::string type = option->get_type_name();
    expected = type == "INT" || type == "UINT" ? "a whole number written in digits (e.g. 5)"
               : type == "FLOAT"               ? "a number (e.g. 2.5)"
                                               : "a " + type;
    expected += ": " + option->get_description();
  }
  return name + ": found \"" + value + "\", expected " + expected;
}

/// --plan-label LABEL: the schedule (and the model's attention) a plan's label names; apply()
/// turns it into --sets when the command runs (a bad label is bad input there, exit 2).
struct PlanLabel {
  std::string label;
  void add(CLI::App* cmd) {
    cmd->add_option("--plan-label", label,
                    "run the schedule a plan's label names, as tpusim plan prints it (e.g. \"one_f_one_b "
                    "K=4 R=16 M=64 V=4 cost-cut sharded flash\"): the study's schedule replaced (its "
                    "batch_norm_group kept, as plan keeps it), its attention set when the label ends in one");
  }
  void apply(const std::string& study, std::vector<std::string>& sets) const {
    if (label.empty()) return;
    for (auto& s : workflows::plan_label_sets(label, study, sets)) sets.push_back(std::move(s));
  }
};

void add_run(CLI::App& app, Commands& commands) {
  auto run = std::make_shared<workflows::RunOptions>();
  auto* cmd = app.add_subcommand("run", "simulate one training step of a study");
  add_study(cmd, run->study, run->sets);
  auto label = std::make_shared<PlanLabel>();
  label->add(cmd);
  cmd->add_option("--out", run->out,
                  "write result.json, report.md, timeline.svg, memory.svg (and trace.json) here");
  cmd->add_flag("--json", run->json, "print result.json to stdout instead of the summary");
  cmd->add_flag("--trace", run->trace, "also write a Chrome/Perfetto trace (needs --out)");
  cmd->add_flag("--require-fit", run->require_fit, "exit 1 if the step does not fit in HBM");
  cmd->add_flag("--no-symmetry", run->no_symmetry,
                "simulate every ring of every collective (slower; same result)");
  cmd->add_flag("--approximate-sharing", run->approximate_sharing,
                "where collectives sharing links may run at once (no exact reduction), simulate "
                "representative rings anyway, leaving out their contention with the rest (seconds "
                "instead of minutes on a pod; the result says so); --intervals' runs always do");
  cmd->add_flag("--functional", run->functional,
                "also run the real math on the host and compare with one core");
  cmd->add_option("--steps", run->steps, "functional mode: training steps (default 3)");
  cmd->add_flag("--intervals", run->intervals,
                "also the spread of the prediction over the ranges of its assumptions (2 runs each)");
  cmd->add_option("-j,--jobs", run->jobs, "with --intervals: runs at once (default: the number of cores)");
  cmd->add_option("--seed", run->seed,
                  "functional mode: seed of the weights and the synthetic data (default 1)");
  cmd->add_option("--max-host-memory", run->max_host_memory_bytes,
                  "bytes of host memory a run may use (the simulation's estimate, and functional mode's "
                  "real tensors); more is refused up front, exit 2 (default: half of this machine's)");
  commands.emplace_back(cmd, [run, label] {
    if (run->trace && run->out.empty())
      throw ConfigError("--trace", "", "no --out directory", "--out DIR to write trace.json into");
    label->apply(run->study, run->sets);
    return cmd_run(*run);
  });
}

void add_check(CLI::App& app, Commands& commands) {
  auto file = std::make_shared<std::string>();
  auto sets = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("check", "validate a study without simulating");
  add_study(cmd, *file, *sets);
  auto label = std::make_shared<PlanLabel>();
  label->add(cmd);
  commands.emplace_back(cmd, [file, sets, label] {
    label->apply(*file, *sets);
    return cmd_check(*file, *sets);
  });
}

/// --plan, --plan-time-limit and --plan-space: each `what` (a sweep point, a fit probe) a plan search.
void add_plan_per_point(CLI::App* cmd, workflows::PlanPerPoint& plan, const std::string& what,
                        const std::string& about) {
  cmd->add_flag("--plan", plan.on, about);
  cmd->add_option("--plan-time-limit", plan.time_limit_s,
                  "with --plan: each " + what +
                      "'s search answers with the best plan found within this many "
                      "seconds");
  cmd->add_option("--plan-space", plan.space,
                  "with --plan: a tpusim.plan_space/1 file narrowing every " + what + "'s search");
}

void add_fit(CLI::App& app, Commands& commands) {
  struct FitCliOptions : workflows::FitOptions {
    bool json = false;
  };
  auto fit = std::make_shared<FitCliOptions>();
  auto* cmd =
      app.add_subcommand("fit", "the largest value of a numeric field for which the study fits in HBM");
  add_study(cmd, fit->study, fit->sets);
  cmd->add_option("--maximize", fit->path, "dotted path of the field, e.g. model.layers")->required();
  cmd->add_option("--min", fit->min, "smallest value (default 1)");
  cmd->add_option("--max", fit->max, "largest value (default: search upwards by doubling)");
  add_hbm_margin(cmd, fit->sets);
  cmd->add_option("--step", fit->step, "granularity of the answer (default 1)");
  cmd->add_flag("--json", fit->json, "machine-readable output");
  cmd->add_option(
      "--probe-timeout", fit->probe_timeout_s,
      "seconds after which a probe still running is killed: the search fails (exit 3) (default: none)");
  cmd->add_flag(
      "--intervals", fit->intervals,
      "also the answer's spread over the ranges of the study's assumptions (a search per range end)");
  cmd->add_option("-j,--jobs", fit->jobs,
                  "with --intervals: searches at once (default: the number of cores)");
  add_plan_per_point(
      cmd, fit->plan, "probe",
      "each probe a plan search: the largest value some plan (tpusim plan's best) runs in HBM; -j "
      "its simulations at once");
  commands.emplace_back(cmd, [fit] { return cmd_fit(*fit, fit->json); });
}

/// `--dask ADDRESS`: the command's simulations run as tasks on that Dask cluster.
void add_dask(CLI::App* cmd, std::string& address) {
  cmd->add_option("--dask", address,
                  "run the simulations as tasks on the Dask scheduler at ADDRESS (e.g. tcp://host:8786; the "
                  "study readable at the same path on its workers); -j defaults to its worker threads");
}

/// Runs `action`, its children on the Dask cluster at `address` when one is given (`jobs` 0 then
/// becomes the cluster's worker threads).
int on_cluster(const std::string& address, int& jobs, const std::function<int()>& action) {
  return workflows::with_cluster(address, jobs, action);
}

void add_sweep_and_merge(CLI::App& app, Commands& commands) {
  auto sweep = std::make_shared<workflows::SweepOptions>();
  auto* cmd =
      app.add_subcommand("sweep", "run a study over a grid of settings, each point in its own process");
  cmd->add_option("study", sweep->study, "study JSON file")->required();
  cmd->add_option("--grid", sweep->grids,
                  "PATH=v1,v2,... or a range a..b, a..b:+k, a..b:xk (repeatable: cartesian product)");
  cmd->add_option("--zip", sweep->zips, "PATH=v1,v2,...: zip axes move together (same length)");
  cmd->add_option("--set", sweep->sets, "override a study field for every point");
  cmd->add_option("-j,--jobs", sweep->jobs, "points run at once (default: the number of cores)");
  cmd->add_option("--out", sweep->out, "output directory (default out/sweep)");
  cmd->add_flag("--resume", sweep->resume, "skip points already recorded in --out");
  cmd->add_option("--shard", sweep->shard,
                  "run shard i/n of the points (0 <= i < n); default from SLURM_ARRAY_TASK_ID/COUNT");
  cmd->add_option(
      "--point-timeout", sweep->point_timeout_s,
      "seconds after which a point still running is killed and recorded as failed (default: none)");
  add_plan_per_point(
      cmd, sweep->plan, "point",
      "re-plan each point: its result is tpusim plan's best (the plan's label in results.csv and "
      "the report; no plan fitting is the point's error)");
  auto dask = std::make_shared<std::string>();
  add_dask(cmd, *dask);
  commands.emplace_back(
      cmd, [sweep, dask] { return on_cluster(*dask, sweep->jobs, [&] { return cmd_sweep(*sweep); }); });

  auto dirs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto* merge = app.add_subcommand("merge", "combine the outputs of sweep shards");
  merge->add_option("dirs", *dirs, "sweep output directories")->required();
  merge->add_option("--out", *out, "output directory")->required();
  commands.emplace_back(merge, [dirs, out] { return cmd_merge(*dirs, *out); });
}

void add_validate(CLI::App& app, Commands& commands) {
  auto validate = std::make_shared<workflows::ValidateOptions>();
  auto* cmd =
      app.add_subcommand("validate", "compare predictions with the measured TPU runs of configs/validation/");
  cmd->add_option("cases", validate->ids, "case ids (default: every case)");
  cmd->add_option("-j,--jobs", validate->jobs, "cases run at once (default: the number of cores)");
  cmd->add_flag("--json", validate->json, "print the tpusim.validation/1 JSON instead of the table");
  cmd->add_option("--out", validate->out, "write validation.json, validation.md and validation.html here");
  cmd->add_option("--cases-dir", validate->dir, "folder of validation cases (default: configs/validation)");
  cmd->add_option("--hardware-override", validate->hardware_overrides,
                  "figure=value (repeatable): run every case with this figure of its hardware changed, e.g. "
                  "core.hbm_sustained_bandwidth_fraction=0.85");
  cmd->add_flag("--check", validate->check,
                "a regression check: exit 0 when every case predicts what was recorded "
                "(CASES/recorded/predictions.json, 1e-9 relative), within its tolerance or not; 1 otherwise");
  cmd->add_flag("--record", validate->record, "record this run's predictions for --check");
  cmd->add_flag("--intervals", validate->intervals,
                "also each case's prediction interval over its assumptions' ranges, and whether the "
                "measured value lies inside it (coverage)");
  cmd->add_flag("--sensitivity", validate->sensitivity,
                "also show how much each prediction moves when each assumed hardware figure moves up by 10 % "
                "(a flag: turned over)");
  auto dask = std::make_shared<std::string>();
  add_dask(cmd, *dask);
  commands.emplace_back(cmd, [validate, dask] {
    return on_cluster(*dask, validate->jobs, [&] { return cmd_validate(*validate); });
  });
}

void add_plan(CLI::App& app, Commands& commands) {
  auto plan = std::make_shared<workflows::PlanOptions>();
  auto* cmd = app.add_subcommand(
      "plan", "search the fastest schedule that fits for a study's model, batch and slice");
  add_study(cmd, plan->study, plan->sets, "study JSON file (its schedule is ignored)");
  cmd->add_option(
      "--objective", plan->objective,
      "step_time_s (default), examples_per_s or time_to_train (a study with a target: the same order, "
      "the batch and the slice being fixed; each plan's days and cost reported)");
  cmd->add_option("--top", plan->top, "plans to report with their results (default 5)");
  cmd->add_option("--space", plan->space, "a tpusim.plan_space/1 file narrowing the search");
  add_hbm_margin(cmd, plan->sets);
  cmd->add_option("-j,--jobs", plan->jobs, "simulations at once (default: the number of cores)");
  cmd->add_flag("--json", plan->json, "print the tpusim.plan/1 JSON instead of the table");
  cmd->add_option("--out", plan->out, "write plan.json, plan.md, plan.html and best.json here");
  cmd->add_flag("--exhaustive", plan->exhaustive, "simulate every valid candidate (checks the search)");
  cmd->add_option("--point-timeout", plan->point_timeout_s, "kill a simulation running longer (seconds)");
  cmd->add_option("--time-limit", plan->time_limit_s,
                  "answer with the best plan found within this many seconds, marked incomplete (SIGINT and "
                  "SIGTERM do the same)");
  auto dask = std::make_shared<std::string>();
  add_dask(cmd, *dask);
  commands.emplace_back(
      cmd, [plan, dask] { return on_cluster(*dask, plan->jobs, [&] { return cmd_plan(*plan); }); });
}

void add_describe(CLI::App& app, Commands& commands) {
  struct DescribeOptions {
    std::string hardware, slice, slice_hardware, study, ops;
    std::vector<std::string> sets;
    bool json = false;
  };
  auto o = std::make_shared<DescribeOptions>();
  auto* describe = app.add_subcommand("describe", "print derived figures of hardware or a slice");
  describe->require_subcommand(1);
  auto* hw = describe->add_subcommand("hardware", "a hardware generation (name or path)");
  hw->add_option("name", o->hardware, "e.g. tpu-v3 or path/to/hardware.json")->required();
  hw->add_flag("--json", o->json, "machine-readable output");
  commands.emplace_back(hw, [o] { return cli::describe_hardware(std::cout, o->hardware, o->json); });
  auto* model = describe->add_subcommand("model", "per-layer table of a study's model on one core");
  add_study(model, o->study, o->sets);
  model->add_flag("--json", o->json, "machine-readable output");
  model->add_option("--ops", o->ops,
                    "list one layer's hardware ops instead (forward, then backward): time, bound");
  commands.emplace_back(model,
                        [o] { return cli::describe_model(std::cout, o->study, o->sets, o->json, o->ops); });
  auto* opt =
      describe->add_subcommand("optimizers", "every optimizer rule: slots, update cost and its derivation");
  opt->add_flag("--json", o->json, "machine-readable output");
  commands.emplace_back(opt, [o] { return cli::describe_optimizers(std::cout, o->json); });
  auto* slice = describe->add_subcommand("slice", "a named slice");
  slice->add_option("name", o->slice, "e.g. v3-32")->required();
  slice->add_option("--hardware", o->slice_hardware,
                    "hardware to look the slice up in (default: every shipped one)");
  slice->add_flag("--json", o->json, "machine-readable output");
  commands.emplace_back(slice,
                        [o] { return cli::describe_slice(std::cout, o->slice, o->slice_hardware, o->json); });
}

/// Runs the parsed subcommand's action; typed errors become exit codes here and only here.
int dispatch(const Commands& commands) {
  try {
    for (const auto& [cmd, action] : commands)
      if (*cmd) return action();
  } catch (const workflows::Interrupted& e) {
    std::cerr << "tpusim: " << e.what() << "\n";
    return 128 + e.signal();
  } catch (const ConfigError& e) {
    std::cerr << "tpusim: bad input\n" << e.what() << "\n";
    return 2;
  } catch (const ResourceError& e) {
    std::cerr << "tpusim: too large to simulate on this machine\n" << e.what() << "\n";
    return 2;
  } catch (const SimulationError& e) {
    std::cerr << "tpusim: simulation failed: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tpusim: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cli::die_with_parent();  // a sweep's, plan's or fit's child ends with it
  cli::install_stop_catcher();
  auto logger = spdlog::stderr_color_st("tpusim");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::warn);

  CLI::App app{"tpusim: a discrete-event simulator of TPU pods and their training schedules"};
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "log progress to stderr");
  Commands commands;
  for (auto add : {add_run, add_check, add_fit, add_sweep_and_merge, add_validate, add_plan, add_describe})
    add(app, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ConversionError& e) {
    std::cerr << "tpusim: bad input\n" << conversion_problem(app, e.what()) << "\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  if (verbose) spdlog::set_level(spdlog::level::debug);
  return dispatch(commands);
}
