// The representative-ring proof as a pure function (no SimGrid): when it holds, which groups
// stand for the others, and each reason it answers "none".
#include <catch2/catch.hpp>
#include <map>

#include "sim/symmetry.hpp"
#include "test_support.hpp"

using namespace tpusim;
using namespace tpusim::test;
using sim::CollectiveOp;

namespace {
const std::vector<std::string> kAlgorithms = {"parallel_rings", "hierarchical_rings", "snake_ring"};

std::vector<int> every(int n) {
  std::vector<int> cores;
  for (int i = 0; i < n; ++i) cores.push_back(i);
  return cores;
}

/// A family of groups along dimension `dim` of a 4x4x4 torus, one core per chip.
sim::Task lines_along(const Topology& t, int dim) {
  sim::Task task = collective(CollectiveOp::AllReduce, {}, 1e6);
  std::map<std::vector<int>, std::vector<int>> lines;
  for (int chip = 0; chip < t.chips(); ++chip) {
    auto key = t.coord(chip);
    key[std::size_t(dim)] = -1;
    lines[key].push_back(chip);
  }
  for (auto& [key, chips] : lines) task.groups.push_back(chips);
  return task;
}
}  // namespace

TEST_CASE("a collective over every chip of a 3D torus is simulated on representatives", "[symmetry]") {
  const Topology t({4, 4, 4}, {true, true, true});
  const sim::CollectivePlanner planner(t, 1, kAlgorithms);
  sim::TaskGraph g(64);
  g.add(collective(CollectiveOp::AllReduce, every(64), 1e6));
  const auto proof = sim::prove_symmetry(g, planner, NetworkState{});
  CHECK(proof.exact);
  CHECK(proof.reason.empty());
  REQUIRE(proof.representatives.size() == 1);
  CHECK(proof.representatives.begin()->second == std::vector<std::size_t>{0});
}

TEST_CASE("a family of z pillars: one pillar stands for all sixteen", "[symmetry]") {
  const Topology t({4, 4, 4}, {true, true, true});
  const sim::CollectivePlanner planner(t, 1, kAlgorithms);
  sim::TaskGraph g(64);
  const sim::Task pillars = lines_along(t, 2);
  REQUIRE(pillars.groups.size() == 16);
  g.add(pillars);
  const auto proof = sim::prove_symmetry(g, planner, NetworkState{});
  CHECK(proof.exact);
  CHECK(proof.representatives.at(pillars.groups) == std::vector<std::size_t>{0});
}

TEST_CASE("families sharing links may not overlap in time", "[symmetry]") {
  const Topology t({4, 4, 4}, {true, true, true});
  const sim::CollectivePlanner planner(t, 1, kAlgorithms);
  sim::TaskGraph g(64);
  const int a = g.add(collective(CollectiveOp::AllReduce, every(64), 1e6));
  const int b = g.add(lines_along(t, 0));  // x lines: the all-reduce's links too
  CHECK_THAT(sim::prove_symmetry(g, planner, NetworkState{}).reason,
             Catch::Equals("none: collectives sharing links may run at once"));
  g.depend(a, b);
  CHECK(sim::prove_symmetry(g, planner, NetworkState{}).exact);
}

TEST_CASE("asked to approximate, overlapping families keep their representatives but are not exact",
          "[symmetry]") {
  const Topology t({4, 4, 4}, {true, true, true});
  const sim::CollectivePlanner planner(t, 1, kAlgorithms);
  sim::TaskGraph g(64);
  g.add(collective(CollectiveOp::AllReduce, every(64), 1e6));
  const sim::Task lines = lines_along(t, 0);
  g.add(lines);
  const auto proof = sim::prove_symmetry(g, planner, NetworkState{}, nullptr, /*approximate_sharing=*/true);
  CHECK_FALSE(proof.exact);
  CHECK(proof.approximate);
  CHECK_THAT(proof.reason, Catch::Contains("approximate") && Catch::Contains("contention"));
  CHECK(proof.representatives.at(lines.groups) == std::vector<std::size_t>{0});
  // Any other failure stays a failure: a non-uniform link is not waived.
  NetworkState slow_link;
  slow_link.link_bandwidth_scale.assign(std::size_t(t.link_id_bound()), 1.0);
  slow_link.link_bandwidth_scale[7] = 0.5;
  const auto slow = sim::prove_symmetry(g, planner, slow_link, nullptr, true);
  CHECK_FALSE(slow.exact);
  CHECK_FALSE(slow.approximate);
}

