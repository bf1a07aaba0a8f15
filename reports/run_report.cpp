#include "reports/run_report.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "sim/collectives/collective_algorithm.hpp"  // DCN endpoints

namespace tpusim::reports {

using sim::TaskKind;

std::string categories_text(const sim::MemoryBreakdown& bytes) {
  std::string text;
  for (int k = 0; k < sim::kMemoryCategories; ++k)
    if (bytes[k] > 0)
      text += (text.empty() ? "" : ", ") + std::string(sim::to_string(sim::MemoryCategory(k))) + " " +
              human_bytes(bytes[k]);
  return text;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

std::string human_seconds(double s, bool compact) {
  char buf[32];
  const char* number = compact ? "%.3g" : "%.3f";
  double scaled = s * 1e6;
  const char* unit = " us";
  if (s >= 1.0) {
    scaled = s;
    unit = " s";
  } else if (s >= 1e-3) {
    scaled = s * 1e3;
    unit = " ms";
  }
  std::snprintf(buf, sizeof buf, number, scaled);
  return std::string(buf) + unit;
}

namespace {

using Interval = std::pair<double, double>;

/// Sorted, merged union of intervals.
std::vector<Interval> merge(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second)
      out.back().second = std::max(out.back().second, iv.second);
    else
      out.push_back(iv);
  }
  return out;
}

double length(const std::vector<Interval>& v) {
  double total = 0;
  for (const auto& iv : v) total += iv.second - iv.first;
  return total;
}

/// Length of `a` not covered by `b` (both merged).
double uncovered(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double total = 0;
  std::size_t j = 0;
  for (const auto& iv : a) {
    double cursor = iv.first;
    while (j < b.size() && b[j].second <= cursor) ++j;
    for (std::size_t k = j; k < b.size() && b[k].first < iv.second; ++k) {
      if (b[k].first > cursor) total += b[k].first - cursor;
      cursor = std::max(cursor, b[k].second);
    }
    if (cursor < iv.second) total += iv.second - cursor;
  }
  return total;
}

}  // namespace

