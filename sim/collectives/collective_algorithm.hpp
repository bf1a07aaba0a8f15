// Collective algorithms: how a collective over a group of cores becomes flows on the torus, as
// phases of rings, each ring a sequence of steps in which every member sends one chunk to the
// next member. One interface, one file per algorithm, a registry by name (registry.cpp); the
// hardware file lists the names to use in order of preference (chip.collective_algorithms), and
// each collective runs the first one that supports its group. Pure arithmetic (no SimGrid): the
// algorithms are tested on their own and the engine only plays their phases.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hardware/topology.hpp"
#include "sim/task_graph.hpp"

namespace tpusim::sim {

/// A ring member standing for the data-center network at host `host` (a negative id): a flow to
/// it leaves this slice through the host's network card (for the same core of the next slice),
/// a flow from it arrives through the card (from the same core of the previous slice). Every
/// slice runs the same program, so these two flows are each core's whole DCN traffic.
constexpr int dcn_endpoint(int host) { return -1 - host; }
constexpr bool is_dcn_endpoint(int member) { return member < 0; }
constexpr int dcn_endpoint_host(int member) { return -1 - member; }

/// One ring of a phase: for `steps` steps, every member cores[i] sends `chunk_bytes` to
/// cores[i+1] (the last to the first), and a step ends when all of them have arrived.
struct PlannedRing {
  std::vector<int> cores;
  double chunk_bytes = 0;
  int steps = 0;
  /// True for the rings of one representative line (or chip) of the phase: every other ring of
  /// the phase is a translation of one of these over the torus.
  bool representative = true;
  /// The engine's: the flows (by index in `cores`) it simulates each step, each standing for the
  /// ring's flows of its route's shape when no flow running at once shares a link with them
  /// (empty: every flow).
  std::vector<int> played;
  /// The engine's: every step takes as long as the first (nothing else shares the ring's links
  /// while it runs, or its phase's flows are a translation-invariant family in lockstep), so it
  /// plays one step and waits out the others.
  bool repeats = false;
};

/// Whether a ring runs over the data-center network (a member and its host's DCN endpoint).
inline bool crosses_slices(const PlannedRing& ring) {
  return !ring.cores.empty() && is_dcn_endpoint(ring.cores.back());
}

/// Rings that run at the same time; the next phase starts when all of them are done.
struct Phase {
  std::string name;  ///< e.g. "reduce_scatter x", "all_gather on-chip"
  std::vector<PlannedRing> rings;
};

/// A group's cores by chip, and where its chips are.
struct GroupShape {
  std::map<int, std::vector<int>> cores_of_chip;  ///< chip -> its group cores, ascending
  bool uniform = true;                            ///< every chip holds as many of the group's cores
  /// Per torus dimension, the distinct coordinates of the group's chips, ascending.
  std::vector<std::vector<int>> coordinates;
  /// Uniform, and the chips are every combination of those coordinates (a sub-grid).
  bool grid = false;
  /// Dimensions along which the sub-grid has more than one chip, in dimension order.
  std::vector<int> spanned;
};
GroupShape group_shape(const Topology& topology, int cores_per_chip, const std::vector<int>& group);

class CollectiveAlgorithm {
 public:
  virtual ~CollectiveAlgorithm() = default;
  /// The name it is registered under and that hardware files list.
  virtual std::string name() const = 0;
  /// What it does, and its cost without other traffic (the formula its engine test checks).
  virtual std::string description() const = 0;
  /// Whether it can run `op` over `group` (core ids; chip = core / cores_per_chip).
  virtual bool supports(const Topology& topology, int cores_per_chip, CollectiveOp op,
                        const std::vector<int>& group) const = 0;
  /// True when it supports every group of every topology (a list of algorithms must hold one).
  virtual bool supports_any_group() const { return false; }
  /// True for a latency-optimal algorithm: chosen only for buffers up to the hardware's
  /// chip.latency_collective_max_bytes (few steps over long routes: bandwidth it spends freely).
  virtual bool latency_optimal() const { return false; }
  /// True for an algorithm of an op the hardware's lists do not choose among (an all-to-all):
  /// run whenever no listed algorithm supports the op.
  virtual bool outside_lists() const { return false; }
  /// The phases of `op` over `group` for a buffer of `bytes` (see Task::bytes); none for a group
  /// of one core or an empty buffer. Only called where supports() holds.
  virtual std::vector<Phase> plan(const Topology& topology, int cores_per_chip, CollectiveOp op,
                                  const std::vector<int>& group, double bytes) const = 0;
};

/// Every registered algorithm, by name.
const std::map<std::string, std::unique_ptr<CollectiveAlgorithm>>& collective_algorithms();

/// The registered algorithm `name`, or nullptr.
const CollectiveAlgorithm* find_collective_algorithm(const std::string& name);

/// A problem with a hardware file's list of algorithm names (an unknown name, or none that
/// supports every group), as "what was expected"; empty when the list is sound.
std::string collective_algorithms_problem(const std::vector<std::string>& names);

/// The first algorithm of `preference` that supports `op` over `group` (a latency-optimal one
/// only when `bytes` <= `latency_max_bytes`); when none does, a registered one made for ops
/// outside the lists (an all-to-all) that does. Throws SimulationError when none
/// (collective_algorithms_problem rules that out for a checked list).
const CollectiveAlgorithm& collective_algorithm_for(const std::vector<std::string>& preference,
                                                    const Topology& topology, int cores_per_chip,
                                                    CollectiveOp op, const std::vector<int>& group,
                                                    double bytes = 0, double latency_max_bytes = -1);

/// Plans a step's collectives with a hardware file's list of algorithms, in order of preference.
class CollectivePlanner {
 public:
  /// `latency_max_bytes`: the buffers the latency-optimal algorithms of the list take (the
  /// hardware's chip.latency_collective_max_bytes; -1: none).
  CollectivePlanner(const Topology& topology, int cores_per_chip, std::vector<std::string> preference,
                    double latency_max_bytes = -1)
      : topology_(topology),
        cores_per_chip_(cores_per_chip),
        preference_(std::move(preference)),
        latency_max_bytes_(latency_max_bytes) {}
  /// The algorithm that runs `op` over `group` for a buffer of `bytes` (collective_algorithm_for).
  const CollectiveAlgorithm& algorithm(CollectiveOp op, const std::vector<int>& group, double bytes) const {
    return collective_algorithm_for(preference_, topology_, cores_per_chip_, op, group, bytes,
                                    latency_max_bytes_);
  }
  /// The phases of `op` over `group` for a buffer of `bytes`.
  std::vector<Phase> plan(CollectiveOp op, const std::vector<int>& group, double bytes) const {
    return algorithm(op, group, bytes).plan(topology_, cores_per_chip_, op, group, bytes);
  }
  /// Whether collective task `t` continues across the slices (Task::across_slices, several slices).
  bool across_slices(const Task& t) const {
    return t.across_slices && topology_.slices() > 1 &&
           (t.op == CollectiveOp::AllReduce || t.op == CollectiveOp::ReduceScatter);
  }
  /// The phases of collective task `t` over `group`: plan(t.op, ...), or across slices the
  /// hierarchical reduction: the reduce-scatter inside the slice, each piece all-reduced across
  /// the slices ("dcn_rings"), then for an all-reduce the all-gather inside the slice.
  std::vector<Phase> plan(const Task& t, const std::vector<int>& group) const;
  /// The names of the algorithms collective task `t` runs over `group` ("a+b").
  std::string algorithm_names(const Task& t, const std::vector<int>& group) const;
  const Topology& topology() const { return topology_; }
  int cores_per_chip() const { return cores_per_chip_; }

 private:
  Topology topology_;
  int cores_per_chip_;
  std::vector<std::string> preference_;
  double latency_max_bytes_;
};

/// Total bytes a plan puts on the wire (sum over flows of their size), all rings counted.
double plan_wire_bytes(const std::vector<Phase>& plan);

}  // namespace tpusim::sim
