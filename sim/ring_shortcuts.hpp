// The engine's two shortcuts for collectives on uniform links, as functions of the step's
// collective plans (pure arithmetic on the torus, no SimGrid), beside prove_symmetry
// (sim/symmetry.hpp), which decides whether a step may take them at all. A lone collective plays
// one flow per route shape; a ring whose steps repeat its first plays one step and waits out the
// rest. tests/cli/symmetry.sh and tpu_v4.sh compare both with the full simulation.
#pragma once

#include <set>
#include <vector>

#include "hardware/topology.hpp"
#include "sim/collectives/collective_algorithm.hpp"
#include "sim/task_graph.hpp"

namespace tpusim::sim {

/// Where rings run: the torus and the cores of each chip.
struct RingGeometry {
  const Topology& topology;
  int cores_per_chip = 1;
  /// The links ring flow `i` (cores[i] -> cores[i + 1]) crosses.
  std::vector<long long> flow_links_of(const PlannedRing& ring, std::size_t i) const;
};

/// The collectives of `g` whose rings' flows each have their links to themselves while they run
/// (within each phase, no two of their simulated flows share a link, and every other collective
/// or transfer that would is ordered with them). Each ring of theirs is set to play one flow per
/// route shape (PlannedRing::played): on uniform links a lone flow's time depends only on how
/// many links of each kind it crosses, so the others of its shape arrive at the same time.
/// `plans`: each task's phases (empty for tasks that are not collectives).
std::set<int> play_lone_flows_once(const TaskGraph& g, std::vector<std::vector<Phase>>& plans,
                                   const RingGeometry& geometry);

/// Marks the rings of the collectives `alone` (play_lone_flows_once's) whose steps repeat their
/// first (PlannedRing::repeats): a collective alone has its links to itself while it runs, so a
/// ring's steps repeat exactly when no other ring of its phase shares a link with it, or when the
/// phase's flows are carried onto themselves by the torus translations that take its first ring
/// to each other one (every ring then moves in lockstep: max-min sharing is unique, so translated
/// flows get the same rates). The same times to SimGrid's own timing precision (1e-9 s per event).
void mark_repeating_rings(const std::set<int>& alone, std::vector<std::vector<Phase>>& plans,
                          const RingGeometry& geometry);

}  // namespace tpusim::sim
