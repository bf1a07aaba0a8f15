// Collective algorithms without the engine: the registry, each algorithm's phases, ring sizes
// and bytes on the wire, in 2 and 3 dimensions.
#include <catch2/catch.hpp>

#include "sim/collectives/collective_algorithm.hpp"

using namespace tpusim;
using namespace tpusim::sim;

namespace {
std::vector<int> all_cores(int n) {
  std::vector<int> g(n);
  for (int i = 0; i < n; ++i) g[i] = i;
  return g;
}
std::vector<Phase> plan(const std::string& algorithm, const Topology& t, int cpc, CollectiveOp op,
                        const std::vector<int>& group, double bytes) {
  const CollectiveAlgorithm* a = find_collective_algorithm(algorithm);
  REQUIRE(a != nullptr);
  REQUIRE(a->supports(t, cpc, op, group));
  return a->plan(t, cpc, op, group, bytes);
}
const std::vector<std::string> kV3 = {"hierarchical_rings", "snake_ring"};
}  // namespace

TEST_CASE("every collective algorithm is registered under its name", "[collectives]") {
  std::vector<std::string> names;
  for (const auto& [name, a] : collective_algorithms()) {
    CHECK(a->name() == name);
    CHECK_FALSE(a->description().empty());
    names.push_back(name);
  }
  CHECK(names == std::vector<std::string>{"all_to_all_by_dimension", "dcn_rings", "hierarchical_rings",
                                          "parallel_rings", "recursive_doubling", "snake_ring"});
  CHECK(find_collective_algorithm("ring_of_rings") == nullptr);
}

TEST_CASE("a hardware's list of algorithms must name registered ones and cover every group",
          "[collectives]") {
  CHECK(collective_algorithms_problem(kV3).empty());
  CHECK(collective_algorithms_problem({"parallel_rings", "hierarchical_rings", "snake_ring"}).empty());
  CHECK_THAT(collective_algorithms_problem({"hierarchical_rings", "tree"}), Catch::Contains("\"tree\""));
  CHECK_THAT(collective_algorithms_problem({"hierarchical_rings"}), Catch::Contains("snake_ring"));
}

TEST_CASE("all-to-all: only the exchange runs it, on-chip then a dimension at a time", "[collectives]") {
  const Topology t({4, 4}, {true, true});
  // The hardware's lists hold reductions and gathers; an all-to-all runs the registered exchange.
  for (const char* name : {"hierarchical_rings", "parallel_rings", "recursive_doubling", "snake_ring"})
    CHECK_FALSE(find_collective_algorithm(name)->supports(t, 2, CollectiveOp::AllToAll, all_cores(32)));
  CHECK(collective_algorithm_for(kV3, t, 2, CollectiveOp::AllToAll, all_cores(32)).name() ==
        "all_to_all_by_dimension");
  const double S = 32e6;
  const auto phases = plan("all_to_all_by_dimension", t, 2, CollectiveOp::AllToAll, all_cores(32), S);
  REQUIRE(phases.size() == 3);
  CHECK(phases[0].name == "all_to_all on-chip");
  CHECK(phases[1].name == "all_to_all x");
  CHECK(phases[2].name == "all_to_all y");
  // On-chip: 16 chips, one shift each; along x: 4 lines x 2 cores, shifts 1 and 3 one ring of 4
  // each, shift 2 two rings of 2; one step each, S/p per destination.
  CHECK(phases[0].rings.size() == 16);
  CHECK(phases[1].rings.size() == 8 * 4);
  for (const auto& ring : phases[1].rings) {
    CHECK(ring.steps == 1);
    CHECK(ring.chunk_bytes == Approx(S / 4));
  }
  // Each member sends (p - 1)/p of its buffer per phase: every byte leaves once per dimension.
  double x_bytes = 0;
  for (const auto& ring : phases[1].rings) x_bytes += ring.chunk_bytes * double(ring.cores.size());
  CHECK(x_bytes == Approx(32 * S * 3 / 4));
  int representative = 0;
  for (const auto& ring : phases[1].rings) representative += ring.representative;
  CHECK(representative == 8);  // the first line's, of both core indices (they share its links)
  // A group that is not a sub-grid exchanges in one phase among all its members.
  const auto odd = plan("all_to_all_by_dimension", t, 2, CollectiveOp::AllToAll, {0, 2, 10}, S);
  REQUIRE(odd.size() == 1);
  CHECK(odd[0].rings.size() == 2);  // shifts 1 and 2 of 3 members: one cycle each
}

