#include "workflows/run.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "hardware/topology.hpp"
#include "reports/report_html.hpp"
#include "reports/run_report.hpp"
#include "reports/svg.hpp"
#include "schedules/functional_runtime.hpp"
#include "schedules/host_input.hpp"
#include "schedules/study.hpp"
#include "sim/engine.hpp"
#include "workflows/child_process.hpp"
#include "workflows/compiler_remat.hpp"
#include "workflows/intervals.hpp"
#include "workflows/model_error.hpp"
#include "workflows/output_file.hpp"
#include "workflows/time_to_train.hpp"
#include "workflows/validate.hpp"

namespace tpusim::workflows {
namespace fs = std::filesystem;

double half_of_physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? 0.5 * double(pages) * double(page) : 4e9;
}

namespace {

/// The names of a slice's torus dimensions: x, y, z, ...
std::vector<std::string> dimension_names(const SliceSpec& slice) {
  std::vector<std::string> names;
  for (int d = 0; d < slice.dims(); ++d) names.push_back(Topology::dimension_name(d));
  return names;
}

/// What a user should know about the run: an overridden hardware figure its schedule never
/// reads, and what the schedule says of the what-if (against the study on the base hardware).
std::vector<std::string> run_notes(const Study& study) {
  std::vector<std::string> notes;
  const Json& hw = study.json.value("hardware", Json());
  if (!hw.is_object() || !hw.contains("override") || !hw["override"].is_object()) return notes;
  const Json& overrides = hw["override"];
  for (const auto& [figure, why] : study.schedule->ignored_hardware_figures())
    if (overrides.contains(figure))
      notes.push_back(figure + " cannot affect this " + study.schedule->resolved().value("kind", "") +
                      " schedule: " + why);
  std::optional<Study> plain;
  bool tried = false;
  const auto on_base = [&]() -> const Study* {
    if (!tried) {
      tried = true;
      Json base = study.json;
      base["hardware"] = hw["base"];
      try {
        plain = parse_study(base, study.file, fs::path(study.file).parent_path());
      } catch (const ConfigError&) {
        // The base hardware cannot run this study: nothing to compare with.
      }
    }
    return plain ? &*plain : nullptr;
  };
  for (auto& note : study.schedule->what_if_notes(study, on_base)) notes.push_back(std::move(note));
  return notes;
}

/// What the step itself adds to the notes: the study's HBM margin, dimensions padded to split.
std::vector<std::string> step_notes(const Study& study, const BuiltStep& step) {
  std::vector<std::string> notes;
  if (study.hbm_margin_bytes > 0)
    notes.push_back("a margin of " + reports::human_bytes(study.hbm_margin_bytes) +
                    " of HBM is kept free on every device (hbm_margin): the capacity shown is the usable HBM "
                    "less it");
  if (const MatmulPrecision p = study.hardware.core.matmul_precision; p != MatmulPrecision::Bf16) {
    std::ostringstream ratio;
    ratio << *study.hardware.core.peak_ratio(p);
    notes.push_back(
        std::string("the layers' products with a weight run in ") + to_string(p) + " (precision.matmul) at " +
        ratio.str() +
        " x the bf16 peak, each operand quantized by a pass of its own first; attention's products "
        "stay bf16; mxu_utilization is against the bf16 peak");
  }
  if (study.model.weight_bytes != kFp32Bytes || study.model.slot_bytes != kFp32Bytes) {
    auto dtype = [](double bytes) { return std::string(bytes == kFp32Bytes ? "fp32" : "bf16"); };
    notes.push_back("the weights are held, read and updated in " + dtype(study.model.weight_bytes) +
                    ", their gradients computed and reduced in it (precision.weights), the optimizer's slots "
                    "held in " +
                    dtype(study.model.slot_bytes) + " (precision.optimizer)");
  }
  if (study.model.flash_attention && study.hardware.core.flash_attention_kernel == false) {
    const auto source = study.hardware.sources.find("core.flash_attention_kernel");
    notes.push_back("flash attention on " + study.hardware.name + " is a what-if: " +
                    (source != study.hardware.sources.end()
                         ? source->second
                         : "the hardware file says it had no such kernel"));
  }
  if (step.details.contains("padded"))
    for (const auto& [dim, p] : step.details["padded"].items())
      notes.push_back(dim + " padded from " + std::to_string(p["size"].get<std::int64_t>()) + " to " +
                      std::to_string(p["padded_to"].get<std::int64_t>()) + " to split it over " +
                      std::to_string(p["cores"].get<int>()) + " cores (as frameworks pad the embedding)");
  return notes;
}

reports::RunInfo run_info(const Study& study, const BuiltStep& step) {
  reports::RunInfo info;
  Json echo = study.json;
  echo["schedule"] = study.schedule->resolved();
  info.study = echo;
  info.hardware = study.hardware.name;
  info.slice = study.slice.name;
  info.chips = study.slice.shape;
  info.wraparound = study.slice.wraparound;
  info.dimension_names = dimension_names(study.slice);
  info.cores_per_chip = study.hardware.chip.cores;
  info.megacore = study.megacore;
  info.notes = run_notes(study);
  for (auto& note : step_notes(study, step)) info.notes.push_back(std::move(note));
  info.model_kind = study.model.kind;
  info.model_name = study.model.name;
  info.params = study.model.params();
  info.layers = std::int64_t(study.model.layers.size());
  info.batch = study.global_batch();
  info.slices = study.slices;
  info.schedule = study.schedule->resolved().value("kind", "");
  info.schedule_details = step.details;
  info.peak_flops_per_core = study.hardware.core.peak_matmul_flops_per_s();
  info.model_flops = step.model_flops;
  if (study.model.mixture_of_experts)  // the experts' FLOPs at their routed tokens, not their slots
    info.useful_model_flops = study.model.routed
                                  ? step.model_flops * study.model.routed->step_model_flops(study.batch) /
                                        study.model.step_model_flops(study.batch)
                                  : step.model_flops;
  info.hardware_flops = step.hardware_flops;
  const HostInput host = host_input(study);
  info.input_bound_s = host.bound_s();
  info.loop_overhead_s = host.loop_overhead_s;
  info.input =
      Json{{"bytes_per_example", host.bytes_per_example},
           {"hosts", host.hosts},
           {"busiest_chip", host.busiest_chip},
           {"busiest_chip_bytes", host.chip_bytes},
           {"infeed_s", host.infeed_s},
           {"busiest_host", host.busiest_host},
           {"busiest_host_examples", host.host_examples},
           {"host_examples_per_s",
            study.host_examples_per_s > 0 ? Json(study.host_examples_per_s) : Json(nullptr)},
           {"host_seconds_per_step", study.host_seconds_per_step},
           {"preparation_s", study.host_preparation_given() ? Json(host.preparation_s) : Json(nullptr)},
           {"loop_overhead_s", host.loop_overhead_s}};
  return info;
}

void write_file(const fs::path& path, const std::string& text) { write_output_file(path, text); }

/// The quantities a run's interval covers, from its result JSON.
std::map<std::string, double> run_quantities(const Json& result) {
  std::map<std::string, double> q;
  for (const char* name :
       {"step_time_s", "examples_per_s", "mxu_utilization", "peak_hbm_bytes", "activation_bytes_total"})
    if (const auto v = output_quantity(name, result)) q[name] = *v;
  return q;
}

/// --intervals: the spread of the run's quantities over its assumptions' ranges (cli/intervals.hpp).
Json run_intervals(const RunOptions& o, const Study& study, const Json& result) {
  std::vector<std::string> unranged;
  const auto ranges = assumed_ranges(study, &unranged);
  // A range end that defeats the exact reductions (overlapping the gradient reduction with the
  // backward on a pod) is simulated approximately rather than flow by flow; the result lists it.
  std::vector<std::string> args = {"run", o.study, "--json", "--approximate-sharing"};
  for (const auto& s : o.sets) args.insert(args.end(), {"--set", s});
  const auto ends = run_variants(args, study, ranges, job_count(o.jobs), run_quantities);
  Json intervals = intervals_json(run_quantities(result), ranges, ends, unranged);
  intervals["with_model_error"] =
      with_model_error(validated_error(model_family(study.model.kind)), intervals);
  // The verdict at each end of the memory interval: a plan at the edge of HBM is not a purchase.
  const double capacity = result["hbm_capacity_bytes"].get<double>();
  const auto& peak = intervals["peak_hbm_bytes"];
  intervals["fits"] = peak[1].get<double>() <= capacity   ? "yes"
                      : peak[0].get<double>() <= capacity ? "only at the low end"
                                                          : "no";
  return intervals;
}

/// A small result saying a core's resident state alone is over its usable HBM (fits false, not
/// simulated): `core` holds `bytes` of it (`parts`: what they are).
Json resident_overflow_json(int core, const std::string& parts, double bytes, double usable) {
  return Json{
      {"fits", false},
      {"simulated", false},
      {"core", core},
      {"resident", parts},
      {"peak_hbm_bytes", bytes},
      {"hbm_capacity_bytes", usable},
      {"overflow",
       {{"core", core}, {"task", "resident state"}, {"time_s", 0.0}, {"bytes_over", bytes - usable}}}};
}

/// When the state a core holds all step (weights, optimizer slots, gradient accumulators)
/// already exceeds its usable HBM: a small result saying so (fits false, not simulated).
std::optional<Json> resident_overflow(const Study& study, const sim::TaskGraph& graph) {
  const double usable = study.hardware.core.usable_hbm_bytes();
  const int worst = graph.most_resident_core();
  if (worst < 0 || graph.resident_bytes(worst) <= usable) return std::nullopt;
  return resident_overflow_json(worst, reports::categories_text(graph.resident()[std::size_t(worst)]),
                                graph.resident_bytes(worst), usable);
}

/// Before any graph is built: when even every weight and optimizer slot held once, spread evenly
/// over every device, is over a device's usable HBM, no schedule fits (each holds at least that
/// share on some device), and a what-if far too large answers without building its step.
std::optional<Json> resident_floor_overflow(const Study& study) {
  const double floor = study.state_bytes() / double(study.cores()),
               usable = study.hardware.core.usable_hbm_bytes();
  if (floor <= usable) return std::nullopt;
  return resident_overflow_json(
      0, "weights and optimizer slots, spread evenly over all " + std::to_string(study.cores()) + " devices",
      floor, usable);
}

/// Functional mode's runtime for the study, its budget and step count checked (null without it).
std::unique_ptr<FunctionalRuntime> functional_runtime(const RunOptions& o, const Study& study) {
  if (!o.functional) return nullptr;
  if (study.slices > 1)
    throw ConfigError(study.file, "slices", std::to_string(study.slices),
                      "1 in functional mode (it runs one slice's math; the reduction across slices is timed, "
                      "not computed)");
  FunctionalRuntime::check_supported(study);
  if (o.steps < 1) throw ConfigError("--steps", "", std::to_string(o.steps), "at least 1 step");
  const double need = FunctionalRuntime::host_bytes_needed(study, study.cores());
  if (need > o.max_host_memory_bytes) {
    throw ConfigError("--functional", "",
                      "a need of " + reports::human_bytes(need) + " of host memory for real tensors",
                      "at most the budget of " + reports::human_bytes(o.max_host_memory_bytes) +
                          " (shrink the model or batch, or raise --max-host-memory)");
  }
  auto functional = std::make_unique<FunctionalRuntime>(study, o.seed);
  functional->begin_step(0);
  return functional;
}

/// The later steps replayed and compared with one core: result.json's "functional".
Json functional_json(const RunOptions& o, const Study& study, FunctionalRuntime& functional,
                     const BuiltStep& step, const sim::SimResult& result) {
  functional.keep_first_gradients();
  functional.replay(step.graph, result.completion_order, o.steps);
  const auto reference = FunctionalRuntime::reference(study, o.steps, o.seed);
  return Json{{"steps", o.steps},
              {"seed", o.seed},
              {"loss", functional.losses()},
              {"reference_loss", reference->losses()},
              {"max_rel_diff", functional.max_rel_diff(*reference)},
              {"gradient_max_rel_diff", functional.gradient_max_rel_diff(*reference)},
              {"weights_fingerprint", functional.weights_fingerprint()},
              {"replicas_identical", functional.replicas_identical()}};
}

/// A run report's images: the timeline, the memory chart and, for a perturbed run, the map of
/// its chips.
std::map<std::string, std::string> report_images(const Json& j, std::string timeline) {
  std::map<std::string, std::string> images{{"timeline.svg", std::move(timeline)},
                                            {"memory.svg", reports::memory_svg(j)}};
  if (j.contains("perturbations")) images["chips.svg"] = reports::chips_svg(j);
  return images;
}

/// --out: result.json, report.md and report.html, the timeline and memory charts, and with --trace the trace.
void write_run_outputs(const RunOptions& o, const Study& study, const BuiltStep& step,
                       const sim::SimResult& result, const Json& j) {
  make_output_directory(o.out);
  const std::string md = reports::report_markdown(j);
  const auto images = report_images(j, reports::timeline_svg(step.graph, result));
  write_file(fs::path(o.out) / "result.json", j.dump(2) + "\n");
  write_file(fs::path(o.out) / "report.md", md);
  write_file(fs::path(o.out) / "report.html", reports::report_html(md, images, "tpusim run"));
  for (const auto& [name, svg] : images) write_file(fs::path(o.out) / name, svg);
  if (o.trace)
    write_file(fs::path(o.out) / "trace.json",
               reports::chrome_trace(step.graph, result, study.hardware.chip.cores,
                                     dimension_names(study.slice), study.network)
                       .dump() +
                   "\n");
}

/// --out after the compiler's re-materialization: its run wrote the charts (and trace) of the
/// step that fits; the result and the reports say what the re-materialization cost.
void write_refitted_outputs(const RunOptions& o, const Json& j) {
  const std::string md = reports::report_markdown(j);
  std::ifstream in(fs::path(o.out) / "timeline.svg");
  const std::string timeline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_file(fs::path(o.out) / "result.json", j.dump(2) + "\n");
  write_file(fs::path(o.out) / "report.md", md);
  write_file(fs::path(o.out) / "report.html",
             reports::report_html(md, report_images(j, timeline), "tpusim run"));
}

/// The study as a child can run it again: its file and overrides, or a study given as JSON
/// written to a temporary file (a relative hardware path made absolute: it was the current
/// directory's), removed when this goes.
struct Rerunnable {
  RerunnableStudy study;
  bool temporary = false;
  explicit Rerunnable(const RunOptions& o);
  ~Rerunnable() {
    std::error_code ignored;
    if (temporary) fs::remove(study.file, ignored);
  }
};

Rerunnable::Rerunnable(const RunOptions& o) {
  if (o.study_json.is_null()) {
    study = {o.study, o.sets};
    return;
  }
  Json json = with_overrides(o.study_json, o.sets);
  if (json.contains("hardware") && json["hardware"].is_string()) {
    const fs::path hw = json["hardware"].get<std::string>();
    if (hw.is_relative() && fs::exists(hw)) json["hardware"] = fs::absolute(hw).string();
  }
  static int calls = 0;
  const fs::path file = fs::temp_directory_path() / ("tpusim-study-" + std::to_string(::getpid()) + "-" +
                                                     std::to_string(calls++) + ".json");
  write_file(file, json.dump(2) + "\n");
  study = {file.string(), {}};
  temporary = true;
}

/// The study given as JSON (RunOptions::study_json), its overrides applied.
Study given_study(const RunOptions& o) {
  if (o.intervals)
    throw ConfigError("intervals", "", "a study given as JSON",
                      "a study file (the intervals run it again in child processes)");
  return parse_study(with_overrides(o.study_json, o.sets), "study", fs::current_path());
}

/// A result's critical (busiest) core's row.
const Json& critical_core(const Json& result) {
  return result["cores"][result["breakdown"]["critical_core"].get<std::size_t>()];
}

/// What made a perturbed step slower than the uniform one: the busiest chip's compute when its
/// own extra compute is at least half the extra step time, else the slowest slowed link (its ring
/// waits on it while every chip computes alike), or nothing when the step did not slow down.
Json gated_by(const Topology& torus, const Json& result, const Json& uniform, const Json& slow_links) {
  const double extra_step = result["step_time_s"].get<double>() - uniform["step_time_s"].get<double>();
  if (!(extra_step > 1e-9 * uniform["step_time_s"].get<double>())) return nullptr;
  const double extra_compute =
      critical_core(result)["busy_s"].get<double>() - critical_core(uniform)["busy_s"].get<double>();
  if (extra_compute >= 0.5 * extra_step || slow_links.empty())
    return Json{{"chip", torus.coord(critical_core(result)["chip"].get<int>())},
                {"extra_compute_s", extra_compute},
                {"extra_step_s", extra_step}};
  const Json* slowest = nullptr;
  for (const auto& l : slow_links)
    if (l["bandwidth_scale"].get<double>() > 0 &&
        (!slowest || l["bandwidth_scale"].get<double>() < (*slowest)["bandwidth_scale"].get<double>()))
      slowest = &l;
  if (!slowest) slowest = &slow_links.front();  // only failed links: the first, routed round
  return Json{{"link", *slowest}, {"extra_compute_s", extra_compute}, {"extra_step_s", extra_step}};
}

/// The chips and links a perturbed study slows (their coordinates and scales), and the step
/// against the same study on a uniform pod (a child run with no perturbations).
Json perturbations_json(const Study& study, const RerunnableStudy& rerun, const Json& result) {
  const Topology torus(study.slice);
  const NetworkState& n = study.network;
  Json p{{"slow_chips", Json::array()}, {"slow_links", Json::array()}};
  for (int chip = 0; chip < torus.chips(); ++chip)
    if (n.chip_scale(chip) != 1.0 || n.hbm_scale(chip) != 1.0) {
      p["slow_chips"].push_back({{"chip", torus.coord(chip)}, {"compute_scale", n.chip_scale(chip)}});
      // Listed when it is not the compute's (the chip throttled as a whole).
      if (n.hbm_scale(chip) != n.chip_scale(chip))
        p["slow_chips"].back()["hbm_bandwidth_scale"] = n.hbm_scale(chip);
    }
  for (int link = 0; link < torus.link_id_bound(); ++link)
    if (n.link_scale(link) != 1.0) {
      const LinkDirection d = torus.link_direction(link);
      p["slow_links"].push_back({{"chip", torus.coord(torus.link_source(link))},
                                 {"dimension", torus.dimension(d.dim).name},
                                 {"direction", d.plus ? "+" : "-"},
                                 {"bandwidth_scale", n.link_scale(link)}});
    }
  const ChildResult child = run_self(rerun.run_args({"perturbations={}"}));
  if (child.exit_code != 0 || child.out.empty()) {
    p["uniform"] = {{"failure", failure_text(child)}};
    return p;
  }
  const Json uniform_result = Json::parse(child.out);
  const double uniform = uniform_result["step_time_s"].get<double>();
  p["uniform_step_time_s"] = uniform;
  p["slowdown"] = result["step_time_s"].get<double>() / uniform;
  p["gated_by"] = gated_by(torus, result, uniform_result, p["slow_links"]);
  return p;
}

/// Whether a step has a reduction over data-parallel replicas to continue across slices.
bool reduces_across_slices(const sim::TaskGraph& g) {
  for (int id = 0; id < g.size(); ++id)
    if (g.task(id).across_slices) return true;
  return false;
}

}  // namespace

