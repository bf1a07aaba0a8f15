// Routes round failed links (hardware/detours.hpp): pure, no engine.
#include <catch2/catch.hpp>

#include "hardware/detours.hpp"

using tpusim::Detours;
using tpusim::LinkDirection;
using tpusim::NetworkState;
using tpusim::Topology;

namespace {
NetworkState failing(const Topology& t, const std::vector<std::pair<int, LinkDirection>>& links) {
  NetworkState n;
  n.link_bandwidth_scale.assign(std::size_t(t.link_id_bound()), 1.0);
  for (const auto& [chip, d] : links) n.link_bandwidth_scale[std::size_t(t.link_id(chip, d))] = 0.0;
  return n;
}
}  // namespace

TEST_CASE("a route round a failed link is a shortest path over the links left", "[detours]") {
  const Topology mesh({4, 4}, {false, false});  // v3-32's 4 x 4, no wrap-around
  const NetworkState n = failing(mesh, {{0, LinkDirection{0, true}}});
  const Detours detours(mesh, n);
  bool detoured = false, reachable = false;
  // (0,0) -> (1,0): its only direct link failed; round through y: 3 hops, none failed.
  const auto path = detours.route(0, 1, &detoured, &reachable);
  CHECK(detoured);
  CHECK(reachable);
  REQUIRE(path.size() == 3);
  for (int l : path) CHECK_FALSE(detours.failed(l));
  int at = 0;
  for (int l : path) {
    CHECK(mesh.link_source(l) == at);
    at = mesh.link_target(at, mesh.link_direction(l));
  }
  CHECK(at == 1);
  // A route that never crossed it is the dimension-order route, not a detour.
  CHECK(detours.route(4, 7, &detoured) == mesh.route(4, 7));
  CHECK_FALSE(detoured);
  CHECK(detours.cut_off().empty());
}

TEST_CASE("failed links that cut a chip off are found, and name the smaller side", "[detours]") {
  const Topology mesh({4, 4}, {false, false});
  const Detours isolated(mesh, failing(mesh, {{0, LinkDirection{0, true}}, {0, LinkDirection{1, true}}}));
  CHECK(isolated.cut_off() == std::vector<int>{0});  // chip 0 can send nowhere
  bool reachable = true;
  CHECK(isolated.route(0, 5, nullptr, &reachable).empty());
  CHECK_FALSE(reachable);
  // On a torus one failed direction is routed the other way round.
  const Topology torus({4, 4}, {true, true});
  const Detours round(torus, failing(torus, {{0, LinkDirection{0, true}}}));
  CHECK(round.cut_off().empty());
  CHECK(round.route(0, 1).size() == 3);
}
