// The representative-cluster reduction as a pure function (no SimGrid): which steps it reduces,
// to what, and each reason it refuses. Its exactness against the full simulation is checked end
// to end by tests/cli/symmetry.sh (a run per family kind, in full and reduced).
#include <catch2/catch.hpp>

#include "sim/cluster_reduction.hpp"
#include "test_support.hpp"

using namespace tpusim;
using namespace tpusim::test;
using sim::CollectiveOp;

namespace {
const std::vector<std::string> kAlgorithms = {"hierarchical_rings", "snake_ring"};

/// Replicas of two stages on the two cores of each chip of a 4x4 torus: forward on stage 0, a
/// transfer to stage 1, forward and backward there, a transfer back, backward on stage 0; then
/// each stage's gradients all-reduced over every replica's core of that stage.
sim::TaskGraph pipeline_replicas(int chips, double stage1_seconds = 1e-3) {
  sim::TaskGraph g(2 * chips);
  std::vector<int> last0, last1;
  for (int r = 0; r < chips; ++r) {
    const int a = 2 * r, b = 2 * r + 1;
    const int f0 = g.add(compute(a, 1e-3));
    const int x = g.add(transfer(a, b, 1e6));
    g.depend(f0, x);
    const int f1 = g.add(compute(b, r == chips - 1 ? stage1_seconds : 1e-3));
    g.depend(x, f1);
    const int b1 = g.add(compute(b, 2e-3));
    const int y = g.add(transfer(b, a, 1e6));
    g.depend(b1, y);
    const int b0 = g.add(compute(a, 2e-3));
    g.depend(y, b0);
    last0.push_back(b0);
    last1.push_back(b1);
  }
  for (int stage : {0, 1}) {
    std::vector<int> group;
    for (int r = 0; r < chips; ++r) group.push_back(2 * r + stage);
    const int ar = g.add(collective(CollectiveOp::AllReduce, group, 4e6));
    for (int t : stage == 0 ? last0 : last1) g.depend(t, ar);
  }
  return g;
}
}  // namespace

TEST_CASE("data-parallel replicas reduce to one core and the whole-slice collective", "[reduction]") {
  const Topology t({4, 4}, {true, true});
  const sim::CollectivePlanner planner(t, 2, kAlgorithms);
  sim::TaskGraph g(32);
  std::vector<int> last;
  for (int c = 0; c < 32; ++c) last.push_back(g.add(compute(c, 1e-3)));
  std::vector<int> all;
  for (int c = 0; c < 32; ++c) all.push_back(c);
  const int ar = g.add(collective(CollectiveOp::AllReduce, all, 1e6));
  for (int x : last) g.depend(x, ar);
  const auto r = sim::reduce_to_one_cluster(g, planner, NetworkState{});
  REQUIRE(r.applied);
  CHECK(r.clusters == 32);
  CHECK(r.cores_per_cluster == 1);
  CHECK(r.graph.size() == 2);  // core 0's compute and the all-reduce
  CHECK(r.simulated_core[17] == 0);
  CHECK(r.simulated_task[std::size_t(last[17])] == r.simulated_task[std::size_t(last[0])]);
  CHECK(r.orbit[std::size_t(r.simulated_task[std::size_t(last[0])])] == last);
  CHECK(r.orbit[std::size_t(r.simulated_task[std::size_t(ar)])] == std::vector<int>{ar});
}

TEST_CASE("pipeline replicas reduce to one replica with its stage transfers", "[reduction]") {
  const Topology t({4, 4}, {true, true});
  const sim::CollectivePlanner planner(t, 2, kAlgorithms);
  const auto r = sim::reduce_to_one_cluster(pipeline_replicas(16), planner, NetworkState{});
  REQUIRE(r.applied);
  CHECK(r.clusters == 16);
  CHECK(r.cores_per_cluster == 2);
  CHECK(r.graph.size() == 6 + 2);
  CHECK(r.orbit_links.size() == 2);  // the replica's two transfers, each standing for 16 on-chip hops
  CHECK(r.orbit_links.begin()->second.size() == 16);
}

