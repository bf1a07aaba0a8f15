// What the engine reports about one simulated step: when every task ran, per-core busy time
// and HBM occupancy, whether it fits, and the traffic each link carried (for traces).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sim/memory_tracker.hpp"

namespace tpusim::sim {

struct TaskTiming {
  double start_s = -1;
  double end_s = -1;
};

/// A reduction across slices: when its phase over the data-center network ran.
struct DcnPhase {
  int task = -1;
  double start_s = 0, end_s = 0;
};

struct CoreStats {
  double busy_s = 0;  ///< time running compute tasks
  double peak_hbm_bytes = 0;
  MemoryBreakdown hbm_at_peak{};
  double peak_at_s = 0;  ///< when it first reached its peak
  int peak_task = -1;    ///< the task whose allocation took it there (-1: its resident state)
  /// The speeds its compute and HBM ran at against the specification (a perturbed chip's; 1).
  double compute_scale = 1, hbm_scale = 1;
};

/// One flow on the wire (recorded only when asked): for Chrome-trace link tracks.
struct FlowRecord {
  int task = -1;
  int src_core = -1;
  int dst_core = -1;
  double bytes = 0;
  double start_s = 0;
  double end_s = 0;
  std::vector<int> links;  ///< torus link ids crossed (Topology::link_id); empty on-chip
};

struct SimResult {
  double step_time_s = 0;
  std::vector<TaskTiming> tasks;  ///< by task id
  std::vector<CoreStats> cores;
  double hbm_capacity_bytes = 0;
  Overflow overflow;        ///< the first allocation over capacity
  Overflow worst_overflow;  ///< the one furthest over capacity
  bool fits = true;
  bool symmetric_collectives = false;  ///< collectives were simulated on representative rings
  /// ...by EngineOptions::approximate_sharing's approximation, not an exact reduction.
  bool approximate_collectives = false;
  long long routes_detoured = 0;  ///< routes between chips that go round a failed link
  /// How the collectives were simulated: "representative rings", or "none: <why not>".
  std::string symmetry;
  /// How the step was simulated: its representative cluster of cores (and how many congruent
  /// clusters it stands for) or every core (and why), then the collectives.
  std::string simulation;
  /// By collective task id: the collective algorithm(s) its groups ran ("a+b" when they
  /// differ). Sparse: a pod's step has millions of other tasks.
  std::map<int, std::string> collective_algorithms;
  long long flows_simulated = 0;
  long long tasks_simulated = 0;      ///< tasks of the graph the engine played (the reduced one, if reduced)
  std::vector<FlowRecord> flows;      ///< filled when EngineOptions::record_flows
  std::vector<DcnPhase> dcn_phases;   ///< of every reduction across slices, in completion order
  std::vector<int> completion_order;  ///< task ids in the order they completed (functional mode)
};

}  // namespace tpusim::sim
