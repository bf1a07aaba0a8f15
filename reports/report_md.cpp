#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "reports/run_report.hpp"

namespace tpusim::reports {

namespace {

std::string pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %%", 100.0 * v);
  return buf;
}

std::string num(double v, const char* format = "%.3g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

/// Several slices: how many, and the reductions' time on the data-center network.
void slices_rows(std::ostringstream& md, const Json& sl) {
  md << "| slices (data parallelism over the data-center network) | " << sl["count"].get<int>() << ", "
     << sl["batch_per_slice"].get<std::int64_t>() << " examples each |\n";
  md << "| reductions across slices, on the data-center network | "
     << human_seconds(sl["dcn_s"].get<double>()) << " (" << human_seconds(sl["exposed_dcn_s"].get<double>())
     << " exposed) |\n";
}

/// The title and the table of headline figures.
void summary_section(std::ostringstream& md, const Json& j, double step) {
  md << "# " << j["model"]["name"].get<std::string>() << " on " << j["hardware"].get<std::string>() << " "
     << j["slice"]["name"].get<std::string>() << " (" << j["schedule"]["kind"].get<std::string>() << ")\n\n";
  md << "| figure | value |\n| --- | --- |\n";
  md << "| step time | " << human_seconds(step) << " |\n";
  md << "| examples per second | " << num(j["examples_per_s"].get<double>(), "%.1f") << " |\n";
  md << "| MXU utilization (model FLOPs / peak of the " << j["slice"]["cores_used"].get<int>()
     << " cores used) | " << pct(j["mxu_utilization"].get<double>()) << " |\n";
  md << "| parameters | " << num(j["params"].get<double>() / 1e6, "%.2f") << " M |\n";
  md << "| batch | " << j["batch"].get<std::int64_t>() << " |\n";
  if (j.contains("slices")) slices_rows(md, j["slices"]);
  md << "| peak HBM per device | " << human_bytes(j["peak_hbm_bytes"].get<double>()) << " of "
     << human_bytes(j["hbm_capacity_bytes"].get<double>()) << " usable (the runtime's reserve excluded) |\n";
  md << "| fits | " << (j["fits"].get<bool>() ? "yes" : "**no**") << " |\n";
  if (j.contains("compiler_remat"))
    md << "| the compiler's re-materialization | " << compiler_remat_text(j["compiler_remat"]) << " |\n";
  if (j.contains("perturbations"))
    md << "| perturbed (what-if) | " << perturbations_text(j["perturbations"]) << " |\n";
  if (j.contains("intervals")) {
    // run --intervals: the spread over the ranges of the assumptions, one at a time.
    const Json& iv = j["intervals"];
    md << "| step time interval | " << human_seconds(iv["step_time_s"][0].get<double>()) << " – "
       << human_seconds(iv["step_time_s"][1].get<double>()) << " |\n";
    md << "| peak HBM interval | " << human_bytes(iv["peak_hbm_bytes"][0].get<double>()) << " – "
       << human_bytes(iv["peak_hbm_bytes"][1].get<double>()) << " |\n";
    if (iv.contains("fits"))
      md << "| fits over the peak's interval | " << iv["fits"].get<std::string>() << " |\n";
    if (iv.contains("with_model_error")) {
      const Json& m = iv["with_model_error"];
      md << "| step time with the model's validated error | ";
      if (m.contains("step_time_s"))
        md << human_seconds(m["step_time_s"][0].get<double>()) << " – "
           << (m["step_time_s"][1].is_null() ? std::string("unbounded")
                                             : human_seconds(m["step_time_s"][1].get<double>()))
           << " (" << m["family"].get<std::string>() << ", " << m["cases"].size() << " cases) |\n";
      else
        md << m["note"].get<std::string>() << " |\n";
    }
    md << "\nIntervals: " << iv["method"].get<std::string>() << "; over the ranges of "
       << iv["assumptions"].size()
       << " assumptions (result.json `intervals` lists each with its range, source and shifts).\n";
  }
  md << "\n";
}

/// The compute of the split above by kind (breakdown.compute_split_s), each with its share of the step.
void compute_kinds(std::ostringstream& md, const Json& c, double step) {
  auto part = [&](const char* key) {
    const double t = c[key].get<double>();
    return human_seconds(t) + " (" + pct(step > 0 ? t / step : 0) + ")";
  };
  md << "Its compute by kind: the MXUs at peak on the padded FLOPs " << part("mxu")
     << ", the matmuls' grid steps " << part("matmul_grid_steps") << ", other ops and memory-bound time "
     << part("other") << " (`breakdown.compute_split_s`).\n\n";
}

/// Where the step goes, averaged over the cores used.
void split_section(std::ostringstream& md, const Json& j, double step) {
  const auto& split = j["breakdown"]["step_split_s"];
  md << "## Where the step goes (average over the cores used)\n\n| part | time | share |\n| --- | --- | --- "
        "|\n";
  // In the order a step runs: compute, what waits on communication, the hosts, idle; any other
  // part after them.
  std::vector<std::string> parts = {"forward",    "recompute",          "backward",
                                    "update",     "exposed_collective", "exposed_transfer",
                                    "input_wait", "host_loop",          "idle"};
  for (auto it = split.begin(); it != split.end(); ++it)
    if (std::find(parts.begin(), parts.end(), it.key()) == parts.end()) parts.push_back(it.key());
  for (const auto& part : parts) {
    if (!split.contains(part)) continue;
    const double t = split[part].get<double>();
    md << "| " << part << " | " << human_seconds(t) << " | " << pct(step > 0 ? t / step : 0) << " |\n";
  }
  md << "\n";
  if (j["breakdown"].contains("compute_split_s")) compute_kinds(md, j["breakdown"]["compute_split_s"], step);
}

/// The pipeline's bubble and its stages (pipeline schedules).
void pipeline_section(std::ostringstream& md, const Json& j, const Json& details) {
  const auto& split = j["breakdown"]["step_split_s"];
  if (!j["bubble_fraction_ideal"].is_null()) {
    const double measured = j["bubble_fraction"].get<double>(),
                 ideal = j["bubble_fraction_ideal"].get<double>();
    md << "## Pipeline bubble\n\n";
    md << "Measured idle time of the pipeline cores: **" << pct(measured)
       << "** of the step; an ideally balanced pipeline "
       << "with free communication would idle (K-1)/(M+K-1) = **" << pct(ideal) << "**.";
    if (details.contains("stage_imbalance"))
      md << " The stages' estimated costs differ by up to " << pct(details["stage_imbalance"].get<double>())
         << " over the mean (the slowest stage sets the pace).";
    if (details.value("partition_set_by", "") == "memory")
      md << " **Memory, not cost, set the cut**: the cost-balanced partition overflows a stage's HBM, so the "
            "layers are balanced among the partitions whose every stage fits (`partition: memory_aware`).";
    else if (details.value("partition_set_by", "") == "cost (no partition fits)")
      md << " No partition fits every stage in HBM (`partition: memory_aware`): the cut is the cost-balanced "
            "one.";
    md << " Idle time beyond the ideal comes from that imbalance, from transfers between stages that are not "
          "hidden ("
       << human_seconds(split.value("exposed_transfer", 0.0))
       << " per core on average), from the all-reduce of gradients ("
       << human_seconds(split.value("exposed_collective", 0.0))
       << ") and from the update; recomputation scheduled early fills part of it.";
    const Json& by_phase = j["breakdown"]["communication_by_phase_s"];
    if (j["study"]["schedule"].contains("tensor_parallel") && by_phase.contains("tensor_parallel"))
      md << " Each stage runs on " << j["study"]["schedule"]["tensor_parallel"].get<int>()
         << " cores that split its layers (`tensor_parallel`, over "
         << j["study"]["schedule"]["tensor_layout"].dump() << "); their partial sums take "
         << human_seconds(by_phase["tensor_parallel"].get<double>())
         << " of all-reduces, which count as communication above, not as bubble.";
    md << "\n\n";
    md << "| stage | layers | parameters | cost per micro-batch | busy | peak HBM |\n| --- | --- | --- | --- "
          "| --- | --- |\n";
    for (const auto& st : details["stages"]) {
      md << "| " << st["stage"].get<int>() << " | " << st["first_layer"].get<std::string>() << " .. "
         << st["last_layer"].get<std::string>() << " ("
         << st["layers"][1].get<int>() - st["layers"][0].get<int>() + 1 << ") | "
         << num(st["params"].get<double>() / 1e6, "%.2f") << " M | "
         << human_seconds(st["cost_s"].get<double>()) << " | " << human_seconds(st["busy_s"].get<double>())
         << " | " << human_bytes(st["peak_hbm_bytes"].get<double>()) << " |\n";
    }
    md << "\n";
  }
}

/// Where each mesh dimension lies on the slice (mesh layouts).
void mesh_placement_section(std::ostringstream& md, const Json& details) {
  const bool mesh_placement = details.contains("placement") && details["placement"].is_array() &&
                              !details["placement"].empty() && details["placement"][0].is_object() &&
                              details["placement"][0].contains("mesh_dim");
  if (mesh_placement) {
    md << "## Mesh placement\n\nWhere each mesh dimension lies on the slice, and how far apart the "
          "neighbours of the rings "
          "its collectives run on are (1 hop: adjacent chips; more: the flows cross intermediate chips and "
          "share their links).\n\n";
    md << "| mesh dimension | size | spans | chips per group | most hops between ring neighbours |\n| --- | "
          "--- | --- | --- | --- |\n";
    for (const auto& m : details["placement"]) {
      std::string spans;
      for (const auto& a : m["spans"]) spans += (spans.empty() ? "" : ", ") + a.get<std::string>();
      md << "| " << m["mesh_dim"].get<std::string>() << " | " << m["size"].get<int>() << " | " << spans
         << " | " << m.value("group_chips", 0) << " | " << m.value("max_ring_hops", 0) << " |\n";
    }
    md << "\n";
  }
}

/// Each op's share and the collectives the layout induces (mesh layouts).
void ops_section(std::ostringstream& md, const Json& details) {
  if (details.contains("ops")) {
    md << "## Ops under the layout\n\nEach core's share of every op, and the collectives the layout induces "
          "(time as "
          "simulated; exposed: the part the busiest core waited for).\n\n";
    md << "| layer | op | local forward GFLOP | collective | mesh dims | bytes per core | time | exposed |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for (const auto& op : details["ops"]) {
      const std::string head = "| " + op["layer"].get<std::string>() + " | " + op["op"].get<std::string>() +
                               " | " + num(op.value("local_forward_flops", 0.0) / 1e9, "%.3f") + " | ";
      if (op["collectives"].empty()) {
        md << head << " | | | | |\n";
        continue;
      }
      for (const auto& c : op["collectives"]) {
        std::string dims;
        for (const auto& d : c["mesh_dims"]) dims += (dims.empty() ? "" : "+") + d.get<std::string>();
        md << head << c["what"].get<std::string>() << " | " << dims << " | "
           << human_bytes(c["bytes"].get<double>()) << " | "
           << (c.contains("time_s") ? human_seconds(c["time_s"].get<double>()) : "") << " | "
           << (c.contains("exposed_s") ? human_seconds(c["exposed_s"].get<double>()) : "") << " |\n";
      }
    }
    md << "\n";
  }
}

/// What the hosts feed the step (result.json's input).
void input_section(std::ostringstream& md, const Json& j) {
  if (!j.contains("input")) return;
  const auto& in = j["input"];
  md << "## Input from the hosts\n\n| figure | value |\n| --- | --- |\n";
  md << "| hosts | " << in["hosts"].get<int>() << " |\n";
  md << "| input per example | " << human_bytes(in["bytes_per_example"].get<double>()) << " |\n";
  md << "| busiest chip's infeed per step | " << human_bytes(in["busiest_chip_bytes"].get<double>()) << " in "
     << human_seconds(in["infeed_s"].get<double>()) << " over its host link |\n";
  md << "| busiest host's examples per step | " << num(in["busiest_host_examples"].get<double>(), "%.6g")
     << " ("
     << (in["host_examples_per_s_needed"].is_null()
             ? std::string("no rate keeps pace: the host's per-step work alone outlasts the TPUs' step")
             : num(in["host_examples_per_s_needed"].get<double>(), "%.0f") +
                   " per second to keep pace with the TPUs")
     << ") |\n";
  if (in.value("host_seconds_per_step", 0.0) > 0)
    md << "| the host's work per step, whatever its examples | "
       << human_seconds(in["host_seconds_per_step"].get<double>()) << " |\n";
  if (!in["preparation_s"].is_null() && !in["host_examples_per_s"].is_null())
    md << "| their preparation at " << num(in["host_examples_per_s"].get<double>(), "%.6g") << " per second"
       << (in.value("host_seconds_per_step", 0.0) > 0 ? ", with the per-step work" : "") << " | "
       << human_seconds(in["preparation_s"].get<double>()) << " |\n";
  else if (!in["preparation_s"].is_null())
    md << "| their preparation | " << human_seconds(in["preparation_s"].get<double>()) << " |\n";
  if (in.value("loop_overhead_s", 0.0) > 0)
    md << "| the host's work between loops, per step | " << human_seconds(in["loop_overhead_s"].get<double>())
       << " |\n";
  md << "| the step is bound by | " << in["bound"].get<std::string>() << " (TPU step "
     << human_seconds(in["tpu_step_time_s"].get<double>()) << ") |\n\n";
}

/// Cores whose HBM peaks alike: the same bytes at the same time in the same task (its name
/// without the core's number).
struct PeakGroup {
  double peak = 0, at = 0;
  std::string task;
  std::vector<int> cores;
};

std::string without_core(const std::string& task) {
  const auto at = task.rfind(" core ");
  if (at == std::string::npos || at + 6 >= task.size()) return task;
  for (std::size_t i = at + 6; i < task.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(task[i]))) return task;
  return task.substr(0, at);
}