TEST_CASE("the proof answers none when a link is not uniform, and a slow chip leaves the rings alone",
          "[symmetry]") {
  const Topology t({4, 4, 4}, {true, true, true});
  const sim::CollectivePlanner planner(t, 1, kAlgorithms);
  sim::TaskGraph g(64);
  g.add(collective(CollectiveOp::AllReduce, every(64), 1e6));
  NetworkState slow_link;
  slow_link.link_bandwidth_scale.assign(std::size_t(t.link_id_bound()), 1.0);
  CHECK(sim::prove_symmetry(g, planner, slow_link).exact);  // all at 1: still uniform
  slow_link.link_bandwidth_scale[7] = 0.5;
  CHECK_THAT(sim::prove_symmetry(g, planner, slow_link).reason, Catch::Contains("not uniform"));
  NetworkState slow_chip;
  slow_chip.chip_speed_scale.assign(64, 1.0);
  slow_chip.chip_speed_scale[3] = 0.8;
  CHECK(sim::prove_symmetry(g, planner, slow_chip).exact);  // the flows do not compute
}

TEST_CASE("transfers beside a collective on its links make the proof answer none", "[symmetry]") {
  const Topology t({4, 4, 4}, {true, true, true});
  const sim::CollectivePlanner planner(t, 1, kAlgorithms);
  // A transfer from chip 0 to its +x neighbour, on links the all-reduce uses, unordered with it.
  sim::TaskGraph beside(64);
  const int all = beside.add(collective(CollectiveOp::AllReduce, every(64), 1e6));
  const int x = beside.add(transfer(0, 1, 1e6));
  CHECK_THAT(sim::prove_symmetry(beside, planner, NetworkState{}).reason,
             Catch::Contains("point-to-point transfers"));
  // Ordered after the collective, it cannot meet its rings: exact.
  beside.depend(all, x);
  CHECK(sim::prove_symmetry(beside, planner, NetworkState{}).exact);
  // A collective over part of the slice (one z plane) is one task: its rings start together.
  sim::TaskGraph part(64);
  std::vector<int> plane;
  for (int c = 0; c < 16; ++c) plane.push_back(c);
  part.add(collective(CollectiveOp::AllReduce, plane, 1e6));
  CHECK(sim::prove_symmetry(part, planner, NetworkState{}).exact);
  sim::TaskGraph nothing(64);
  nothing.add(compute(0, 1e-3));
  CHECK_THAT(sim::prove_symmetry(nothing, planner, NetworkState{}).reason, Catch::Contains("no collectives"));
}

TEST_CASE("groups that are not congruent are refused", "[symmetry]") {
  // A 4x4x3 torus whose z wraps: one family of two groups, chips with z < 2 and chips with
  // z = 2 (16 chips against 32): different rings, so no representative can stand for both.
  const Topology t({4, 4, 3}, {true, true, true});
  const sim::CollectivePlanner planner(t, 1, kAlgorithms);
  sim::TaskGraph g(48);
  sim::Task uneven = collective(CollectiveOp::AllReduce, {}, 1e6);
  uneven.groups = {{}, {}};
  for (int chip = 0; chip < 48; ++chip) uneven.groups[t.coord(chip, 2) < 2 ? 0 : 1].push_back(chip);
  g.add(uneven);
  CHECK_THAT(sim::prove_symmetry(g, planner, NetworkState{}).reason, Catch::Contains("not congruent"));
}
