// Plays a TaskGraph on a SimGrid model of a TPU slice: one host per device (a TensorCore, or a
// chip under megacore), one link per direction of every ICI link of the N-dimensional torus
// (latency + bandwidth, max-min sharing, scaled by the network state), a link per direction
// between the cores of a chip, and dimension-order routes. Compute tasks run one at a time per
// core in program order; transfers and collectives are flows overlapping with compute.
// This is the only code that includes SimGrid.
#pragma once

#include <functional>

#include "hardware/hardware_spec.hpp"
#include "hardware/network_state.hpp"
#include "sim/result.hpp"
#include "sim/task_graph.hpp"

namespace tpusim::sim {

struct EngineOptions {
  /// Simulate collectives on one representative line (or cluster) of each phase where
  /// prove_symmetry (sim/symmetry.hpp) shows that is exact; tests compare with the full run.
  bool symmetric_collectives = true;
  /// Where collectives sharing links may run at once and no exact reduction holds (a pod-wide
  /// gradient reduction overlapping the backward's batch-norm statistics), simulate each one's
  /// representative rings all the same, leaving out contention with the rings not simulated:
  /// seconds instead of every flow of the pod, and the result says it is approximate
  /// (SimResult::approximate_collectives). Off: such a step is simulated in full.
  bool approximate_sharing = false;
  /// Per-link bandwidth and per-chip speed scales (uniform by default).
  NetworkState network;
  /// Identical slices joined by the data-center network (the study's "slices"): the graph is one
  /// slice's, and its reductions across slices (Task::across_slices) reach the others through
  /// each host's network card (hw.dcn).
  int slices = 1;
  /// Record every flow (for trace link tracks). Costs memory and time on big slices.
  bool record_flows = false;
  /// Run the tasks' host closures (functional mode) as they complete in simulated order.
  bool functional = false;
  /// Most SimGrid actors alive at once (cores, transfers, collectives and their rings); 0: what
  /// this machine's memory mappings (vm.max_map_count) allow. More is a ResourceError, not the
  /// abort SimGrid would make of it.
  long max_simultaneous_actors = 0;
  /// Called now and then (every 256 completed tasks) with the tasks done, the total and the
  /// simulated time: for progress reports. The engine prints nothing itself.
  std::function<void(int done, int total, double simulated_s)> progress;
};

/// Simulates one step. Throws SimulationError on an invalid graph, a deadlock or an error in a
/// task. SimGrid allows one simulation per process: a second call throws SimulationError.
SimResult simulate(const TaskGraph& graph, const HardwareSpec& hw, const SliceSpec& slice,
                   const EngineOptions& options = {});

/// Cores of the slice (chips x cores per chip), numbered chip * cores_per_chip + index.
inline int slice_cores(const HardwareSpec& hw, const SliceSpec& slice) {
  return slice.chips() * hw.chip.cores;
}

/// Torus links crossed between two cores according to the SimGrid platform (for tests):
/// builds a platform for `slice` (counts as this process's one simulation) and returns, for
/// each pair, the number of ICI links in SimGrid's route.
std::vector<int> simgrid_route_hops(const HardwareSpec& hw, const SliceSpec& slice,
                                    const std::vector<std::pair<int, int>>& core_pairs);

}  // namespace tpusim::sim