namespace {

/// When every core computed and waited, from the tasks' simulated times.
struct Activity {
  std::vector<std::vector<Interval>> busy, waits_transfer, waits_collective, waits_group;
  std::vector<std::map<std::string, double>> by_phase;  ///< per core: compute seconds by phase
  /// Per core: its compute split into the MXUs at peak on the padded FLOPs, what the matmuls'
  /// grid steps add, and the rest (vector work, memory-bound time, per-op overheads).
  std::vector<std::array<double, 3>> compute_split;
  std::vector<Interval> comm;  ///< every transfer and collective
  std::map<std::string, std::vector<Interval>> comm_by_phase;
  std::vector<int> used;  ///< cores that computed
  int critical = 0;       ///< the busiest of them
};

/// A compute task's time as simulated, split as Activity::compute_split: a perturbed chip's MXU
/// and grid steps at its compute speed, each part at most what is left of the task.
std::array<double, 3> split_compute(const sim::Task& t, const sim::CoreStats& core, double peak_flops_per_s) {
  const double run = t.run_seconds(core.compute_scale, core.hbm_scale);
  const double mxu =
      peak_flops_per_s > 0
          ? std::min(run, (t.hardware_flops / peak_flops_per_s - t.mxu_saved_s) / core.compute_scale)
          : 0.0;
  const double grid = std::min(run - mxu, t.grid_s / core.compute_scale);
  return {mxu, grid, run - mxu - grid};
}

Activity activity(const sim::TaskGraph& graph, const sim::SimResult& r, double peak_flops_per_s) {
  const int cores = graph.cores();
  Activity a;
  a.busy.resize(cores);
  a.waits_transfer.resize(cores);
  a.waits_collective.resize(cores);
  a.waits_group.resize(cores);
  a.by_phase.resize(cores);
  a.compute_split.assign(std::size_t(cores), {0.0, 0.0, 0.0});
  for (int id = 0; id < graph.size(); ++id) {
    const sim::Task& t = graph.task(id);
    const Interval iv{r.tasks[id].start_s, r.tasks[id].end_s};
    if (t.kind == TaskKind::Compute) {
      a.busy[t.core].push_back(iv);
      // As simulated: a perturbed chip's compute at its own speed.
      a.by_phase[t.core][t.phase] += t.run_seconds(r.cores[t.core].compute_scale, r.cores[t.core].hbm_scale);
      const auto parts = split_compute(t, r.cores[t.core], peak_flops_per_s);
      for (std::size_t k = 0; k < parts.size(); ++k) a.compute_split[std::size_t(t.core)][k] += parts[k];
      continue;
    }
    a.comm.push_back(iv);
    a.comm_by_phase[t.phase].push_back(iv);
    for (int c : t.members()) {
      (t.kind == TaskKind::Transfer ? a.waits_transfer : a.waits_collective)[c].push_back(iv);
      if (t.phase == "tensor_parallel") a.waits_group[c].push_back(iv);
    }
  }
  int critical = -1;
  for (int c = 0; c < cores; ++c) {
    if (a.busy[c].empty()) continue;
    a.used.push_back(c);
    if (critical < 0 || r.cores[c].busy_s > r.cores[critical].busy_s) critical = c;
  }
  a.critical = critical < 0 ? 0 : critical;
  // Reductions across slices: their phases over the data-center network apart as well.
  for (const auto& p : r.dcn_phases) a.comm_by_phase["across_slices_dcn"].push_back({p.start_s, p.end_s});
  return a;
}

/// Each used core's step, averaged: busy by phase, then its idle time within the TPUs' step split
/// by what it was waiting on, and the wait for the input beyond it. Sets the pipeline bubble:
/// the idle time not spent waiting for a stage's own partial sums, as a fraction of the step.
Json step_split(const Activity& a, double device_step, double step, double loop_overhead, double& bubble) {
  std::map<std::string, double> split;
  bubble = 0;
  for (int c : a.used) {
    for (const auto& [phase, s] : a.by_phase[c]) split[phase] += s;
    const auto b = merge(a.busy[c]);
    const auto idle = uncovered({{0.0, device_step}}, b);
    const auto t_exposed = uncovered(merge(a.waits_transfer[c]), b);
    auto covered = b;
    covered.insert(covered.end(), a.waits_transfer[c].begin(), a.waits_transfer[c].end());
    const auto c_exposed = uncovered(merge(a.waits_collective[c]), merge(covered));
    split["exposed_transfer"] += t_exposed;
    split["exposed_collective"] += c_exposed;
    split["idle"] += idle - t_exposed - c_exposed;
    // Waiting for its own stage's partial sums (tensor parallelism) is communication, not bubble.
    const auto group_exposed = uncovered(merge(a.waits_group[c]), merge(covered));
    bubble += step > 0 ? (idle - group_exposed) / step : 0.0;
  }
  const double n_used = std::max<double>(1.0, double(a.used.size()));
  bubble /= n_used;
  if (step - loop_overhead > device_step) split["input_wait"] = (step - loop_overhead - device_step) * n_used;
  if (loop_overhead > 0) split["host_loop"] = loop_overhead * n_used;
  Json split_json = Json::object();
  for (const auto& [k, v] : split) split_json[k] = v / n_used;
  return split_json;
}

/// The used cores' compute, averaged as step_split's phases are (the two sum to the same).
Json compute_split_json(const Activity& a) {
  std::array<double, 3> sum{};
  for (int c : a.used)
    for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += a.compute_split[std::size_t(c)][k];
  const double n_used = std::max<double>(1.0, double(a.used.size()));
  return Json{{"mxu", sum[0] / n_used}, {"matmul_grid_steps", sum[1] / n_used}, {"other", sum[2] / n_used}};
}

/// Every core: busy and idle time, its HBM peak (when, in which task, by category).
Json cores_json(const RunInfo& info, const sim::TaskGraph& graph, const sim::SimResult& r, double step) {
  Json per_core = Json::array();
  for (int c = 0; c < graph.cores(); ++c) {
    const auto& cs = r.cores[c];
    Json at_peak;
    for (int k = 0; k < sim::kMemoryCategories; ++k)
      at_peak[sim::to_string(sim::MemoryCategory(k))] = cs.hbm_at_peak[k];
    per_core.push_back(
        Json{{"core", c},
             {"chip", c / info.cores_per_chip},
             {"busy_s", cs.busy_s},
             {"idle_s", step - cs.busy_s},
             {"peak_hbm_bytes", cs.peak_hbm_bytes},
             {"peak_at_s", cs.peak_at_s},
             {"peak_task", cs.peak_task >= 0 ? Json(graph.task(cs.peak_task).name) : Json("resident state")},
             {"hbm_at_peak", at_peak}});
  }
  return per_core;
}

Json overflow_json(const sim::TaskGraph& graph, const sim::Overflow& o) {
  if (!o.happened) return nullptr;
  return Json{{"core", o.core},
              {"task", o.task >= 0 ? Json(graph.task(o.task).name) : Json("resident state")},
              {"time_s", o.time_s},
              {"bytes_over", o.bytes_over}};
}

/// The schedule's details with what the simulation measured: each mesh op's collectives (their
/// time and how much the busiest core waited for them), each pipeline stage's busy time and peak.
Json measured_details(const RunInfo& info, const sim::TaskGraph& graph, const sim::SimResult& r,
                      const Activity& a) {
  Json details = info.schedule_details;
  if (details.contains("ops")) {
    std::map<std::string, Interval> by_name;
    for (int id = 0; id < graph.size(); ++id)
      if (graph.task(id).kind == TaskKind::Collective)
        by_name[graph.task(id).name] = {r.tasks[id].start_s, r.tasks[id].end_s};
    const auto busy_critical = merge(a.busy[a.critical]);
    for (auto& op : details["ops"])
      for (auto& c : op["collectives"]) {
        auto it = by_name.find(c.value("task", ""));
        if (it == by_name.end()) continue;
        c["time_s"] = it->second.second - it->second.first;
        c["exposed_s"] = uncovered({it->second}, busy_critical);
      }
  }
  if (details.contains("stages")) {
    for (auto& st : details["stages"]) {
      double stage_busy = 0, stage_peak = 0;
      for (const auto& c : st["cores"]) {
        stage_busy += r.cores[c.get<int>()].busy_s;
        stage_peak = std::max(stage_peak, r.cores[c.get<int>()].peak_hbm_bytes);
      }
      st["busy_s"] = stage_busy / double(st["cores"].size());
      st["peak_hbm_bytes"] = stage_peak;
    }
  }
  return details;
}

/// The critical core's compute by phase; each communication phase, how long it was under way (its
/// intervals' union) and how much of that the busiest core spent idle.
Json breakdown_json(const Activity& a, Json split) {
  Json compute_split = compute_split_json(a);
  Json phases = Json::object();
  for (const auto& [phase, s] : a.by_phase[a.critical]) phases[phase] = s;
  Json comm_phases = Json::object(), comm_exposed = Json::object();
  const auto critical_busy = merge(a.busy[a.critical]);
  for (const auto& [phase, intervals] : a.comm_by_phase) {
    const auto u = merge(intervals);
    comm_phases[phase] = length(u);
    comm_exposed[phase] = uncovered(u, critical_busy);
  }
  const auto comm_union = merge(a.comm);
  return Json{{"critical_core", a.critical},
              {"compute_s", phases},
              {"step_split_s", std::move(split)},
              {"compute_split_s", std::move(compute_split)},
              {"communication_s", length(comm_union)},
              {"communication_by_phase_s", comm_phases},
              {"exposed_communication_by_phase_s", comm_exposed},
              {"exposed_communication_s", uncovered(comm_union, critical_busy)}};
}

/// The hosts' side with what the TPUs' step asks of it.
Json input_json(const RunInfo& info, double device_step) {
  Json input = info.input;
  input["tpu_step_time_s"] = device_step;
  // What the busiest host's input pipeline must prepare to keep pace with the TPUs, in the time
  // its per-step work leaves (null: that work alone is longer than the TPUs' step).
  const double left = device_step - input.value("host_seconds_per_step", 0.0);
  input["host_examples_per_s_needed"] =
      left > 0 ? Json(input.value("busiest_host_examples", 0.0) / left) : Json(nullptr);
  const double prep = input["preparation_s"].is_null() ? 0.0 : input["preparation_s"].get<double>();
  input["bound"] = info.input_bound_s <= device_step     ? "tpus"
                   : prep > input.value("infeed_s", 0.0) ? "host preparation"
                                                         : "infeed";
  return input;
}

/// How many collective tasks ran each algorithm (sim/collectives), by name.
Json collective_algorithm_counts(const sim::TaskGraph& graph, const sim::SimResult& r) {
  std::map<std::string, int> counts;
  for (const auto& [id, names] : r.collective_algorithms)
    if (id < graph.size() && !names.empty()) ++counts[names];
  return counts.empty() ? Json::object() : Json(counts);
}

}  // namespace