std::vector<PeakGroup> peak_groups(const Json& cores) {
  std::vector<PeakGroup> groups;
  std::map<std::tuple<double, double, std::string>, std::size_t> index;
  for (const auto& c : cores) {
    const double peak = c["peak_hbm_bytes"].get<double>();
    if (peak <= 0) continue;
    PeakGroup g{peak, c["peak_at_s"].get<double>(), without_core(c["peak_task"].get<std::string>()), {}};
    auto [it, fresh] = index.try_emplace({g.peak, g.at, g.task}, groups.size());
    if (fresh) groups.push_back(std::move(g));
    groups[it->second].cores.push_back(c["core"].get<int>());
  }
  return groups;
}

/// Ascending core numbers as ranges: "0-15, 32-47".
std::string core_ranges(const std::vector<int>& cores) {
  std::string text;
  for (std::size_t i = 0; i < cores.size();) {
    std::size_t j = i;
    while (j + 1 < cores.size() && cores[j + 1] == cores[j] + 1) ++j;
    text += (text.empty() ? "" : ", ") + std::to_string(cores[i]) +
            (j > i ? "-" + std::to_string(cores[j]) : std::string());
    i = j + 1;
  }
  return text;
}

/// The busiest core's HBM at its peak, every core's peak, and an overflow.
void memory_section(std::ostringstream& md, const Json& j) {
  md << "## Memory\n\n![memory](memory.svg)\n\n";
  const auto& at_peak = j["cores"][j["peak_hbm_core"].get<int>()]["hbm_at_peak"];
  md << "Core " << j["peak_hbm_core"].get<int>() << " peaks at "
     << human_bytes(j["peak_hbm_bytes"].get<double>()) << " ("
     << pct(j["peak_hbm_bytes"].get<double>() / j["hbm_capacity_bytes"].get<double>())
     << " of its usable HBM) at "
     << human_seconds(j["cores"][j["peak_hbm_core"].get<int>()]["peak_at_s"].get<double>()) << ", in `"
     << j["cores"][j["peak_hbm_core"].get<int>()]["peak_task"].get<std::string>() << "`:\n\n";
  md << "| category | bytes at the peak |\n| --- | --- |\n";
  for (auto it = at_peak.begin(); it != at_peak.end(); ++it)
    md << "| " << it.key() << " | " << human_bytes(it.value().get<double>()) << " |\n";
  md << "\nEach core's peak and the task running it (cores that peak alike share a row):\n\n"
        "| cores | peak | at | task |\n| ---: | ---: | ---: | --- |\n";
  const auto groups = peak_groups(j["cores"]);
  std::size_t listed = 0;
  for (const auto& g : groups) {
    if (++listed > 64) {
      md << "| ... | | | (" << groups.size() << " groups of cores; the rest in result.json) |\n";
      break;
    }
    md << "| " << core_ranges(g.cores) << " | " << human_bytes(g.peak) << " | " << human_seconds(g.at)
       << " | " << g.task << " |\n";
  }
  if (!j["overflow"].is_null()) {
    md << "\n**Does not fit**: core " << j["overflow"]["core"].get<int>() << " exceeds its HBM by "
       << human_bytes(j["overflow"]["bytes_over"].get<double>()) << " at "
       << human_seconds(j["overflow"]["time_s"].get<double>()) << ", when `"
       << j["overflow"]["task"].get<std::string>() << "` allocates.\n";
  }
}

/// A perturbed run: where its slow chips and links are, and who waited.
void chips_section(std::ostringstream& md, const Json& j) {
  md << "## Chips\n\n![chips](chips.svg)\n\n";
  const auto& p = j["perturbations"];
  md << p["slow_chips"].size() << " slow chips and " << p["slow_links"].size()
     << " slow or failed links (outlined and marked on the map; each cell's shade is its busiest core's busy "
        "share of the step). The chip whose work gated the step: "
     << j["breakdown"].value("critical_chip", Json(nullptr)).dump() << ".\n\n";
}

}  // namespace

std::string report_markdown(const Json& j) {
  std::ostringstream md;
  const double step = j["step_time_s"].get<double>();
  summary_section(md, j, step);
  md << "## Timeline\n\n![timeline](timeline.svg)\n\n";
  split_section(md, j, step);
  const auto& details = j["schedule"]["details"];
  pipeline_section(md, j, details);
  mesh_placement_section(md, details);
  ops_section(md, details);
  input_section(md, j);
  memory_section(md, j);
  if (j.contains("perturbations")) chips_section(md, j);
  return md.str();
}

}  // namespace tpusim::reports
