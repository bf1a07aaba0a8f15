// Task graph validation and collective plans: no engine needed.
#include <catch2/catch.hpp>

#include "hardware/errors.hpp"
#include "sim/task_graph.hpp"
#include "test_support.hpp"

using namespace tpusim;
using namespace tpusim::test;

TEST_CASE("a well-formed graph validates and keeps program order", "[graph]") {
  sim::TaskGraph g(2);
  const int a = g.add(compute(0, 1));
  const int b = g.add(compute(1, 1));
  const int c = g.add(compute(0, 1));
  g.depend(a, b);
  CHECK_NOTHROW(g.validate());
  CHECK(g.program(0) == std::vector<int>{a, c});
  CHECK(g.successors(a) == std::vector<int>{b});
  CHECK(g.predecessors(b) == std::vector<int>{a});
}

namespace {

/// Core 0 runs a then c; core 1 runs b then d; b waits for a. e (core 2) depends on nothing.
struct SmallGraph {
  sim::TaskGraph g{3};
  int a, b, c, d, e;
};

SmallGraph four_on_two_cores_and_one_alone() {
  SmallGraph s;
  s.a = s.g.add(compute(0, 1));
  s.b = s.g.add(compute(1, 1));
  s.c = s.g.add(compute(0, 1));
  s.d = s.g.add(compute(1, 1));
  s.e = s.g.add(compute(2, 1));
  s.g.depend(s.a, s.b);
  return s;
}

}  // namespace

TEST_CASE("tasks are ordered when one is an ancestor of the other, program order included", "[graph]") {
  auto [g, a, b, c, d, e] = four_on_two_cores_and_one_alone();
  CHECK(g.ordered({a}, {b, d}));     // a -> b, and b -> d by core 1's program
  CHECK(g.ordered({b, d}, {a}));     // either way round
  CHECK(g.ordered({a}, {c}));        // core 0's program
  CHECK_FALSE(g.ordered({c}, {b}));  // c and b could run at once
  CHECK_FALSE(g.ordered({a, e}, {d}));
  CHECK_FALSE(g.ordered({a}, {b}, 1.0));  // no memory to prove it
  // Many tasks: a chain of 100 on core 0 is ordered with a later chain of 70 on core 1.
  sim::TaskGraph h(2);
  std::vector<int> first, second;
  for (int i = 0; i < 100; ++i) first.push_back(h.add(compute(0, 1)));
  for (int i = 0; i < 70; ++i) second.push_back(h.add(compute(1, 1)));
  h.depend(first.back(), second.front());
  CHECK(h.ordered(first, second));
  h.add(compute(0, 1));
  first.push_back(h.size() - 1);  // after the chain on core 0, unordered with core 1's
  CHECK_FALSE(h.ordered(first, second));
}

TEST_CASE("tasks form a chain when each one depends on the one before it", "[graph]") {
  auto [g, a, b, c, d, e] = four_on_two_cores_and_one_alone();
  CHECK(g.chain({}));
  CHECK(g.chain({e}));
  CHECK(g.chain({a, b, d}));        // a -> b -> d
  CHECK(g.chain({d, a}));           // in any order given
  CHECK(g.chain({a, c}));           // core 0's program
  CHECK_FALSE(g.chain({a, b, c}));  // b and c could run at once
  CHECK_FALSE(g.chain({a, e}));
  g.depend(b, c);
  CHECK(g.chain({a, b, c}));
  CHECK(g.chain({a, b, c, d}) == g.ordered({c}, {d}));
}

TEST_CASE("a dependency cycle through program order is caught", "[graph]") {
  sim::TaskGraph g(2);
  const int a = g.add(compute(0, 1));
  const int b = g.add(compute(1, 1));
  const int c = g.add(compute(0, 1));
  const int d = g.add(compute(1, 1));
  g.depend(c, b);  // b (core 1, first) waits for c (core 0, second)
  g.depend(d, a);  // a (core 0, first) waits for d (core 1, second): deadlock
  CHECK_THROWS_WITH(g.validate(), Catch::Contains("cycle"));
}

TEST_CASE("unbalanced memory effects are caught", "[graph]") {
  sim::TaskGraph g(1);
  auto t = compute(0, 1);
  t.memory = {{0, sim::MemoryCategory::Activations, 100, sim::MemoryEffect::When::Start}};
  g.add(t);
  CHECK_THROWS_WITH(g.validate(), Catch::Contains("activations"));
}

TEST_CASE("malformed tasks are caught", "[graph]") {
  sim::TaskGraph g(4);
  g.add(collective(sim::CollectiveOp::AllReduce, {0, 1, 1}, 10));
  CHECK_THROWS_WITH(g.validate(), Catch::Contains("twice"));
  sim::TaskGraph h(4);
  h.add(transfer(0, 9, 10));
  CHECK_THROWS_AS(h.validate(), SimulationError);
  sim::TaskGraph k(4);
  k.add(compute(0, -1));
  CHECK_THROWS_AS(k.validate(), SimulationError);
}