RunOutcome run_study(const RunOptions& o, const RunProgressCallback& progress) {
  if (!(o.max_host_memory_bytes > 0))
    throw ConfigError("--max-host-memory", "", std::to_string(o.max_host_memory_bytes), "bytes > 0");
  sim::set_host_memory_budget(o.max_host_memory_bytes);
  const Study study = o.study_json.is_null() ? load_study(o.study, o.sets) : given_study(o);
  std::unique_ptr<FunctionalRuntime> functional = functional_runtime(o, study);
  if (o.require_fit)
    if (auto over = resident_floor_overflow(study)) return RunOutcome{std::move(*over), false, false};
  BuiltStep step = study.schedule->build(study, functional.get());
  if (o.require_fit)
    if (auto over = resident_overflow(study, step.graph)) return RunOutcome{std::move(*over), false, false};
  sim::EngineOptions engine;
  engine.record_flows = o.trace;
  engine.symmetric_collectives = !o.no_symmetry;
  engine.approximate_sharing = o.approximate_sharing;
  engine.functional = o.functional;
  engine.progress = progress;
  engine.network = study.network;
  engine.slices = study.slices;
  if (study.slices > 1 && !reduces_across_slices(step.graph))
    throw ConfigError(
        study.file, "slices", std::to_string(study.slices),
        "1 for this schedule: no reduction of its gradients spans data-parallel replicas within "
        "the slice (split the batch inside each slice), so there is none to continue across slices");
  spdlog::debug("simulating {} tasks on {} cores", step.graph.size(), step.graph.cores());
  const sim::SimResult result = sim::simulate(step.graph, study.hardware, study.slice, engine);
  Json j = reports::result_json(run_info(study, step), step.graph, result);
  if (functional) j["functional"] = functional_json(o, study, *functional, step, result);
  std::optional<Json> remat;
  if (!result.fits && !functional && study.compiler_remat)
    remat = compiler_rematerialized(study, Rerunnable(o).study, j, o.out, o.trace);
  const bool refitted = remat && (*remat)["compiler_remat"].value("fits", false);
  if (remat) j = std::move(*remat);
  if (!study.network.uniform() && !functional) {
    j["perturbations"] = perturbations_json(study, Rerunnable(o).study, j);
    // The busiest chip: the critical core's, by its torus coordinates (gated_by says whether it or
    // a link made the step slower).
    j["breakdown"]["critical_chip"] =
        Topology(study.slice).coord(j["breakdown"]["critical_core"].get<int>() / study.hardware.chip.cores);
  }
  if (o.intervals) j["intervals"] = run_intervals(o, study, j);
  add_time_to_train(study, j);
  if (!o.out.empty()) {
    if (refitted)
      write_refitted_outputs(o, j);
    else
      write_run_outputs(o, study, step, result, j);
  }
  const bool fits = j.value("fits", false);
  return RunOutcome{std::move(j), true, fits};
}

std::string check_study(const std::string& file, const std::vector<std::string>& sets) {
  const Study study = load_study(file, sets);
  const std::string slices = study.slices > 1
                                 ? std::to_string(study.slices) + " x " + study.slice.name +
                                       " over the data-center network, " + std::to_string(study.cores()) +
                                       " devices each"
                                 : study.slice.name + ", " + std::to_string(study.cores()) + " devices";
  return "(" + study.model.name + ", " + std::to_string(study.model.params()) + " params, " +
         study.hardware.name + " " + slices +
         (study.megacore ? " (megacore: a device is a chip), " : " (a device is a TensorCore), ") +
         study.schedule->resolved().value("kind", "") + ")";
}

}  // namespace tpusim::workflows