TEST_CASE("2D all-reduce over every core: on-chip, x, y, y, x, on-chip", "[collectives]") {
  const Topology t({4, 8}, {true, true});
  const auto p = plan("hierarchical_rings", t, 2, CollectiveOp::AllReduce, all_cores(64), 1024);
  REQUIRE(p.size() == 6);
  CHECK(p[0].name == "reduce_scatter on-chip");
  CHECK(p[1].name == "reduce_scatter x");
  CHECK(p[2].name == "reduce_scatter y");
  CHECK(p[3].name == "all_gather y");
  CHECK(p[4].name == "all_gather x");
  CHECK(p[5].name == "all_gather on-chip");
  CHECK(p[1].rings.size() == 16);  // 8 rows x 2 directions (x wraps: bidirectional rings)
  CHECK(p[1].rings[0].chunk_bytes == Approx(1024 * 0.5 / 4));
  CHECK(p[2].rings[0].chunk_bytes == Approx(256 * 0.5 / 8));
  int representative = 0;
  for (const auto& r : p[1].rings) representative += r.representative;
  CHECK(representative == 2);
}

TEST_CASE("3D hierarchical all-reduce: a dimension at a time on the shrinking shard", "[collectives]") {
  const Topology t({4, 4, 4}, {true, true, true});
  const auto p = plan("hierarchical_rings", t, 1, CollectiveOp::AllReduce, all_cores(64), 6400);
  REQUIRE(p.size() == 6);
  const char* names[] = {"reduce_scatter x", "reduce_scatter y", "reduce_scatter z",
                         "all_gather z",     "all_gather y",     "all_gather x"};
  for (int i = 0; i < 6; ++i) CHECK(p[std::size_t(i)].name == names[i]);
  CHECK(p[0].rings.size() == 32);  // 16 lines x 2 directions
  CHECK(p[0].rings[0].chunk_bytes == Approx(6400 * 0.5 / 4));
  CHECK(p[1].rings[0].chunk_bytes == Approx(1600 * 0.5 / 4));
  CHECK(p[2].rings[0].chunk_bytes == Approx(400 * 0.5 / 4));
  // Each chip sends 2 (N - 1) / N of the buffer, whatever the algorithm.
  CHECK(plan_wire_bytes(p) == Approx(64 * 2.0 * 63 / 64 * 6400));
}

TEST_CASE("parallel rings: every dimension's rings in every phase, a part each", "[collectives]") {
  const Topology t({4, 4, 4}, {true, true, true});
  const auto p = plan("parallel_rings", t, 1, CollectiveOp::AllReduce, all_cores(64), 6000);
  REQUIRE(p.size() == 6);
  CHECK(p[0].name == "reduce_scatter every dimension 1/3");
  CHECK(p[5].name == "all_gather every dimension 1/3");
  // Phase 1: a third of the buffer along each dimension at once (16 lines x 2 directions each).
  REQUIRE(p[0].rings.size() == 96);
  for (const auto& r : p[0].rings) CHECK(r.chunk_bytes == Approx(2000 * 0.5 / 4));
  for (const auto& r : p[1].rings) CHECK(r.chunk_bytes == Approx(500 * 0.5 / 4));
  // The links of one phase: each directed link carries one ring.
  std::set<std::pair<int, int>> hops;
  for (const auto& r : p[0].rings)
    for (std::size_t i = 0; i < r.cores.size(); ++i)
      CHECK(hops.insert({r.cores[i], r.cores[(i + 1) % r.cores.size()]}).second);
  CHECK(hops.size() == 384);
  CHECK(plan_wire_bytes(p) == Approx(64 * 2.0 * 63 / 64 * 6000));
}

TEST_CASE("ring all-reduce puts 2(p-1)/p of the buffer on the wire per member", "[collectives]") {
  const Topology t({8, 1}, {true, false});
  std::vector<int> leaders;
  for (int c = 0; c < 8; ++c) leaders.push_back(2 * c);
  const double S = 8000;
  for (const char* name : {"hierarchical_rings", "parallel_rings", "snake_ring"}) {
    const auto ar = plan(name, t, 2, CollectiveOp::AllReduce, leaders, S);
    CHECK(plan_wire_bytes(ar) == Approx(8 * 2.0 * 7 / 8 * S));
    const auto rs = plan(name, t, 2, CollectiveOp::ReduceScatter, leaders, S);
    const auto ag = plan(name, t, 2, CollectiveOp::AllGather, leaders, S);
    CHECK(plan_wire_bytes(rs) + plan_wire_bytes(ag) == Approx(plan_wire_bytes(ar)));
  }
}

