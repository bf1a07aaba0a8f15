// Collective plans: phases, ring sizes and bytes on the wire.
#include <catch2/catch.hpp>

#include "sim/collective_plan.hpp"

using namespace tpusim;
using namespace tpusim::sim;

namespace {
std::vector<int> all_cores(int n) {
  std::vector<int> g(n);
  for (int i = 0; i < n; ++i) g[i] = i;
  return g;
}
}  // namespace

TEST_CASE("2D all-reduce over every core: on-chip, x, y, y, x, on-chip", "[plan]") {
  const Torus t(4, 8, true, true);
  const auto plan = plan_collective(t, 2, CollectiveOp::AllReduce, all_cores(64), 1024);
  REQUIRE(plan.size() == 6);
  CHECK(plan[0].name == "reduce_scatter on-chip");
  CHECK(plan[1].name == "reduce_scatter x");
  CHECK(plan[2].name == "reduce_scatter y");
  CHECK(plan[3].name == "all_gather y");
  CHECK(plan[4].name == "all_gather x");
  CHECK(plan[5].name == "all_gather on-chip");
  CHECK(plan[1].rings.size() == 16);  // 8 rows x 2 directions (x wraps: bidirectional rings)
  CHECK(plan[1].rings[0].chunk_bytes == Approx(1024 * 0.5 / 4));
  CHECK(plan[2].rings[0].chunk_bytes == Approx(256 * 0.5 / 8));
  int representative = 0;
  for (const auto& r : plan[1].rings) representative += r.representative;
  CHECK(representative == 2);
}

TEST_CASE("ring all-reduce puts 2(p-1)/p of the buffer on the wire per member", "[plan]") {
  const Torus t(8, 1, true, false);
  std::vector<int> leaders;
  for (int c = 0; c < 8; ++c) leaders.push_back(2 * c);
  const double S = 8000;
  const auto ar = plan_collective(t, 2, CollectiveOp::AllReduce, leaders, S);
  CHECK(plan_wire_bytes(ar) == Approx(8 * 2.0 * 7 / 8 * S));
  const auto rs = plan_collective(t, 2, CollectiveOp::ReduceScatter, leaders, S);
  const auto ag = plan_collective(t, 2, CollectiveOp::AllGather, leaders, S);
  CHECK(plan_wire_bytes(rs) + plan_wire_bytes(ag) == Approx(plan_wire_bytes(ar)));
}

TEST_CASE("a group that is not a grid gets one snake ring", "[plan]") {
  const Torus t(4, 4, false, false);
  const std::vector<int> group = {0, 2, 10};  // chips 0, 1, 5: an L shape
  const auto plan = plan_collective(t, 2, CollectiveOp::AllReduce, group, 300);
  REQUIRE(plan.size() == 2);
  CHECK(plan[0].rings.size() == 1);
  CHECK(plan[0].rings[0].cores.size() == 3);
  CHECK(plan[0].rings[0].steps == 2);
}

TEST_CASE("trivial collectives have no phases", "[plan]") {
  const Torus t(2, 2, false, false);
  CHECK(plan_collective(t, 2, CollectiveOp::AllReduce, {3}, 100).empty());
  CHECK(plan_collective(t, 2, CollectiveOp::AllReduce, {0, 1}, 0).empty());
}