namespace {

/// The highest peak of HBM over the cores, and the first core that reaches it.
std::pair<double, int> highest_peak(const sim::TaskGraph& graph, const sim::SimResult& r) {
  double peak = 0;
  int peak_core = 0;
  for (int c = 0; c < graph.cores(); ++c)
    if (r.cores[c].peak_hbm_bytes > peak) {
      peak = r.cores[c].peak_hbm_bytes;
      peak_core = c;
    }
  return {peak, peak_core};
}

/// Several slices: how many, the cores and batch of each, and the phase of the reductions over
/// the data-center network (its time, and what of it no compute hides on the busiest core).
Json slices_json(const RunInfo& info, const Activity& a) {
  const auto dcn = a.comm_by_phase.find("across_slices_dcn");
  const auto u = dcn == a.comm_by_phase.end() ? std::vector<Interval>{} : merge(dcn->second);
  return Json{{"count", info.slices},
              {"batch_per_slice", info.batch / info.slices},
              {"dcn_s", length(u)},
              {"exposed_dcn_s", uncovered(u, merge(a.busy[a.critical]))}};
}

Json slice_json(const RunInfo& info, int cores, std::size_t used) {
  Json j{{"name", info.slice},
         {"chips", info.chips},
         {"wraparound", info.wraparound},
         {"cores", cores},
         {"cores_used", used}};
  if (info.megacore) j["megacore"] = true;
  return j;
}

/// How the engine simulated the step.
Json engine_json(const sim::TaskGraph& graph, const sim::SimResult& r) {
  Json j{{"symmetric_collectives", r.symmetric_collectives}, {"flows_simulated", r.flows_simulated}};
  if (r.approximate_collectives) j["approximate"] = true;  // contention left out (--approximate-sharing)
  if (r.routes_detoured > 0) j["routes_detoured"] = r.routes_detoured;  // round failed links
  j["collective_algorithms"] = collective_algorithm_counts(graph, r);
  j["simulation"] = r.simulation;
  j["tasks_simulated"] = r.tasks_simulated;
  return j;
}

}  // namespace