TEST_CASE("the core holding the most resident state, and what it holds", "[graph]") {
  sim::TaskGraph g(3);
  CHECK(g.most_resident_core() == -1);  // nobody holds anything
  g.resident(0, sim::MemoryCategory::Weights, 100);
  g.resident(2, sim::MemoryCategory::Weights, 100);
  g.resident(2, sim::MemoryCategory::Optimizer, 50);
  CHECK(g.resident_bytes(0) == 100);
  CHECK(g.resident_bytes(1) == 0);
  CHECK(g.resident_bytes(2) == 150);
  CHECK(g.most_resident_core() == 2);
}

TEST_CASE("a graph that would need more host memory than the budget stops as it passes it",
          "[graph][resources]") {
  // 1,000 cores: SimGrid's routing table is 8 MB, per-core state 20 MB, plus the base 40 MB.
  CHECK(sim::HostFootprint::bytes(1000, 0) == Approx(40e6 + 8e6 + 20e6));
  sim::set_host_memory_budget(sim::HostFootprint::bytes(1000, 0) - 1);
  CHECK_THROWS_AS(sim::TaskGraph(1000), ResourceError);
  // Room for the cores and about 50,000 tasks: the graph stops within 16,384 tasks past them.
  sim::set_host_memory_budget(sim::HostFootprint::bytes(8, 50000));
  sim::TaskGraph g(8);
  int added = 0;
  CHECK_THROWS_AS(
      [&] {
        for (; added < 200000; ++added) g.add(compute(added % 8, 1e-6));
      }(),
      ResourceError);
  CHECK(added >= 50000);
  CHECK(added <= 50000 + 16384);
  sim::set_host_memory_budget(0);  // none: as before
  CHECK_NOTHROW(sim::TaskGraph(1000));
}

TEST_CASE("a task's phase is an interned name that compares as its string", "[graph]") {
  const sim::PhaseName a = "forward", b = std::string("forward"), c = std::string_view("backward");
  CHECK(a == b);
  CHECK(&a.str() == &b.str());  // one copy of each name, however many tasks carry it
  CHECK(a == "forward");
  CHECK(a == std::string("forward"));
  CHECK_FALSE(a == c);
  CHECK(c < a);
  CHECK(sim::PhaseName().empty());
  CHECK(static_cast<const std::string&>(c) == "backward");
}

TEST_CASE("a task's functional work travels with copies and is absent by default", "[graph]") {
  sim::Task t;
  CHECK_FALSE(t.host);
  int runs = 0;
  t.host = [&runs] { ++runs; };
  sim::Task copy = t;
  copy.host();
  t.host();
  CHECK(runs == 2);
  sim::Task moved = std::move(copy);
  REQUIRE(moved.host);
  moved.host();
  CHECK(runs == 3);
  t.host = std::function<void()>();  // an empty closure is no work
  CHECK_FALSE(t.host);
}

TEST_CASE("tasks stay packed: a pod's step holds millions", "[graph]") {
  // 2.8 M tasks of a 175B mesh on v4-8192 (HostFootprint): every 8 bytes here is 22 MB there.
  CHECK(sizeof(sim::Task) <= 200);
  CHECK(sizeof(sim::MemoryEffect) <= 16);
}

TEST_CASE("a core's memory floor counts what other tasks change where it has surely happened", "[graph]") {
  // Two pipeline stages: core 0's forward sends 2 bytes of activations to core 1 (freed by the
  // transfer), whose forward keeps 3 besides the 4 received; core 1's backward sends 1 back.
  using sim::MemoryCategory;
  using When = sim::MemoryEffect::When;
  const auto act = [](int core, double bytes, When when) {
    return sim::MemoryEffect(core, MemoryCategory::Activations, bytes, when);
  };
  sim::TaskGraph g(2);
  g.resident(1, MemoryCategory::Weights, 100);
  sim::Task f0 = compute(0, 1), b0 = compute(0, 1), f1 = compute(1, 1), b1 = compute(1, 1);
  f0.memory = {act(0, 5, When::Start), act(0, 2, When::End)};
  f1.memory = {act(1, 3, When::Start)};
  b1.memory = {act(1, -7, When::End)};
  b0.memory = {act(0, -6, When::End)};
  sim::Task forward = transfer(0, 1, 4), backward = transfer(1, 0, 1);
  forward.memory = {act(0, -2, When::End), act(1, 4, When::End)};
  backward.memory = {act(0, 1, When::End)};
  const int ids[] = {g.add(f0), g.add(forward), g.add(f1), g.add(b1), g.add(backward), g.add(b0)};
  for (int k = 1; k < 6; ++k) g.depend(ids[k - 1], ids[k]);
  REQUIRE_NOTHROW(g.validate());
  // Core 1 holds the 4 received bytes by its forward's start: 100 + 4 + 3. Core 0 may have freed
  // the 2 sent as its forward ends (a run holds 7 then), and holds the 1 received by its
  // backward's start: 5 + 1.
  CHECK(g.memory_floors() == std::vector<double>{6, 107});
  // A received buffer no task of the core waits for may come at any time: left out.
  sim::TaskGraph loose(2);
  sim::Task early = transfer(0, 1, 4), late = compute(1, 1);
  early.memory = {act(1, 4, When::End)};
  late.memory = {act(1, -4, When::End)};
  loose.add(early);
  loose.add(late);
  CHECK(loose.memory_floors() == std::vector<double>{0, 0});
}
