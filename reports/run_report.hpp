// Writers for one simulated step: result.json (schema tpusim.result/1), the terminal summary
// (rendered from result.json, so both always agree) and a Chrome/Perfetto trace.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hardware/network_state.hpp"
#include "sim/result.hpp"
#include "sim/task_graph.hpp"

namespace tpusim::reports {

using Json = nlohmann::json;

/// What the reports need to know about the study beyond the simulation itself.
struct RunInfo {
  Json study;                                ///< the resolved study, echoed into result.json
  std::string hardware;                      ///< hardware name
  std::string slice;                         ///< slice name
  std::vector<int> chips;                    ///< chips along each torus dimension
  std::vector<bool> wraparound;              ///< whether each dimension wraps around, as described
  std::vector<std::string> dimension_names;  ///< "x", "y", "z", ...
  int cores_per_chip = 1;                    ///< devices per chip (1 under megacore)
  bool megacore = false;                     ///< a device is a whole chip
  std::string model_kind, model_name;
  std::int64_t params = 0;
  std::int64_t layers = 0;
  std::int64_t batch = 0;  ///< examples per step, every slice's
  /// Identical slices the step spans (data parallelism across them over the data-center
  /// network); the graph and the cores are one slice's.
  int slices = 1;
  std::string schedule;
  Json schedule_details;
  double peak_flops_per_core = 0;
  double model_flops = 0;  ///< per step, all cores of one slice
  /// A mixture of experts: model_flops with each expert's products counted for its routed tokens
  /// rather than its capacity (Model::routed); < 0 otherwise.
  double useful_model_flops = -1;
  double hardware_flops = 0;
  /// The hosts' side of the step (result.json's `input`): their infeed and preparation of the
  /// examples; `input_bound_s`, the shortest step they allow (a longer one than the TPUs' makes
  /// the step wait for its input).
  Json input;
  double input_bound_s = 0;
  /// The host's work between device loops, per step (the TPUs wait for it).
  double loop_overhead_s = 0;
  /// Things the user should know about this run (a what-if that moved a cut, a figure that
  /// cannot affect this schedule), printed by the summary and listed in result.json.
  std::vector<std::string> notes;
};

/// Builds result.json.
Json result_json(const RunInfo& info, const sim::TaskGraph& graph, const sim::SimResult& result);

/// report.md for one run: summary, timeline, step split, pipeline bubble and stages, memory.
std::string report_markdown(const Json& result);

/// The short human summary of a result.json.
std::string summary_text(const Json& result);
/// What the compiler's re-materialization did to a step over HBM (result.json's
/// "compiler_remat"), in one line.
std::string compiler_remat_text(const Json& compiler_remat);
/// A perturbed step (run --json "perturbations"): what is slow, and the slowdown against the uniform pod.
std::string perturbations_text(const Json& perturbations);

/// Chrome trace event format (chrome://tracing, ui.perfetto.dev): a process per chip with a
/// track per core (compute) and per outgoing link (flows, when recorded; two per torus dimension,
/// named from `dimension_names`), and a process for collectives and transfers. A perturbed
/// `network` names its slow chips ("chip 5 (compute x0.5)") and its slow or failed links.
Json chrome_trace(const sim::TaskGraph& graph, const sim::SimResult& result, int cores_per_chip,
                  const std::vector<std::string>& dimension_names, const NetworkState& network = {});

/// "1.50 GiB", "12.3 MiB" ...
std::string human_bytes(double bytes);
/// "weights 1.2 GiB, optimizer 2.4 GiB": the non-zero categories of a memory breakdown.
std::string categories_text(const sim::MemoryBreakdown& bytes);
/// "12.345 ms", "4.560 s" ...; `compact`: three significant digits ("12.3 ms", for axes).
std::string human_seconds(double seconds, bool compact = false);

}  // namespace tpusim::reports