TEST_CASE("a group that is not a grid gets one snake ring", "[collectives]") {
  const Topology t({4, 4}, {false, false});
  const std::vector<int> group = {0, 2, 10};  // chips 0, 1, 5: an L shape
  CHECK_FALSE(
      find_collective_algorithm("hierarchical_rings")->supports(t, 2, CollectiveOp::AllReduce, group));
  CHECK_FALSE(find_collective_algorithm("parallel_rings")->supports(t, 2, CollectiveOp::AllReduce, group));
  const auto& chosen = collective_algorithm_for(kV3, t, 2, CollectiveOp::AllReduce, group);
  CHECK(chosen.name() == "snake_ring");
  const auto p = chosen.plan(t, 2, CollectiveOp::AllReduce, group, 300);
  REQUIRE(p.size() == 2);
  CHECK(p[0].rings.size() == 1);
  CHECK(p[0].rings[0].cores == std::vector<int>{0, 2, 10});
  CHECK(p[0].rings[0].steps == 2);
  // The first listed algorithm that supports a group runs it.
  CHECK(collective_algorithm_for(kV3, t, 2, CollectiveOp::AllReduce, all_cores(32)).name() ==
        "hierarchical_rings");
  CHECK_THROWS_AS(collective_algorithm_for({"hierarchical_rings"}, t, 2, CollectiveOp::AllReduce, group),
                  SimulationError);
}

TEST_CASE("trivial collectives have no phases", "[collectives]") {
  const Topology t({2, 2}, {false, false});
  for (const auto& [name, a] : collective_algorithms()) {
    CHECK(a->plan(t, 2, CollectiveOp::AllReduce, {3}, 100).empty());
    CHECK(a->plan(t, 2, CollectiveOp::AllReduce, {0, 1}, 0).empty());
  }
}

TEST_CASE("recursive doubling: log2 N steps of pairs - on-chip first then 1 2 4 chips apart",
          "[collectives]") {
  const Topology t({8, 4}, {true, true});  // 32 chips, 2 cores each: 64 members
  const auto group = all_cores(64);
  const double S = 4096;
  const auto ar = plan("recursive_doubling", t, 2, CollectiveOp::AllReduce, group, S);
  REQUIRE(ar.size() == 6);  // 1 on-chip + 3 along x + 2 along y
  const std::vector<int> hops = {0, 1, 2, 4, 1, 2};
  for (std::size_t s = 0; s < ar.size(); ++s) {
    CHECK(ar[s].rings.size() == 32);  // every member in one pair
    int representative = 0;
    for (const auto& r : ar[s].rings) {
      REQUIRE(r.cores.size() == 2);
      CHECK(r.steps == 1);
      CHECK(r.chunk_bytes == S);
      CHECK(t.hops(r.cores[0] / 2, r.cores[1] / 2) == hops[s]);
      representative += r.representative ? 1 : 0;
    }
    // The first chip's pair on-chip; the first line's pairs (both cores of each chip) along a dimension.
    CHECK(representative == (s == 0 ? 1 : s <= 3 ? 8 : 4));
  }
  // Recursive halving and doubling: a reduce-scatter halves what it moves each step, an
  // all-gather doubles it from one member's share; together they move what rings move.
  const auto rs = plan("recursive_doubling", t, 2, CollectiveOp::ReduceScatter, group, S);
  const auto ag = plan("recursive_doubling", t, 2, CollectiveOp::AllGather, group, S);
  REQUIRE(rs.size() == 6);
  REQUIRE(ag.size() == 6);
  CHECK(rs[0].rings[0].chunk_bytes == S / 2);
  CHECK(rs[5].rings[0].chunk_bytes == S / 64);
  CHECK(ag[0].rings[0].chunk_bytes == S / 64);
  CHECK(ag[5].rings[0].chunk_bytes == S / 2);
  CHECK(plan_wire_bytes(rs) == Approx(64 * S * 63 / 64));
  CHECK(plan_wire_bytes(rs) + plan_wire_bytes(ag) ==
        Approx(plan_wire_bytes(plan("hierarchical_rings", t, 2, CollectiveOp::AllReduce, group, S))));
}

