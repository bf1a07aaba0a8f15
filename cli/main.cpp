// The tpusim command: engine-free commands (check, describe) and `run`, which plays one
// training step of a study on the simulated slice and reports it.
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

#include "cli/child_process.hpp"
#include "cli/fit.hpp"
#include "cli/intervals.hpp"
#include "cli/output_file.hpp"
#include "cli/plan.hpp"
#include "cli/run_progress.hpp"
#include "cli/sweep.hpp"
#include "cli/validate.hpp"
#include "hardware/topology.hpp"
#include "models/describe.hpp"
#include "models/op_lowering.hpp"
#include "reports/report_html.hpp"
#include "reports/run_report.hpp"
#include "reports/svg.hpp"
#include "schedules/functional_runtime.hpp"
#include "schedules/host_input.hpp"
#include "schedules/pipeline.hpp"
#include "schedules/study.hpp"
#include "sim/engine.hpp"

namespace fs = std::filesystem;
using namespace tpusim;

namespace {

/// The names of a slice's torus dimensions: x, y, z, ...
std::vector<std::string> dimension_names(const SliceSpec& slice) {
  std::vector<std::string> names;
  for (int d = 0; d < slice.dims(); ++d) names.push_back(Topology::dimension_name(d));
  return names;
}

/// What a user should know about the run: an overridden hardware figure its schedule never
/// reads, and a what-if that moved a pipeline's cost-balanced cut (the cut follows the costs, so
/// the what-if compares two cuts unless the partition is set explicitly).
std::vector<std::string> run_notes(const Study& study) {
  std::vector<std::string> notes;
  const Json& hw = study.json.value("hardware", Json());
  if (!hw.is_object() || !hw.contains("override") || !hw["override"].is_object()) return notes;
  const Json& overrides = hw["override"];
  for (const auto& [figure, why] : study.schedule->ignored_hardware_figures())
    if (overrides.contains(figure))
      notes.push_back(figure + " cannot affect this " + study.schedule->resolved().value("kind", "") +
                      " schedule: " + why);
  const auto* pipeline = dynamic_cast<const Pipeline*>(study.schedule.get());
  if (!pipeline ||
      (study.json["schedule"].contains("partition") && study.json["schedule"]["partition"].is_array()))
    return notes;
  Json base = study.json;
  base["hardware"] = hw["base"];
  try {
    const Study plain = parse_study(base, study.file, fs::path(study.file).parent_path());
    const auto before = dynamic_cast<const Pipeline&>(*plain.schedule).partition(plain).sizes;
    const auto after = pipeline->partition(study).sizes;
    auto text = [](const std::vector<int>& cut) {
      std::string t;
      for (int n : cut) t += (t.empty() ? "" : "|") + std::to_string(n);
      return t;
    };
    if (before != after)
      notes.push_back("the hardware what-if moved the cost-balanced cut from " + text(before) + " (on " +
                      hw["base"].dump() + ") to " + text(after) +
                      " layers per stage; set schedule.partition to [" +
                      [&] {
                        std::string t;
                        for (int n : before) t += (t.empty() ? "" : ", ") + std::to_string(n);
                        return t;
                      }() +
                      "] to compare at the same cut");
  } catch (const ConfigError&) {
    // The base hardware cannot run this study: nothing to compare with.
  }
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
  if (step.details.contains("padded"))
    for (const auto& [dim, p] : step.details["padded"].items())
      info.notes.push_back(dim + " padded from " + std::to_string(p["size"].get<std::int64_t>()) + " to " +
                           std::to_string(p["padded_to"].get<std::int64_t>()) + " to split it over " +
                           std::to_string(p["cores"].get<int>()) +
                           " cores (as frameworks pad the embedding)");
  info.model_kind = study.model.kind;
  info.model_name = study.model.name;
  info.params = study.model.params();
  info.layers = std::int64_t(study.model.layers.size());
  info.batch = study.batch;
  info.schedule = study.schedule->resolved().value("kind", "");
  info.schedule_details = step.details;
  info.peak_flops_per_core = study.hardware.core.peak_matmul_flops_per_s();
  info.model_flops = step.model_flops;
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

void write_file(const fs::path& path, const std::string& text) { cli::write_output_file(path, text); }

/// The default budget of host memory for one simulation: half of this machine's memory, so a
/// sweep's two points or the rest of the machine still have room.
double half_of_physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? 0.5 * double(pages) * double(page) : 4e9;
}

struct RunOptions {
  std::string study;
  std::vector<std::string> sets;
  std::string out;
  bool json = false;
  bool trace = false;
  bool require_fit = false;
  bool no_symmetry = false;
  bool functional = false;
  int steps = 3;
  std::uint64_t seed = 1;
  double max_host_memory_bytes = half_of_physical_memory();
  bool intervals = false;
  int jobs = 0;
};

/// The quantities a run's interval covers, from its result JSON.
std::map<std::string, double> run_quantities(const Json& result) {
  std::map<std::string, double> q;
  for (const char* name :
       {"step_time_s", "examples_per_s", "mxu_utilization", "peak_hbm_bytes", "activation_bytes_total"})
    if (const auto v = cli::output_quantity(name, result)) q[name] = *v;
  return q;
}

/// --intervals: the spread of the run's quantities over its assumptions' ranges (cli/intervals.hpp).
Json run_intervals(const RunOptions& o, const Study& study, const Json& result) {
  std::vector<std::string> unranged;
  const auto ranges = cli::assumed_ranges(study, &unranged);
  std::vector<std::string> args = {"run", o.study, "--json"};
  for (const auto& s : o.sets) args.insert(args.end(), {"--set", s});
  const auto ends = cli::run_variants(args, study, ranges, cli::job_count(o.jobs), run_quantities);
  return cli::intervals_json(run_quantities(result), ranges, ends, unranged);
}

/// When the state a core holds all step (weights, optimizer slots, gradient accumulators)
/// already exceeds its usable HBM: a small result saying so (fits false, not simulated).
std::optional<Json> resident_overflow(const Study& study, const sim::TaskGraph& graph) {
  const double usable = study.hardware.core.usable_hbm_bytes();
  const int worst = graph.most_resident_core();
  if (worst < 0 || graph.resident_bytes(worst) <= usable) return std::nullopt;
  const double most = graph.resident_bytes(worst);
  const std::string parts = reports::categories_text(graph.resident()[std::size_t(worst)]);
  return Json{
      {"fits", false},
      {"simulated", false},
      {"core", worst},
      {"resident", parts},
      {"peak_hbm_bytes", most},
      {"hbm_capacity_bytes", usable},
      {"overflow",
       {{"core", worst}, {"task", "resident state"}, {"time_s", 0.0}, {"bytes_over", most - usable}}}};
}

/// Functional mode's runtime for the study, its budget and step count checked (null without it).
std::unique_ptr<FunctionalRuntime> functional_runtime(const RunOptions& o, const Study& study) {
  if (!o.functional) return nullptr;
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

/// With --require-fit: what every core holds all step already overflowing one, reported (and
/// exit 1) without simulating the step; nullopt when it may fit.
std::optional<int> resident_overflow_exit(const RunOptions& o, const Study& study, const BuiltStep& step) {
  if (!o.require_fit) return std::nullopt;
  const auto over = resident_overflow(study, step.graph);
  if (!over) return std::nullopt;
  std::cerr << "tpusim: the study does not fit in HBM (--require-fit): core " << over->at("core").get<int>()
            << " holds " << reports::human_bytes(over->at("peak_hbm_bytes").get<double>())
            << " of resident state (" << over->at("resident").get<std::string>() << ") of "
            << reports::human_bytes(over->at("hbm_capacity_bytes").get<double>()) << " usable, over by "
            << reports::human_bytes(over->at("overflow").at("bytes_over").get<double>())
            << "; the step was not simulated\n";
  if (o.json) std::cout << over->dump(2) << "\n";
  return 1;
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

/// --out: result.json, report.md and report.html, the timeline and memory charts, and with --trace the trace.
void write_run_outputs(const RunOptions& o, const Study& study, const BuiltStep& step,
                       const sim::SimResult& result, const Json& j) {
  cli::make_output_directory(o.out);
  const std::string md = reports::report_markdown(j), timeline = reports::timeline_svg(step.graph, result),
                    memory = reports::memory_svg(j);
  write_file(fs::path(o.out) / "result.json", j.dump(2) + "\n");
  write_file(fs::path(o.out) / "report.md", md);
  write_file(fs::path(o.out) / "report.html",
             reports::report_html(md, {{"timeline.svg", timeline}, {"memory.svg", memory}}, "tpusim run"));
  write_file(fs::path(o.out) / "timeline.svg", timeline);
  write_file(fs::path(o.out) / "memory.svg", memory);
  if (o.trace)
    write_file(
        fs::path(o.out) / "trace.json",
        reports::chrome_trace(step.graph, result, study.hardware.chip.cores, dimension_names(study.slice))
                .dump() +
            "\n");
}

int cmd_run(const RunOptions& o) {
  cli::RunProgress progress;  // from the start: a slow graph build shows in its elapsed time
  if (!(o.max_host_memory_bytes > 0))
    throw ConfigError("--max-host-memory", "", std::to_string(o.max_host_memory_bytes), "bytes > 0");
  sim::set_host_memory_budget(o.max_host_memory_bytes);
  const Study study = load_study(o.study, o.sets);
  std::unique_ptr<FunctionalRuntime> functional = functional_runtime(o, study);
  BuiltStep step = study.schedule->build(study, functional.get());
  if (const auto code = resident_overflow_exit(o, study, step)) return *code;
  sim::EngineOptions engine;
  engine.record_flows = o.trace;
  engine.symmetric_collectives = !o.no_symmetry;
  engine.functional = o.functional;
  engine.progress = [&](int done, int total, double simulated_s) {
    progress.update(done, total, simulated_s);
  };
  spdlog::debug("simulating {} tasks on {} cores", step.graph.size(), step.graph.cores());
  const sim::SimResult result = sim::simulate(step.graph, study.hardware, study.slice, engine);
  Json j = reports::result_json(run_info(study, step), step.graph, result);
  if (functional) j["functional"] = functional_json(o, study, *functional, step, result);
  if (o.intervals) j["intervals"] = run_intervals(o, study, j);
  if (!o.out.empty()) write_run_outputs(o, study, step, result, j);
  if (o.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << reports::summary_text(j);
    if (!o.out.empty())
      std::cout << "  wrote             " << o.out
                << "/: result.json report.md report.html timeline.svg memory.svg"
                << (o.trace ? " trace.json" : "") << "\n";
  }
  if (o.require_fit && !result.fits) {
    std::cerr << "tpusim: the study does not fit in HBM (--require-fit)\n";
    return 1;
  }
  return 0;
}

int cmd_check(const std::string& file, const std::vector<std::string>& sets) {
  const Study study = load_study(file, sets);
  std::cout << file << ": ok (" << study.model.name << ", " << study.model.params() << " params, "
            << study.hardware.name << " " << study.slice.name << ", " << study.cores() << " cores, "
            << study.schedule->resolved().value("kind", "") << ")\n";
  return 0;
}

void print_row(const char* label, const std::string& value, const std::string& source = {}) {
  std::printf("  %-34s %-22s %s\n", label, value.c_str(), source.c_str());
}

/// A shape as "4x4x4" (or with another separator).
std::string shape_text(const std::vector<int>& shape, const std::string& separator = "x") {
  std::string text;
  for (int n : shape) text += (text.empty() ? "" : separator) + std::to_string(n);
  return text;
}

std::string num(double v, const char* unit = "") {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g%s", v, unit);
  return buf;
}

/// A hardware generation's figures as JSON (the derived ones computed).
Json hardware_json(const HardwareSpec& hw) {
  const double core_peak = hw.core.peak_matmul_flops_per_s();
  Json j{{"name", hw.name},
         {"file", hw.file},
         {"cores_per_chip", hw.chip.cores},
         {"peak_bf16_flops_per_s_per_core", core_peak},
         {"peak_bf16_flops_per_s_per_chip", hw.chip.peak_bf16_flops_per_s},
         {"vector_ops_per_s_per_core", hw.core.vector_ops_per_s()},
         {"hbm_bytes_per_core", hw.core.hbm_bytes},
         {"hbm_reserved_bytes_per_core", hw.core.hbm_reserved_bytes},
         {"usable_hbm_bytes_per_core", hw.core.usable_hbm_bytes()},
         {"hbm_bandwidth_bytes_per_s_per_core", hw.core.hbm_bandwidth_bytes_per_s},
         {"hbm_sustained_bandwidth_fraction", hw.core.hbm_sustained_fraction},
         {"sustained_hbm_bandwidth_bytes_per_s_per_core", hw.core.sustained_hbm_bytes_per_s()},
         {"ridge_flops_per_byte", core_peak / hw.core.sustained_hbm_bytes_per_s()},
         {"ici_bandwidth_bytes_per_s_per_link_per_direction", hw.chip.ici_bandwidth_bytes_per_s},
         {"pod_chips", hw.pod.shape},
         {"megacore", hw.chip.megacore},
         {"collective_algorithms", hw.chip.collective_algorithms},
         {"slices", Json::array()},
         {"sources", hw.sources}};
  for (const auto& [n, s] : hw.slices) j["slices"].push_back(n);
  // Every sourced figure by the dotted key an override names it with: its value and source.
  const Json file = read_json_file(hw.file);
  Json figures = Json::object();
  for (const auto& [key, source] : hw.sources) {
    const Json* node = json_at(file, key);
    figures[key] = Json{
        {"value", node && node->is_object() && node->contains("value") ? (*node)["value"] : Json(nullptr)},
        {"source", source}};
    if (const auto r = hw.ranges.find(key); r != hw.ranges.end()) {
      figures[key]["range"] = Json::array({r->second.low, r->second.high});
      figures[key]["range_source"] = r->second.source;
    }
  }
  j["figures"] = figures;
  return j;
}

/// Where a figure comes from: its dotted key (what --hardware-override and a study's override
/// name) and its `source`, or nothing.
using SourceOf = std::function<std::string(const std::string&)>;

/// A core: MXUs, clock, peaks, HBM.
void print_core_figures(const HardwareSpec& hw, const SourceOf& src) {
  const double core_peak = hw.core.peak_matmul_flops_per_s();
  print_row("cores per chip", std::to_string(hw.chip.cores), src("chip.cores_per_chip"));
  print_row("MXUs per core",
            std::to_string(hw.core.mxus) + " x " + std::to_string(hw.core.mxu_rows) + "x" +
                std::to_string(hw.core.mxu_cols),
            src("core.mxus_per_core"));
  print_row("clock", num(hw.core.clock_hz / 1e6, " MHz"), src("core.clock_hz"));
  print_row("peak bf16 per core", num(core_peak / 1e12, " TFLOP/s"),
            "derived: MXUs x rows x cols x 2 x clock");
  print_row("peak bf16 per chip", num(hw.chip.peak_bf16_flops_per_s / 1e12, " TFLOP/s"),
            src("chip.peak_bf16_flops_per_s_per_chip"));
  print_row("vector unit per core", num(hw.core.vector_ops_per_s() / 1e12, " Tops/s"),
            "derived: sublanes x lanes x ALUs x ops x clock");
  print_row("HBM per core", reports::human_bytes(hw.core.hbm_bytes), src("core.hbm_bytes_per_core"));
  print_row("HBM reserved per core", reports::human_bytes(hw.core.hbm_reserved_bytes),
            src("core.hbm_reserved_bytes_per_core"));
  print_row("HBM usable per core", reports::human_bytes(hw.core.usable_hbm_bytes()),
            "derived: capacity - reserved (what fits is checked against this)");
  print_row("HBM bandwidth per core", num(hw.core.hbm_bandwidth_bytes_per_s / 1e9, " GB/s"),
            src("core.hbm_bandwidth_bytes_per_s_per_core"));
  print_row("HBM sustained", num(100 * hw.core.hbm_sustained_fraction, " %"),
            src("core.hbm_sustained_bandwidth_fraction"));
  print_row("roofline ridge", num(core_peak / hw.core.sustained_hbm_bytes_per_s(), " FLOP/byte"),
            "derived: peak / sustained HBM bandwidth");
}

/// The links: ICI, on-chip, to the host.
void print_link_figures(const HardwareSpec& hw, const SourceOf& src) {
  print_row("ICI links per chip", std::to_string(hw.chip.ici_links), src("chip.ici_links_per_chip"));
  print_row("ICI per link per direction", num(hw.chip.ici_bandwidth_bytes_per_s / 1e9, " GB/s"),
            src("chip.ici_bandwidth_bytes_per_s_per_link_per_direction"));
  print_row("ICI latency per hop", num(hw.chip.ici_latency_s * 1e6, " us"),
            src("chip.ici_latency_s_per_hop"));
  print_row(
      "core to core on a chip",
      num(hw.chip.onchip_bandwidth_bytes_per_s / 1e9, " GB/s, ") + num(hw.chip.onchip_latency_s * 1e6, " us"),
      src("chip.onchip_core_to_core_bandwidth_bytes_per_s"));
  print_row("host link per chip", num(hw.chip.host_link_bandwidth_bytes_per_s / 1e9, " GB/s"),
            src("chip.host_link_bandwidth_bytes_per_s_per_chip"));
  print_row("chips per host", shape_text(hw.chip.host_board_chips), src("chip.host_board_chips"));
  print_row("megacore", hw.chip.megacore ? "yes (study default)" : "no", src("chip.megacore"));
  std::string algorithms;
  for (const auto& a : hw.chip.collective_algorithms) algorithms += (algorithms.empty() ? "" : ", ") + a;
  print_row("collective algorithms", algorithms, src("chip.collective_algorithms"));
}

/// How the software runs ops: padding, overheads, fusion, combining, multi-pass kernels.
void print_software_figures(const HardwareSpec& hw, const SourceOf& src) {
  print_row("matmul row padding", std::to_string(hw.core.matmul_row_padding), src("core.matmul_row_padding"));
  print_row("per-op overhead", num(hw.core.op_overhead_s * 1e6, " us"), src("core.op_overhead_s"));
  print_row("element-wise fusion", hw.core.fuse_elementwise ? "yes" : "no", src("core.fuse_elementwise"));
  print_row("activation lane padding",
            hw.core.pad_activations_to_lanes ? "to " + std::to_string(hw.core.vpu_lanes) + " lanes" : "no",
            src("core.pad_activations_to_lanes"));
  print_row("all-reduce combining", reports::human_bytes(hw.core.allreduce_combine_threshold_bytes),
            src("core.allreduce_combine_threshold_bytes"));
  print_row("gradient reductions",
            hw.core.gradient_collectives_overlap_backward ? "during backward" : "after backward",
            src("core.gradient_collectives_overlap_backward"));
  for (const auto& [label, key, pattern] :
       {std::tuple{"normalization forward", "normalization_forward", MultiPass::NormalizationForward},
        std::tuple{"normalization backward", "normalization_backward", MultiPass::NormalizationBackward},
        std::tuple{"softmax forward", "softmax_forward", MultiPass::SoftmaxForward},
        std::tuple{"softmax backward", "softmax_backward", MultiPass::SoftmaxBackward}}) {
    const MultiPassKernels& m = hw.core.multipass(pattern);
    print_row(label,
              std::to_string(m.kernels.size()) + " kernels, " + std::to_string(m.tensor_passes()) + " passes",
              src(std::string("core.") + key + "_kernels"));
    print_row("", num(m.vpu_ops_per_element, " ops/element"),
              src(std::string("core.") + key + "_vpu_ops_per_element"));
  }
  print_row("random number (dropout)", num(hw.core.random_number_vpu_ops, " ops/element"),
            src("core.random_number_vpu_ops_per_element"));
}

int cmd_describe_hardware(const std::string& name, bool as_json) {
  const HardwareSpec hw = load_hardware(name);
  if (as_json) {
    std::cout << hardware_json(hw).dump(2) << "\n";
    return 0;
  }
  std::printf("%s (%s)\n%s\n\n", hw.name.c_str(), hw.file.c_str(), hw.description.c_str());
  const SourceOf src = [&](const std::string& path) {
    auto it = hw.sources.find(path);
    if (it == hw.sources.end()) return std::string();
    const auto r = hw.ranges.find(path);
    return path + "  " + it->second +
           (r == hw.ranges.end() ? std::string()
                                 : " [range " + r->second.low.dump() + " .. " + r->second.high.dump() + ": " +
                                       r->second.source + "]");
  };
  print_core_figures(hw, src);
  print_link_figures(hw, src);
  print_software_figures(hw, src);
  print_row("pod", shape_text(hw.pod.shape) + " chips", src("pod"));
  std::string names;
  for (const auto& [n, s] : hw.slices) names += (names.empty() ? "" : " ") + n;
  print_row("slices", names);
  return 0;
}

int cmd_describe_optimizers(bool as_json) {
  Json j = Json::array();
  for (const auto& [kind, rule] : optimizer_rules()) {
    const auto c = rule->cost();
    j.push_back(Json{{"kind", kind},
                     {"slots_per_param", rule->slots()},
                     {"vpu_ops_per_param", c.vpu_ops_per_param},
                     {"fp32_tensors_moved_per_param", c.tensors_moved},
                     {"layer_statistics_bytes", rule->layer_statistics_bytes()},
                     {"factored_statistics", rule->factored_statistics()},
                     {"functional", rule->functional()},
                     {"default_learning_rate", rule->default_learning_rate()},
                     {"source", c.source}});
  }
  if (as_json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("%-10s %6s %8s %8s  %s\n", "optimizer", "slots", "ops/par", "tensors", "source");
  for (const auto& r : j)
    std::printf("%-10s %6d %8g %8g  %s\n", r["kind"].get<std::string>().c_str(),
                r["slots_per_param"].get<int>(), r["vpu_ops_per_param"].get<double>(),
                r["fp32_tensors_moved_per_param"].get<double>(), r["source"].get<std::string>().c_str());
  return 0;
}

int cmd_describe_slice(const std::string& name, const std::string& hardware, bool as_json) {
  HardwareSpec hw;
  bool found = false;
  std::vector<std::string> candidates =
      hardware.empty() ? shipped_hardware() : std::vector<std::string>{hardware};
  for (const auto& h : candidates) {
    HardwareSpec candidate = load_hardware(h);
    if (candidate.slices.count(name)) {
      hw = candidate;
      found = true;
      break;
    }
  }
  if (!found)
    throw ConfigError("describe slice", "", "\"" + name + "\"",
                      "a slice named in a hardware file (e.g. v3-32, v2-512)");
  const SliceSpec& s = hw.slices.at(name);
  const Topology topology(s);
  const int cores = s.chips() * hw.chip.cores;
  const double peak = cores * hw.core.peak_matmul_flops_per_s();
  const double bisection = topology.bisection_links() * hw.chip.ici_bandwidth_bytes_per_s;
  std::vector<bool> wraps;
  std::string wrapping;
  for (int d = 0; d < topology.dims(); ++d) {
    wraps.push_back(topology.wraps(d));
    if (topology.wraps(d)) wrapping += (wrapping.empty() ? "" : " ") + topology.dimension(d).name;
  }
  if (as_json) {
    std::cout << Json{{"slice", name},
                      {"hardware", hw.name},
                      {"chips", s.shape},
                      {"wraparound", wraps},
                      {"cores", cores},
                      {"peak_bf16_flops_per_s", peak},
                      {"hbm_bytes", cores * hw.core.hbm_bytes},
                      {"ici_links_directed", topology.link_count()},
                      {"diameter_hops", topology.diameter()},
                      {"bisection_bytes_per_s_per_direction", bisection}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::printf("%s on %s\n", name.c_str(), hw.name.c_str());
  print_row("chips", shape_text(s.shape, " x ") + " = " + std::to_string(s.chips()));
  print_row("wrap-around", wrapping.empty() ? "none" : wrapping,
            hw.sources.count("slices") ? hw.sources.at("slices") : "");
  print_row("cores", std::to_string(cores));
  print_row("peak bf16", num(peak / 1e15, " PFLOP/s"));
  print_row("HBM total", reports::human_bytes(cores * hw.core.hbm_bytes));
  print_row("ICI links (directed)", std::to_string(topology.link_count()));
  print_row("diameter", std::to_string(topology.diameter()) + " hops");
  print_row("bisection (one way)", num(bisection / 1e12, " TB/s"),
            std::to_string(topology.bisection_links()) + " links");
  return 0;
}

/// The layer named `name` of the study's model and its index (ConfigError naming the layers if none).
std::pair<const Layer*, std::size_t> layer_named(const Study& study, const std::string& name) {
  for (std::size_t i = 0; i < study.model.layers.size(); ++i)
    if (study.model.layers[i].name == name) return {&study.model.layers[i], i};
  std::string names;
  for (const auto& l : study.model.layers) names += (names.empty() ? "" : ", ") + l.name;
  throw ConfigError(study.file, "--ops", "\"" + name + "\"", "a layer of the model: " + names);
}

/// A layer's hardware ops, forward then backward: what each costs and what bounds it.
Json hardware_ops_json(const Layer& layer, const CostModel& cost, std::int64_t batch) {
  const LayerWork w = layer.work(batch);
  Json ops = Json::array();
  for (const auto* pass : {&w.forward, &w.backward})
    for (const Op& op : *pass) {
      const OpCost c = cost.cost(op);
      ops.push_back(Json{{"pass", pass == &w.forward ? "forward" : "backward"},
                         {"op", op.name},
                         {"seconds", c.seconds},
                         {"mxu_s", c.mxu_s},
                         {"vpu_s", c.vpu_s},
                         {"hbm_s", c.hbm_s},
                         {"bound", c.bound},
                         {"model_flops", c.model_flops},
                         {"hardware_flops", c.hardware_flops},
                         {"bytes", op.bytes}});
    }
  return ops;
}

/// What each of a layer's named ops keeps for the backward, holds while its forward runs and
/// holds in flight during its backward (layer_memory's terms, op by op).
Json named_op_memory_json(const Layer& layer, bool model_input, double act, std::int64_t batch) {
  const auto ops = layer.named_ops(batch);
  const Sharding s = Sharding::whole(layer.lanes);
  Json rows = Json::array();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    rows.push_back(
        Json{{"op", ops[i].name},
             {"kept_bytes", kept_bytes(ops[i], s, act)},
             {"forward_transient_bytes", forward_transient(ops, i, s) * act},
             {"backward_in_flight_bytes", gradients_in_flight(ops, i, s, model_input && i == 0) * act}});
  }
  return rows;
}

void print_ops(const Json& ops, const Json& memory) {
  std::printf("%-9s %-28s %10s %10s %10s %10s %10s  %s\n", "pass", "op", "ms", "MXU ms", "VPU ms", "HBM ms",
              "GFLOP", "bound");
  double total = 0;
  for (const auto& o : ops) {
    total += o["seconds"].get<double>();
    std::printf("%-9s %-28s %10.4f %10.4f %10.4f %10.4f %10.3f  %s\n", o["pass"].get<std::string>().c_str(),
                o["op"].get<std::string>().c_str(), o["seconds"].get<double>() * 1e3,
                o["mxu_s"].get<double>() * 1e3, o["vpu_s"].get<double>() * 1e3,
                o["hbm_s"].get<double>() * 1e3, o["model_flops"].get<double>() / 1e9,
                o["bound"].get<std::string>().c_str());
  }
  std::printf("%-9s %-28s %10.4f\n\n", "total", "", total * 1e3);
  std::printf("%-28s %12s %14s %14s\n", "named op", "kept MB", "fwd transient", "bwd in flight");
  double kept = 0;
  for (const auto& m : memory) {
    kept += m["kept_bytes"].get<double>();
    std::printf("%-28s %12.2f %14.2f %14.2f\n", m["op"].get<std::string>().c_str(),
                m["kept_bytes"].get<double>() / 1e6, m["forward_transient_bytes"].get<double>() / 1e6,
                m["backward_in_flight_bytes"].get<double>() / 1e6);
  }
  std::printf("%-28s %12.2f  (the layer holds the largest transient and the largest in flight)\n",
              "kept in all", kept / 1e6);
}

/// One layer's hardware ops on one core (time, bound) and its named ops' memory.
int cmd_describe_ops(const Study& study, std::int64_t batch, const std::string& layer_name, bool as_json) {
  const auto [layer, index] = layer_named(study, layer_name);
  const Json ops = hardware_ops_json(*layer, CostModel(study.hardware.core), batch);
  const Json memory = named_op_memory_json(*layer, index == 0, study.model.activation_bytes, batch);
  if (as_json) {
    std::cout << Json{{"model", study.model.name},
                      {"layer", layer->name},
                      {"batch_per_core", batch},
                      {"ops", ops},
                      {"named_op_memory", memory}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::printf("%s of %s on one %s core, %lld examples\n", layer->name.c_str(), study.model.name.c_str(),
              study.hardware.name.c_str(), (long long)batch);
  print_ops(ops, memory);
  return 0;
}

int cmd_describe_model(const std::string& file, const std::vector<std::string>& sets, bool as_json,
                       const std::string& ops_of) {
  const Study study = load_study(file, sets);
  if (!ops_of.empty()) return cmd_describe_ops(study, study.schedule->layer_batch(study), ops_of, as_json);
  const std::int64_t batch = study.schedule->layer_batch(study);
  const auto rows = describe_layers(study.model, CostModel(study.hardware.core), batch);
  const LayerSummary total = total_of(rows);
  auto row_json = [](const LayerSummary& r) {
    return Json{{"name", r.name},
                {"params", r.params},
                {"forward_flops", r.forward_flops},
                {"backward_input_flops", r.backward_input_flops},
                {"backward_weight_flops", r.backward_weight_flops},
                {"hardware_flops", r.hardware_flops},
                {"output_bytes", r.output_bytes},
                {"stash_bytes", r.stash_bytes},
                {"stash_remat_bytes", r.stash_remat_bytes},
                {"workspace_bytes", r.workspace_bytes},
                {"forward_s", r.forward_s},
                {"backward_s", r.backward_s},
                {"bound", r.compute_bound() ? "compute" : "memory"}};
  };
  if (as_json) {
    Json layers = Json::array();
    for (const auto& r : rows) layers.push_back(row_json(r));
    std::cout
        << Json{{"model", study.model.name}, {"kind", study.model.kind}, {"hardware", study.hardware.name},
                {"batch_per_core", batch},   {"layers", layers},         {"total", row_json(total)}}
               .dump(2)
        << "\n";
    return 0;
  }
  std::printf("%s on one %s core, %lld examples per layer call\n", study.model.name.c_str(),
              study.hardware.name.c_str(), (long long)batch);
  std::printf("%-22s %12s %10s %10s %10s %10s %10s %12s  %s\n", "layer", "params", "fwd GFLOP", "bwd GFLOP",
              "out MB", "stash MB", "remat MB", "fwd+bwd ms", "bound");
  auto print = [](const LayerSummary& r) {
    std::printf("%-22s %12lld %10.3f %10.3f %10.2f %10.2f %10.2f %12.4f  %s\n", r.name.c_str(),
                (long long)r.params, r.forward_flops / 1e9,
                (r.backward_input_flops + r.backward_weight_flops) / 1e9, r.output_bytes / 1e6,
                r.stash_bytes / 1e6, r.stash_remat_bytes / 1e6, (r.forward_s + r.backward_s) * 1e3,
                r.compute_bound() ? "compute" : "memory");
  };
  for (const auto& r : rows) print(r);
  print(total);
  std::printf("MXU efficiency (model / padded FLOPs): %.1f %%\n",
              100.0 * (total.forward_flops + total.backward_input_flops + total.backward_weight_flops) /
                  std::max(1.0, total.hardware_flops));
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

void add_run(CLI::App& app, Commands& commands) {
  auto run = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "simulate one training step of a study");
  add_study(cmd, run->study, run->sets);
  cmd->add_option("--out", run->out,
                  "write result.json, report.md, timeline.svg, memory.svg (and trace.json) here");
  cmd->add_flag("--json", run->json, "print result.json to stdout instead of the summary");
  cmd->add_flag("--trace", run->trace, "also write a Chrome/Perfetto trace (needs --out)");
  cmd->add_flag("--require-fit", run->require_fit, "exit 1 if the step does not fit in HBM");
  cmd->add_flag("--no-symmetry", run->no_symmetry,
                "simulate every ring of every collective (slower; same result)");
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
  commands.emplace_back(cmd, [run] {
    if (run->trace && run->out.empty())
      throw ConfigError("--trace", "", "no --out directory", "--out DIR to write trace.json into");
    return cmd_run(*run);
  });
}

void add_check(CLI::App& app, Commands& commands) {
  auto file = std::make_shared<std::string>();
  auto sets = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("check", "validate a study without simulating");
  add_study(cmd, *file, *sets);
  commands.emplace_back(cmd, [file, sets] { return cmd_check(*file, *sets); });
}

void add_fit(CLI::App& app, Commands& commands) {
  struct FitOptions {
    std::string study, path;
    std::vector<std::string> sets;
    std::optional<double> min, max, step;
    bool json = false;
    double probe_timeout = 0;
    bool intervals = false;
    int jobs = 0;
  };
  auto fit = std::make_shared<FitOptions>();
  auto* cmd =
      app.add_subcommand("fit", "the largest value of a numeric field for which the study fits in HBM");
  add_study(cmd, fit->study, fit->sets);
  cmd->add_option("--maximize", fit->path, "dotted path of the field, e.g. model.layers")->required();
  cmd->add_option("--min", fit->min, "smallest value (default 1)");
  cmd->add_option("--max", fit->max, "largest value (default: search upwards by doubling)");
  cmd->add_option("--step", fit->step, "granularity of the answer (default 1)");
  cmd->add_flag("--json", fit->json, "machine-readable output");
  cmd->add_option(
      "--probe-timeout", fit->probe_timeout,
      "seconds after which a probe still running is killed: the search fails (exit 3) (default: none)");
  cmd->add_flag(
      "--intervals", fit->intervals,
      "also the answer's spread over the ranges of the study's assumptions (a search per range end)");
  cmd->add_option("-j,--jobs", fit->jobs,
                  "with --intervals: searches at once (default: the number of cores)");
  commands.emplace_back(cmd, [fit] {
    return cli::cmd_fit(fit->study, fit->path, fit->sets, fit->min, fit->max, fit->step, fit->json,
                        fit->probe_timeout, fit->intervals, fit->jobs);
  });
}

void add_sweep_and_merge(CLI::App& app, Commands& commands) {
  auto sweep = std::make_shared<cli::SweepOptions>();
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
  commands.emplace_back(cmd, [sweep] { return cli::cmd_sweep(*sweep); });

  auto dirs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto* merge = app.add_subcommand("merge", "combine the outputs of sweep shards");
  merge->add_option("dirs", *dirs, "sweep output directories")->required();
  merge->add_option("--out", *out, "output directory")->required();
  commands.emplace_back(merge, [dirs, out] { return cli::cmd_merge(*dirs, *out); });
}

void add_validate(CLI::App& app, Commands& commands) {
  auto validate = std::make_shared<cli::ValidateOptions>();
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
                "a regression check: exit 0 when every case is within its tolerance or predicts what was "
                "recorded (CASES/recorded/predictions.json), 1 otherwise");
  cmd->add_flag("--record", validate->record, "record this run's predictions for --check");
  cmd->add_flag("--intervals", validate->intervals,
                "also each case's prediction interval over its assumptions' ranges, and whether the "
                "measured value lies inside it (coverage)");
  cmd->add_flag("--sensitivity", validate->sensitivity,
                "also show how much each prediction moves when each assumed hardware figure moves up by 10 % "
                "(a flag: turned over)");
  commands.emplace_back(cmd, [validate] { return cli::cmd_validate(*validate); });
}

void add_plan(CLI::App& app, Commands& commands) {
  auto plan = std::make_shared<cli::PlanOptions>();
  auto* cmd = app.add_subcommand(
      "plan", "search the fastest schedule that fits for a study's model, batch and slice");
  add_study(cmd, plan->study, plan->sets, "study JSON file (its schedule is ignored)");
  cmd->add_option("--objective", plan->objective, "step_time_s (default) or examples_per_s");
  cmd->add_option("--top", plan->top, "plans to report with their results (default 5)");
  cmd->add_option("--space", plan->space, "a tpusim.plan_space/1 file narrowing the search");
  cmd->add_option("-j,--jobs", plan->jobs, "simulations at once (default: the number of cores)");
  cmd->add_flag("--json", plan->json, "print the tpusim.plan/1 JSON instead of the table");
  cmd->add_option("--out", plan->out, "write plan.json, plan.md, plan.html and best.json here");
  cmd->add_flag("--exhaustive", plan->exhaustive, "simulate every valid candidate (checks the search)");
  cmd->add_option("--point-timeout", plan->point_timeout_s, "kill a simulation running longer (seconds)");
  cmd->add_option("--time-limit", plan->time_limit_s,
                  "answer with the best plan found within this many seconds, marked incomplete (SIGINT and "
                  "SIGTERM do the same)");
  commands.emplace_back(cmd, [plan] { return cli::cmd_plan(*plan); });
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
  commands.emplace_back(hw, [o] { return cmd_describe_hardware(o->hardware, o->json); });
  auto* model = describe->add_subcommand("model", "per-layer table of a study's model on one core");
  add_study(model, o->study, o->sets);
  model->add_flag("--json", o->json, "machine-readable output");
  model->add_option("--ops", o->ops,
                    "list one layer's hardware ops instead (forward, then backward): time, bound");
  commands.emplace_back(model, [o] { return cmd_describe_model(o->study, o->sets, o->json, o->ops); });
  auto* opt =
      describe->add_subcommand("optimizers", "every optimizer rule: slots, update cost and its derivation");
  opt->add_flag("--json", o->json, "machine-readable output");
  commands.emplace_back(opt, [o] { return cmd_describe_optimizers(o->json); });
  auto* slice = describe->add_subcommand("slice", "a named slice");
  slice->add_option("name", o->slice, "e.g. v3-32")->required();
  slice->add_option("--hardware", o->slice_hardware,
                    "hardware to look the slice up in (default: every shipped one)");
  slice->add_flag("--json", o->json, "machine-readable output");
  commands.emplace_back(slice, [o] { return cmd_describe_slice(o->slice, o->slice_hardware, o->json); });
}

/// Runs the parsed subcommand's action; typed errors become exit codes here and only here.
int dispatch(const Commands& commands) {
  try {
    for (const auto& [cmd, action] : commands)
      if (*cmd) return action();
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
