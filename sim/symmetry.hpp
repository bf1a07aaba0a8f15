// The representative-ring proof: when simulating the rings of one line (or cluster) of every
// collective phase gives exactly the step the full simulation would, and which groups stand for
// the others. A pure function of the task graph, the collective plans, the topology and the
// network state (no SimGrid), so it is tested on its own and the engine only follows its answer.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "hardware/network_state.hpp"
#include "sim/collectives/collective_algorithm.hpp"
#include "sim/task_graph.hpp"

namespace tpusim::sim {

/// The groups of one collective task: a family (one group, or the disjoint groups of an SPMD
/// collective).
using Family = std::vector<std::vector<int>>;

struct SymmetryProof {
  /// Simulating each phase's representative rings, on each family's first cluster of groups,
  /// gives the full simulation's times exactly.
  bool exact = false;
  /// Asked for (`approximate_sharing`) and taken: collectives sharing links may run at once and
  /// no exact reduction holds, so each family's representative rings are simulated all the same;
  /// contention with the rings left out is not counted (`exact` is then false).
  bool approximate = false;
  /// Why not, when not: "none: ..." naming the first condition that fails.
  std::string reason;
  /// Per family, the indices of the groups of its first cluster: those simulated.
  std::map<Family, std::vector<std::size_t>> representatives;
};

/// Whether representative simulation of `graph`'s collectives is exact, and which groups are
/// simulated. It is when the network is uniform (every link and chip as specified), each
/// family's groups fall into clusters (groups joined by a shared link) that are congruent (the
/// same rings, chunks, steps and hop counts) and use disjoint links, families whose links meet
/// never run at once, and every point-to-point transfer whose links meet a family's is ordered
/// with its collectives (so no ring other than a representative one shares a link with anything
/// running). A collective is one task: all its rings start together. `transfer_links`, when
/// given, are the links each transfer stands for (the representative-cluster reduction's
/// transfers stand for every cluster's); otherwise a transfer's own route.
/// With `approximate_sharing`, the one condition that fails on a step overlapping collectives
/// that share links (a pod-wide gradient reduction beside batch-norm statistics) is waived:
/// every other condition still holds, and the answer is `approximate` instead of `exact`.
SymmetryProof prove_symmetry(const TaskGraph& graph, const CollectivePlanner& planner,
                             const NetworkState& network,
                             const std::map<int, std::set<long long>>* transfer_links = nullptr,
                             bool approximate_sharing = false);

}  // namespace tpusim::sim