TEST_CASE("recursive doubling takes power-of-two grids and only buffers up to the hardware size",
          "[collectives]") {
  const Topology t({6, 4}, {true, true});
  const auto* rd = find_collective_algorithm("recursive_doubling");
  CHECK(rd->latency_optimal());
  CHECK_FALSE(rd->supports(t, 2, CollectiveOp::AllReduce, all_cores(48)));  // 6 chips along x
  CHECK(rd->supports(t, 2, CollectiveOp::AllReduce, {0, 1, 2, 3}));         // chips 0 and 1
  const std::vector<std::string> list = {"recursive_doubling", "hierarchical_rings", "snake_ring"};
  const std::vector<int> group = {0, 1, 2, 3, 12, 13, 14, 15};  // 2 x 2 chips
  CHECK(collective_algorithm_for(list, t, 2, CollectiveOp::AllReduce, group, 1000, 4096).name() ==
        "recursive_doubling");
  CHECK(collective_algorithm_for(list, t, 2, CollectiveOp::AllReduce, group, 4096, 4096).name() ==
        "recursive_doubling");
  CHECK(collective_algorithm_for(list, t, 2, CollectiveOp::AllReduce, group, 4097, 4096).name() ==
        "hierarchical_rings");
  CHECK(collective_algorithm_for(list, t, 2, CollectiveOp::AllReduce, all_cores(48), 1000, 4096).name() ==
        "hierarchical_rings");  // not a power of two: the rings
  CHECK(CollectivePlanner(t, 2, list).algorithm(CollectiveOp::AllReduce, group, 1).name() ==
        "hierarchical_rings");  // a planner without a size takes no latency-optimal algorithm
  // A latency-optimal algorithm does not stand in for the list's general one.
  CHECK_THAT(collective_algorithms_problem({"recursive_doubling", "hierarchical_rings"}),
             Catch::Contains("snake_ring"));
}

TEST_CASE("across slices a reduction continues over the data-center network, and only then",
          "[collectives]") {
  // 4x4 chips of 2 cores, hosts of 2x2 chips: 4 hosts of 8 cores.
  const SliceSpec s{"4x4", {4, 4}, {true, true}};
  ChipSpec chip;
  chip.host_board_chips = {2, 2};
  Topology t = slices_topology(s, chip, 3);
  REQUIRE(t.slices() == 3);
  CHECK(t.host(0) == 0);
  CHECK(t.host(5) == 0);   // (1, 1)
  CHECK(t.host(2) == 1);   // (2, 0)
  CHECK(t.host(15) == 3);  // (3, 3)
  const CollectivePlanner planner(t, 2, kV3);
  sim::Task task;
  task.kind = sim::TaskKind::Collective;
  task.op = CollectiveOp::AllReduce;
  task.group = all_cores(32);
  task.bytes = 32e6;
  // Not a reduction over replicas: the slice's plan alone.
  const auto inside = planner.plan(task, task.group);
  CHECK(inside.size() == planner.plan(CollectiveOp::AllReduce, task.group, task.bytes).size());
  task.across_slices = true;
  const auto rs = planner.plan(CollectiveOp::ReduceScatter, task.group, task.bytes);
  const auto ag = planner.plan(CollectiveOp::AllGather, task.group, task.bytes);
  const auto across = planner.plan(task, task.group);
  REQUIRE(across.size() == rs.size() + 1 + ag.size());
  CHECK(planner.algorithm_names(task, task.group) == "hierarchical_rings+dcn_rings");
  const Phase& dcn = across[rs.size()];
  CHECK(dcn.name == "all_reduce dcn");
  REQUIRE(dcn.rings.size() == 32);  // one per core: it and its host's endpoint
  int representative = 0;
  for (const auto& ring : dcn.rings) {
    REQUIRE(ring.cores.size() == 2);
    CHECK(ring.cores[1] == sim::dcn_endpoint(t.host(ring.cores[0] / 2)));
    CHECK(ring.steps == 4);                            // 2 (S - 1)
    CHECK(ring.chunk_bytes == Approx(32e6 / 32 / 3));  // each core's piece over the 3 slices
    representative += ring.representative ? 1 : 0;
  }
  CHECK(representative == 8);  // the first host's cores
  // A reduce-scatter ends with the DCN rings; an all-gather never crosses.
  task.op = CollectiveOp::ReduceScatter;
  CHECK(planner.plan(task, task.group).size() == rs.size() + 1);
  task.op = CollectiveOp::AllGather;
  CHECK(planner.plan(task, task.group).size() == ag.size());
  // One slice: nothing crosses.
  const CollectivePlanner alone(Topology(s), 2, kV3);
  task.op = CollectiveOp::AllReduce;
  CHECK(alone.plan(task, task.group).size() == alone.plan(CollectiveOp::AllReduce, task.group, 32e6).size());
}