TEST_CASE("a replica on a slow chip is a kind of its own, simulated beside the first", "[reduction]") {
  const Topology t({4, 4}, {true, true});
  const sim::CollectivePlanner planner(t, 2, kAlgorithms);
  const auto g = pipeline_replicas(16);
  NetworkState slow;
  slow.chip_speed_scale.assign(16, 1.0);
  slow.chip_speed_scale[5] = 0.9;  // chip 5: replica 5's two cores, 10 and 11
  const auto r = sim::reduce_to_one_cluster(g, planner, slow);
  REQUIRE(r.applied);
  CHECK(r.clusters == 16);
  CHECK(r.kinds == 2);
  CHECK(r.graph.size() == 2 * 6 + 2);  // replica 0's and replica 5's tasks, and the two all-reduces
  CHECK(r.simulated_core[10] == 10);
  CHECK(r.simulated_core[11] == 11);
  CHECK(r.simulated_core[14] == 0);
  CHECK(r.simulated_core[15] == 1);
  // Replica 5's tasks run as themselves, replica 7's as replica 0's; each orbit lists its kind's.
  const int first_of_5 = 6 * 5, first_of_7 = 6 * 7;
  CHECK(r.step_task[std::size_t(r.simulated_task[std::size_t(first_of_5)])] == first_of_5);
  CHECK(r.simulated_task[std::size_t(first_of_7)] == r.simulated_task[0]);
  const auto& orbit = r.orbit[std::size_t(r.simulated_task[0])];
  CHECK(orbit[5] == -1);
  CHECK(orbit[7] == first_of_7);
  CHECK(r.orbit[std::size_t(r.simulated_task[std::size_t(first_of_5)])][5] == first_of_5);
  // Every all-reduce waits for both simulated replicas.
  const int ar = r.graph.size() - 2;
  CHECK(r.graph.predecessors(ar).size() == 2);
}

TEST_CASE("a replica that differs, a slow link or functional mode refuses the reduction", "[reduction]") {
  const Topology t({4, 4}, {true, true});
  const sim::CollectivePlanner planner(t, 2, kAlgorithms);
  CHECK_THAT(sim::reduce_to_one_cluster(pipeline_replicas(16, 5e-3), planner, NetworkState{}).reason,
             Catch::Contains("differs from its counterpart"));
  NetworkState slow;
  slow.link_bandwidth_scale.assign(std::size_t(t.link_id_bound()), 1.0);
  slow.link_bandwidth_scale[3] = 0.5;
  CHECK_THAT(sim::reduce_to_one_cluster(pipeline_replicas(16), planner, slow).reason,
             Catch::Contains("not uniform"));
  auto g = pipeline_replicas(16);
  g.task(0).host = [] {};
  CHECK_THAT(sim::reduce_to_one_cluster(g, planner, NetworkState{}).reason, Catch::Contains("functional"));
}

TEST_CASE("a transfer beside a collective over its links refuses the reduction", "[reduction]") {
  // Chip-to-chip transfers (core 0 of chip r to core 0 of chip r + 1 along x) while an all-reduce
  // over every chip's core 0 runs on the same x links, unordered: not reducible.
  const Topology t({4, 4}, {true, true});
  const sim::CollectivePlanner planner(t, 2, kAlgorithms);
  sim::TaskGraph g(32);
  std::vector<int> all;
  for (int chip = 0; chip < 16; ++chip) all.push_back(2 * chip);
  g.add(collective(CollectiveOp::AllReduce, all, 1e6));
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; x += 2) {
      const int a = 2 * (x + 4 * y), b = 2 * (x + 1 + 4 * y);
      const int f = g.add(compute(a, 1e-3));
      const int tr = g.add(transfer(a, b, 1e6));
      g.depend(f, tr);
      g.depend(tr, g.add(compute(b, 1e-3)));
    }
  const auto r = sim::reduce_to_one_cluster(g, planner, NetworkState{});
  CHECK_FALSE(r.applied);
  CHECK_THAT(r.reason, Catch::Contains("shares links with transfers it may run beside"));
}

TEST_CASE("one cluster is not reduced", "[reduction]") {
  const Topology t({2, 2}, {false, false});
  const sim::CollectivePlanner planner(t, 2, kAlgorithms);
  sim::TaskGraph g(8);
  int prev = g.add(compute(0, 1e-3));
  for (int c = 1; c < 8; ++c) {
    const int x = g.add(transfer(c - 1, c, 1e6));
    g.depend(prev, x);
    prev = g.add(compute(c, 1e-3));
    g.depend(x, prev);
  }
  CHECK_THAT(sim::reduce_to_one_cluster(g, planner, NetworkState{}).reason, Catch::Contains("one cluster"));
}
