// The representative-cluster reduction: when a step is made of congruent copies of one cluster
// of cores (data-parallel replicas, pipeline replicas, the spatial groups of a mesh), simulating
// one copy with every collective gives every copy's times exactly. Pure (no SimGrid): tested on
// its own, and against the full simulation in the engine tests.
//
// Clusters are the cores joined by point-to-point transfers, by dependencies between their
// tasks, or by transfers whose routes share a link; idle cores (no task) are left out. The
// reduction applies when the links are uniform, every cluster is congruent with the first one
// (the k-th core of each, by core id, runs the same program: the same durations, memory effects
// and resident state, the same transfers with the same bytes, route lengths and link sharing, and
// every dependency maps onto one of the first cluster's or of a collective), and every transfer
// that shares a link with a collective (anywhere: the collective's every group, every cluster's
// transfers) is ordered with it. The collectives themselves stay whole tasks; the rings proof
// (sim/symmetry.hpp) then decides how their rings are simulated. Chips of other speeds (a slow
// chip) sort the clusters into kinds by their cores' speeds: the first cluster of each kind is
// simulated, for every cluster of its kind, and a shared collective waits for them all.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "hardware/network_state.hpp"
#include "sim/collectives/collective_algorithm.hpp"
#include "sim/task_graph.hpp"

namespace tpusim::sim {

/// The links a flow from core `a` to core `b` crosses: torus link ids (Topology::link_id), and
/// an on-chip hop as a negative id of its own.
/// A flow to or from a DCN endpoint (dcn_endpoint) crosses its host's network card, out or in.
std::vector<long long> flow_links(const Topology& topology, int cores_per_chip, int a, int b);
/// The id of host `host`'s network card, out to the data-center network or in from it (above
/// every torus link id).
constexpr long long dcn_link(int host, bool out) { return (1LL << 40) + 2LL * host + (out ? 0 : 1); }
/// ICI hops of a flow (0 on-chip or to the data-center network).
int flow_hops(const Topology& topology, int cores_per_chip, int a, int b);

struct ClusterReduction {
  bool applied = false;
  /// Why not, when not: "none: ...".
  std::string reason;
  int clusters = 1;           ///< congruent clusters of the step
  int kinds = 1;              ///< kinds of clusters by their chips' speeds: one of each is simulated
  int cores_per_cluster = 0;  ///< cores in each
  /// The graph to simulate: the simulated clusters' tasks (the first cluster of each kind) and
  /// every shared collective (same core numbering).
  TaskGraph graph{0};
  std::vector<int> simulated_task;  ///< by task of the step: the simulated task it runs as
  std::vector<int> step_task;       ///< by simulated task: its task in the step
  /// By simulated task: the step's tasks it stands for, by cluster (-1 for a cluster of another
  /// kind; a shared collective stands for itself).
  std::vector<std::vector<int>> orbit;
  std::vector<int> simulated_core;   ///< by core: the simulated cluster's core it runs as (itself if idle)
  std::vector<int> cluster_of_core;  ///< by core: its cluster (-1: idle)
  /// By simulated transfer: the links every transfer of its orbit crosses (the rings proof checks
  /// them against the collectives).
  std::map<int, std::set<long long>> orbit_links;
};

/// Reduces `graph` to one cluster where that is exact (see above); otherwise `applied` is false
/// and `reason` says which condition failed. A step of a single cluster is not reduced.
ClusterReduction reduce_to_one_cluster(const TaskGraph& graph, const CollectivePlanner& planner,
                                       const NetworkState& network);

}  // namespace tpusim::sim
