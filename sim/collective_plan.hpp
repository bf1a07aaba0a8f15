// How a collective over a group of cores becomes flows on the torus: phases of rings, each
// ring a sequence of steps in which every member sends one chunk to the next member. Pure
// arithmetic (no SimGrid), so the algorithm is tested on its own and the engine only plays it.
//
// Algorithm (hierarchical, as on TPU pods): when a group holds every core of its chips, the
// cores of a chip first reduce-scatter over the on-chip link; chip-level phases then move the
// chip's whole buffer between chips (carried by the chip's first group core); finally the
// cores of a chip all-gather. Chip level: when the group's chips form a grid X x Y, a 2D
// all-reduce = reduce-scatter along x (one ring per row), all-reduce along y on the 1/|X| shard
// (one ring per column), all-gather along x; rings come from Torus::rings_along (bidirectional
// on a whole wrapping dimension, folded on a line). Any other chip set: one unidirectional ring
// through the chips in snake order, its flows routed over several hops.
#pragma once

#include <string>
#include <vector>

#include "hardware/torus.hpp"
#include "sim/task_graph.hpp"

namespace tpusim::sim {

/// One ring of a phase: for `steps` steps, every member order[i] sends `chunk_bytes` to
/// order[i+1] (the last to the first), and a step ends when all of them have arrived.
struct PlannedRing {
  std::vector<int> cores;
  double chunk_bytes = 0;
  int steps = 0;
  /// True for the rings of one representative row/column/chip of the phase: every other ring
  /// of the phase is a translation of one of these over the torus.
  bool representative = true;
};

/// Rings that run at the same time; the next phase starts when all of them are done.
struct Phase {
  std::string name;  ///< e.g. "reduce_scatter x", "all_gather on-chip"
  std::vector<PlannedRing> rings;
};

/// Plans `op` over `group` (core ids, chip = core / cores_per_chip) for a buffer of `bytes`
/// (see Task::bytes). Returns no phases for a group of one core or an empty buffer.
std::vector<Phase> plan_collective(const Torus& torus, int cores_per_chip, CollectiveOp op,
                                   const std::vector<int>& group, double bytes);

/// Total bytes the plan puts on the wire (sum over flows of their size), all rings counted.
double plan_wire_bytes(const std::vector<Phase>& plan);

}  // namespace tpusim::sim