Json result_json(const RunInfo& info, const sim::TaskGraph& graph, const sim::SimResult& r) {
  // The TPUs' step, and the step itself: longer when the hosts cannot keep up (its input
  // arrives later than the TPUs could take it), plus its share of the host's work between loops.
  const double device_step = r.step_time_s;
  const double step = std::max(device_step, info.input_bound_s) + info.loop_overhead_s;
  const Activity a = activity(graph, r, info.peak_flops_per_core);
  double bubble = 0;
  Json split = step_split(a, device_step, step, info.loop_overhead_s, bubble);
  Json per_core = cores_json(info, graph, r, step);
  const auto [peak, peak_core] = highest_peak(graph, r);
  Json details = measured_details(info, graph, r, a);

  const double n_used = std::max<double>(1.0, double(a.used.size()));
  const double peak_flops = info.peak_flops_per_core * n_used * step;  // one slice's, as the flops
  Json out;
  out["schema"] = "tpusim.result/1";
  out["fits"] = r.fits;
  out["step_time_s"] = step;
  out["examples_per_s"] = step > 0 ? double(info.batch) / step : 0.0;
  out["mxu_utilization"] = step > 0 ? info.model_flops / peak_flops : 0.0;
  out["hardware_flops_utilization"] = step > 0 ? info.hardware_flops / peak_flops : 0.0;
  if (info.useful_model_flops >= 0)
    out["useful_mxu_utilization"] = step > 0 ? info.useful_model_flops / peak_flops : 0.0;
  out["model_flops_per_step"] = info.model_flops * info.slices;
  out["hardware_flops_per_step"] = info.hardware_flops * info.slices;
  out["bubble_fraction"] = bubble;
  out["bubble_fraction_ideal"] =
      details.contains("bubble_fraction_ideal") ? details["bubble_fraction_ideal"] : Json(nullptr);
  out["params"] = info.params;
  out["batch"] = info.batch;
  out["peak_hbm_bytes"] = peak;
  out["peak_hbm_core"] = peak_core;
  out["hbm_capacity_bytes"] = r.hbm_capacity_bytes;
  out["overflow"] = overflow_json(graph, r.overflow);
  if (r.worst_overflow.happened) out["worst_overflow"] = overflow_json(graph, r.worst_overflow);
  // Whether the step time describes a step that can run: a step over HBM cannot.
  out["timing"] = r.fits ? "runnable" : "hypothetical: the step does not fit in HBM";
  if (!info.notes.empty()) out["notes"] = info.notes;
  out["hardware"] = info.hardware;
  out["slice"] = slice_json(info, graph.cores(), a.used.size());
  if (info.slices > 1) out["slices"] = slices_json(info, a);
  out["model"] = Json{
      {"kind", info.model_kind}, {"name", info.model_name}, {"params", info.params}, {"layers", info.layers}};
  out["schedule"] = Json{{"kind", info.schedule}, {"details", details}};
  out["breakdown"] = breakdown_json(a, std::move(split));
  if (!info.input.is_null()) out["input"] = input_json(info, device_step);
  out["engine"] = engine_json(graph, r);
  out["cores"] = per_core;
  out["study"] = info.study;
  return out;
}

namespace {

/// printf-style formatting into a string (the summary's numeric lines).
template <typename... Args>
std::string formatted(const char* fmt, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

/// The input line: examples on the busiest host, the infeed, host costs, what bounds the step.
void summary_input(std::ostringstream& out, const Json& in) {
  out << formatted("  input             %.0f examples per step on the busiest host",
                   in["busiest_host_examples"].get<double>());
  out << (in["host_examples_per_s_needed"].is_null()
              ? std::string(" (its per-step work alone outlasts the TPUs' step)")
              : formatted(" (%.0f/s to keep pace)", in["host_examples_per_s_needed"].get<double>()));
  out << "; infeed " << human_seconds(in["infeed_s"].get<double>()) << " per chip";
  if (!in["preparation_s"].is_null())
    out << "; preparation " << human_seconds(in["preparation_s"].get<double>());
  if (in.value("host_seconds_per_step", 0.0) > 0)
    out << " (" << human_seconds(in["host_seconds_per_step"].get<double>()) << " of it per step)";
  if (in.value("loop_overhead_s", 0.0) > 0)
    out << "; host loop " << human_seconds(in["loop_overhead_s"].get<double>()) << " per step";
  const std::string bound = in["bound"].get<std::string>();
  out << (bound == "tpus" ? "" : "; the step waits for its input (" + bound + "-bound)") << "\n";
}

/// " (128.301–141.220)": the interval of a time in the unit `human_seconds` gives the point, when
/// the result has intervals (run --intervals).
std::string seconds_interval(const Json& j, const char* quantity) {
  if (!j.contains("intervals") || !j["intervals"].contains(quantity)) return "";
  const double point = j[quantity].get<double>(), scale = point >= 1.0 ? 1.0 : point >= 1e-3 ? 1e3 : 1e6;
  const auto& iv = j["intervals"][quantity];
  return formatted(" (%.3f–%.3f)", iv[0].get<double>() * scale, iv[1].get<double>() * scale);
}

/// The step time's interval with the model's validated error, or why there is none.
std::string model_error_text(const Json& j) {
  if (!j.contains("intervals") || !j["intervals"].contains("with_model_error")) return "";
  const Json& m = j["intervals"]["with_model_error"];
  if (!m.contains("step_time_s")) return "  with model error  " + m["note"].get<std::string>() + "\n";
  const Json& iv = m["step_time_s"];
  const std::string high = iv[1].is_null() ? "unbounded" : human_seconds(iv[1].get<double>());
  const auto n = m["of_cases"].get<std::size_t>(), k = m["rank"].get<std::size_t>();
  const std::string of = m.contains("note") ? "every family (too few " + m["family"].get<std::string>() + ")"
                                            : m["family"].get<std::string>();
  return "  with model error  " + human_seconds(iv[0].get<double>()) + "–" + high +
         formatted(
             " with the model's validated error on %s (%zu cases: %.1f %%, %s, covers a new case with "
             "probability %zu/%zu)\n",
             of.c_str(), n, 100.0 * m["error_bound"].get<double>(),
             (k == n ? std::string("the largest") : "the " + std::to_string(k) + "th smallest").c_str(), k,
             n + 1);
}

/// " (14.20 GiB – 15.01 GiB)": a byte count's interval, when the result has one.
std::string bytes_interval(const Json& j, const char* quantity) {
  if (!j.contains("intervals") || !j["intervals"].contains(quantity)) return "";
  const auto& iv = j["intervals"][quantity];
  return " (" + human_bytes(iv[0].get<double>()) + " – " + human_bytes(iv[1].get<double>()) + ")";
}

/// The intervals' footing: how many assumptions moved, how, and which have no range.
void summary_intervals(std::ostringstream& out, const Json& j) {
  if (!j.contains("intervals")) return;
  const auto& iv = j["intervals"];
  std::size_t failed = 0;
  for (const auto& a : iv["assumptions"])
    for (const char* end : {"at_low", "at_high"})
      if (a[end].is_object() && a[end].contains("failure")) ++failed;
  out << "  intervals         (in brackets) over the ranges of " << iv["assumptions"].size()
      << " assumptions, one at a time, combined in quadrature";
  if (!iv["assumed_without_range"].empty())
    out << "; " << iv["assumed_without_range"].size() << " assumed figures without a range move nothing";
  if (failed) out << "; " << failed << " runs at a range end failed (see result.json)";
  if (iv.contains("approximate_ends"))
    out << "; " << iv["approximate_ends"].size()
        << " range ends simulated approximately (collectives sharing links at once, contention between "
           "them left out: "
        << iv["approximate_ends"][0].get<std::string>() << (iv["approximate_ends"].size() > 1 ? ", ..." : "")
        << ")";
  out << "\n";
}

/// The peak HBM line (what the busiest core holds at its peak) and where the peak is.
void summary_memory(std::ostringstream& out, const Json& j) {
  out << "  peak HBM/device   " << human_bytes(j["peak_hbm_bytes"].get<double>())
      << bytes_interval(j, "peak_hbm_bytes") << " of " << human_bytes(j["hbm_capacity_bytes"].get<double>())
      << " usable";
  const auto& peak_core = j["cores"][j["peak_hbm_core"].get<int>()];
  const auto& at_peak = peak_core["hbm_at_peak"];
  const Json& remat = j.value("compiler_remat", Json());
  out << " (";
  if (remat.is_object() && remat.value("fits", false))  // the cores' figures are the every-layer run's
    out << "re-materialized on every layer "
        << human_bytes(remat["every_layer"]["peak_hbm_bytes"].get<double>()) << ": ";
  bool first = true;
  for (auto it = at_peak.begin(); it != at_peak.end(); ++it) {
    if (it.value().get<double>() <= 0) continue;
    out << (first ? "" : ", ") << it.key() << " " << human_bytes(it.value().get<double>());
    first = false;
  }
  out << ")\n";
  out << "  peak at           " << human_seconds(peak_core["peak_at_s"].get<double>()) << " on core "
      << j["peak_hbm_core"].get<int>() << ", in " << peak_core["peak_task"].get<std::string>() << "\n";
}

/// "core 5 over by 1.20 GiB at backward block3 (12.3 ms)".
std::string overflow_text(const Json& o) {
  return "core " + std::to_string(o["core"].get<int>()) + " over by " +
         human_bytes(o["bytes_over"].get<double>()) + " at " + o["task"].get<std::string>() + " (" +
         human_seconds(o["time_s"].get<double>()) + ")";
}

/// Whether the step fits; if not, the worst overflow (the furthest over capacity) and the first.
void summary_fit(std::ostringstream& out, const Json& j) {
  out << "  fits              " << (j["fits"].get<bool>() ? "yes" : "NO");
  if (j.contains("intervals") && j["intervals"].contains("fits"))
    out << " (over the peak's interval: " << j["intervals"]["fits"].get<std::string>() << ")";
  if (!j["overflow"].is_null()) {
    const Json& first = j["overflow"];
    const Json& worst = j.contains("worst_overflow") ? j["worst_overflow"] : first;
    if (worst == first)
      out << ": " << overflow_text(first) << ", the first and the worst overflow";
    else
      out << ": worst " << overflow_text(worst) << "; first " << overflow_text(first);
  }
  out << "\n";
}

}  // namespace

/// What the compiler's re-materialization did: the policy that fits and its cost, or that none does.
std::string compiler_remat_text(const Json& c) {
  if (!c.value("fits", false)) {
    std::string tried;
    for (const auto& p : c["tried"]) tried += (tried.empty() ? "" : ", ") + p.dump();
    if (tried.empty())
      return "does not fit even with the compiler's re-materialization (the study's is already full)";
    return "does not fit even with the compiler's re-materialization (remat " + tried + " tried)";
  }
  return "fits once re-materialized (remat " + c["policy"].dump() + " on " +
         formatted("%.0f %%", 100.0 * c["share_of_layers_needed"].get<double>()) + " of the layers: +" +
         human_seconds(c["seconds_added"].get<double>()) + ", peak " +
         human_bytes(c["peak_hbm_bytes"].get<double>()) + "; on every layer " +
         human_bytes(c["every_layer"]["bytes_saved"].get<double>()) + " saved, step " +
         human_seconds(c["every_layer"]["step_time_s"].get<double>()) + ", the breakdown's and charts' run)";
}

std::string perturbations_text(const Json& p) {
  std::string text = std::to_string(p["slow_chips"].size()) + " slow chips, " +
                     std::to_string(p["slow_links"].size()) + " slow links";
  if (!p.contains("uniform_step_time_s"))
    return text + "; the uniform step could not be run: " + p["uniform"].value("failure", "");
  return text + "; " + formatted("%.3fx", p["slowdown"].get<double>()) + " the uniform pod's step (" +
         human_seconds(p["uniform_step_time_s"].get<double>()) + ")";
}

/// Several slices: how many, and the reductions' time on the data-center network.
void summary_slices(std::ostringstream& out, const Json& j) {
  if (!j.contains("slices")) return;
  const Json& sl = j["slices"];
  out << formatted("  slices            %d over the data-center network, %lld examples each; ",
                   sl["count"].get<int>(), (long long)sl["batch_per_slice"].get<std::int64_t>())
      << human_seconds(sl["dcn_s"].get<double>()) << " of reductions on it ("
      << human_seconds(sl["exposed_dcn_s"].get<double>()) << " exposed)\n";
}

/// A device's compute: the MXUs at peak, the grid steps, the rest.
std::string compute_split_text(const Json& split) {
  const double mxu = split["mxu"].get<double>(), grid = split["matmul_grid_steps"].get<double>(),
               other = split["other"].get<double>();
  return "  compute           " + human_seconds(mxu + grid + other) + " per device: " + human_seconds(mxu) +
         " MXU at peak, " + human_seconds(grid) + " matmul grid steps, " + human_seconds(other) +
         " other ops and memory-bound time\n";
}

/// An amount for the summary: whole above 100, three significant digits below.
std::string amount(double v) { return formatted(v >= 100 ? "%.0f" : "%.3g", v); }

/// Days to the study's target and their cost, when it has them.
void summary_time_to_train(std::ostringstream& out, const Json& j) {
  if (!j.contains("time_to_train")) return;
  const Json& t = j["time_to_train"];
  const auto range = [](const Json& r) {
    return " (" + amount(r[0].get<double>()) + "–" + amount(r[1].get<double>()) + ")";
  };
  out << "  time to train     " << formatted("%.4g", t["target"].begin().value().get<double>()) << " "
      << t["target"].begin().key() << ": " << amount(t["steps"].get<double>()) << " steps, "
      << amount(t["days"].get<double>()) << " days"
      << (t.contains("days_interval") ? range(t["days_interval"]) : "") << " at the simulated step; "
      << amount(t["days_with_goodput"].get<double>()) << " days" << range(t["days_with_goodput_interval"])
      << formatted(
             " at goodput %.1f %% (%.1f–%.1f %%: checkpoints every %s steps, interruptions, restarts)\n",
             100 * t["goodput"].get<double>(), 100 * t["goodput_interval"][0].get<double>(),
             100 * t["goodput_interval"][1].get<double>(),
             t["checkpoint"]["every_steps"].is_null()
                 ? "no"
                 : amount(t["checkpoint"]["every_steps"].get<double>()).c_str());
  if (!j.contains("cost")) return;
  const Json& c = j["cost"];
  out << "  cost              $" << amount(c["usd"].get<double>())
      << (c.contains("usd_interval") ? range(c["usd_interval"]) : "") << ", $"
      << amount(c["usd_with_goodput"].get<double>()) << range(c["usd_with_goodput_interval"])
      << " with goodput: " << amount(c["chip_hours"].get<double>()) << " chip-hours on "
      << amount(c["chips"].get<double>())
      << formatted(" chips at $%.2f per chip-hour\n", c["price_per_chip_hour"].get<double>());
}

std::string summary_text(const Json& j) {
  std::ostringstream out;
  const auto& slice = j["slice"];
  out << "tpusim: " << j["model"]["name"].get<std::string>() << " on " << j["hardware"].get<std::string>()
      << " " << slice["name"].get<std::string>() << " (" << slice["cores"].get<int>()
      << (slice.value("megacore", false) ? " devices, megacore: a device is a chip" : " devices: TensorCores")
      << "), " << j["schedule"]["kind"].get<std::string>() << "\n";
  summary_slices(out, j);
  out << formatted("  params            %.3f M\n", j["params"].get<double>() / 1e6);
  out << formatted("  batch             %lld examples per step\n", (long long)j["batch"].get<std::int64_t>());
  out << "  step time         " << human_seconds(j["step_time_s"].get<double>())
      << seconds_interval(j, "step_time_s")
      << (j.value("fits", true) ? "" : " (hypothetical: the step does not fit in HBM, so it cannot run)")
      << "\n";
  out << model_error_text(j);
  if (j.contains("compiler_remat"))
    out << "  compiler remat    " << compiler_remat_text(j["compiler_remat"]) << "\n";
  if (j.contains("perturbations"))
    out << "  perturbed         " << perturbations_text(j["perturbations"]) << "\n";
  out << formatted("  examples/s        %.1f\n", j["examples_per_s"].get<double>());
  summary_time_to_train(out, j);
  out << formatted("  MXU utilization   %.1f %%", 100.0 * j["mxu_utilization"].get<double>());
  if (j.contains("intervals") && j["intervals"].contains("mxu_utilization"))
    out << formatted(" (%.1f–%.1f)", 100.0 * j["intervals"]["mxu_utilization"][0].get<double>(),
                     100.0 * j["intervals"]["mxu_utilization"][1].get<double>());
  out << " (model FLOPs / peak)";
  if (j.contains("useful_mxu_utilization"))
    out << formatted("; useful %.1f %% (the experts' routed tokens only, not their empty slots)",
                     100.0 * j["useful_mxu_utilization"].get<double>());
  out << "\n";
  if (!j["bubble_fraction_ideal"].is_null())
    out << formatted("  pipeline bubble   %.1f %% of the step (ideal (K-1)/(M+K-1) = %.1f %%)\n",
                     100.0 * j["bubble_fraction"].get<double>(),
                     100.0 * j["bubble_fraction_ideal"].get<double>());
  const auto& b = j["breakdown"];
  if (b.contains("compute_split_s")) out << compute_split_text(b["compute_split_s"]);
  out << "  communication     " << human_seconds(b["communication_s"].get<double>()) << " ("
      << human_seconds(b["exposed_communication_s"].get<double>()) << " exposed)\n";
  if (j.contains("input")) summary_input(out, j["input"]);
  summary_memory(out, j);
  if (j.contains("functional")) {
    const auto& f = j["functional"];
    out << formatted(
        "  functional        %d steps, loss %.5g -> %.5g (one core: %.5g -> %.5g), max weight "
        "difference %.2g\n",
        f["steps"].get<int>(), f["loss"].front().get<double>(), f["loss"].back().get<double>(),
        f["reference_loss"].front().get<double>(), f["reference_loss"].back().get<double>(),
        f["max_rel_diff"].get<double>());
  }
  summary_fit(out, j);
  summary_intervals(out, j);
  for (const auto& note : j.value("notes", Json::array()))
    out << "  note              " << note.get<std::string>() << "\n";
  return out.str();
}

namespace {

/// HBM over time as counter tracks ("ph": "C"), one per core with the memory categories as its
/// series, sampled after every instant at which an effect on the core applies (at its task's
/// start or end). The cores with the highest peaks first, at most kMaxCounterCores of them.
void append_memory_counters(const sim::TaskGraph& graph, const sim::SimResult& r, int cores_per_chip,
                            Json& events) {
  constexpr int kMaxCounterCores = 256;
  struct Change {
    double time_s;
    sim::MemoryEffect effect;
  };
  std::vector<std::vector<Change>> changes(static_cast<std::size_t>(graph.cores()));
  for (int id = 0; id < graph.size(); ++id)
    for (const auto& e : graph.task(id).memory)
      changes[std::size_t(e.core)].push_back(
          {e.when == sim::MemoryEffect::When::Start ? r.tasks[id].start_s : r.tasks[id].end_s, e});
  std::vector<int> cores;
  for (int c = 0; c < graph.cores(); ++c)
    if (!changes[std::size_t(c)].empty()) cores.push_back(c);
  std::stable_sort(cores.begin(), cores.end(),
                   [&](int a, int b) { return r.cores[a].peak_hbm_bytes > r.cores[b].peak_hbm_bytes; });
  if (cores.size() > kMaxCounterCores) cores.resize(kMaxCounterCores);
  std::sort(cores.begin(), cores.end());
  for (int c : cores) {
    auto& list = changes[std::size_t(c)];
    std::stable_sort(list.begin(), list.end(),
                     [](const Change& a, const Change& b) { return a.time_s < b.time_s; });
    sim::MemoryBreakdown now = graph.resident()[c];
    auto sample = [&](double t) {
      Json args = Json::object();
      for (int k = 0; k < sim::kMemoryCategories; ++k)
        args[sim::to_string(sim::MemoryCategory(k))] = std::max(0.0, now[k]);
      events.push_back(Json{{"ph", "C"},
                            {"name", "HBM core " + std::to_string(c) + " (bytes)"},
                            {"pid", c / cores_per_chip},
                            {"ts", t * 1e6},
                            {"args", std::move(args)}});
    };
    sample(0.0);
    for (std::size_t i = 0; i < list.size(); ++i) {
      now[int(list[i].effect.category)] += list[i].effect.bytes;
      if (i + 1 == list.size() || list[i + 1].time_s > list[i].time_s) sample(list[i].time_s);
    }
  }
}

}  // namespace

namespace {

/// " (compute x0.5)", " (bandwidth x0.25)", " (failed)": a perturbed chip's or link's scale in
/// its track's name; "" as specified.
std::string scale_note(double scale, const char* what) {
  if (scale == 1.0) return "";
  if (scale == 0.0) return " (failed)";
  return formatted(" (%s x%g)", what, scale);
}

/// The trace's tracks: a process per chip (a thread per core and per outgoing link), and one
/// for the collectives and transfers; perturbed chips and links say so in their names.
void trace_tracks(Json& events, int chips, int cores_per_chip,
                  const std::vector<std::string>& dimension_names, const NetworkState& network) {
  const int links_per_chip = 2 * int(dimension_names.size());
  for (int chip = 0; chip < chips; ++chip) {
    events.push_back(
        Json{{"ph", "M"},
             {"pid", chip},
             {"name", "process_name"},
             {"args",
              {{"name", "chip " + std::to_string(chip) + scale_note(network.chip_scale(chip), "compute")}}}});
    for (int i = 0; i < cores_per_chip; ++i)
      events.push_back(Json{{"ph", "M"},
                            {"pid", chip},
                            {"tid", i},
                            {"name", "thread_name"},
                            {"args", {{"name", "core " + std::to_string(chip * cores_per_chip + i)}}}});
    for (std::size_t d = 0; d < 2 * dimension_names.size(); ++d)
      events.push_back(Json{
          {"ph", "M"},
          {"pid", chip},
          {"tid", 100 + int(d)},
          {"name", "thread_name"},
          {"args",
           {{"name", std::string("link ") + (d % 2 == 0 ? "+" : "-") + dimension_names[d / 2] +
                         scale_note(network.link_scale(chip * links_per_chip + int(d)), "bandwidth")}}}});
  }
  events.push_back(Json{{"ph", "M"},
                        {"pid", chips},
                        {"name", "process_name"},
                        {"args", {{"name", "collectives and transfers"}}}});
}

/// Each task as a complete event: compute on its core's track, communication on the shared one.
void trace_tasks(Json& events, const sim::TaskGraph& graph, const sim::SimResult& r, int cores_per_chip,
                 int comm_pid) {
  for (int id = 0; id < graph.size(); ++id) {
    const sim::Task& t = graph.task(id);
    const auto& tm = r.tasks[id];
    Json e{{"ph", "X"},
           {"name", t.name},
           {"cat", t.phase},
           {"ts", tm.start_s * 1e6},
           {"dur", (tm.end_s - tm.start_s) * 1e6}};
    if (t.kind == TaskKind::Compute) {
      e["pid"] = t.core / cores_per_chip;
      e["tid"] = t.core % cores_per_chip;
    } else {
      e["pid"] = comm_pid;
      e["tid"] = id;
      e["args"] = Json{{"bytes", t.bytes}, {"kind", sim::to_string(t.kind)}};
      if (auto a = r.collective_algorithms.find(id); a != r.collective_algorithms.end() && !a->second.empty())
        e["args"]["algorithm"] = a->second;
    }
    events.push_back(std::move(e));
  }
}

/// Flows over the data-center network (several slices) on a track per host's network card and
/// direction, in a process of their own (`pid`).
void trace_dcn_flows(Json& events, const sim::TaskGraph& graph, const sim::SimResult& r, int pid) {
  std::set<int> tracks;
  for (const auto& f : r.flows) {
    if (!sim::is_dcn_endpoint(f.src_core) && !sim::is_dcn_endpoint(f.dst_core)) continue;
    const bool out = sim::is_dcn_endpoint(f.dst_core);
    const int host = sim::dcn_endpoint_host(out ? f.dst_core : f.src_core), tid = 2 * host + (out ? 0 : 1);
    if (tracks.empty())
      events.push_back(Json{
          {"ph", "M"}, {"pid", pid}, {"name", "process_name"}, {"args", {{"name", "data-center network"}}}});
    if (tracks.insert(tid).second)
      events.push_back(
          Json{{"ph", "M"},
               {"pid", pid},
               {"tid", tid},
               {"name", "thread_name"},
               {"args", {{"name", "host " + std::to_string(host) + (out ? " card out" : " card in")}}}});
    events.push_back(Json{{"ph", "X"},
                          {"name", graph.task(f.task).name},
                          {"cat", "dcn_flow"},
                          {"pid", pid},
                          {"tid", tid},
                          {"ts", f.start_s * 1e6},
                          {"dur", (f.end_s - f.start_s) * 1e6},
                          {"args", {{"bytes", f.bytes}, {"core", out ? f.src_core : f.dst_core}}}});
  }
}

}  // namespace

Json chrome_trace(const sim::TaskGraph& graph, const sim::SimResult& r, int cores_per_chip,
                  const std::vector<std::string>& dimension_names, const NetworkState& network) {
  Json events = Json::array();
  const int chips = graph.cores() / cores_per_chip;
  trace_tracks(events, chips, cores_per_chip, dimension_names, network);
  trace_tasks(events, graph, r, cores_per_chip, chips);
  append_memory_counters(graph, r, cores_per_chip, events);
  const int links_per_chip = 2 * int(dimension_names.size());
  trace_dcn_flows(events, graph, r, chips + 1);
  for (const auto& f : r.flows) {
    for (int link : f.links) {
      events.push_back(
          Json{{"ph", "X"},
               {"name", graph.task(f.task).name},
               {"cat", "flow"},
               {"pid", link / links_per_chip},
               {"tid", 100 + link % links_per_chip},
               {"ts", f.start_s * 1e6},
               {"dur", (f.end_s - f.start_s) * 1e6},
               {"args", {{"bytes", f.bytes}, {"from_core", f.src_core}, {"to_core", f.dst_core}}}});
    }
  }
  return Json{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace tpusim::reports
