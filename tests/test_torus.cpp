// Torus arithmetic: coordinates, links, routes, rings.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "hardware/torus.hpp"

using namespace tpusim;

TEST_CASE("ranks and coordinates: dimension 0 fastest", "[torus]") {
  const Torus t(4, 8, true, true);
  CHECK(t.coord(5) == Coord{1, 1});
  CHECK(t.rank(Coord{3, 7}) == 31);
  for (int r = 0; r < t.chips(); ++r) CHECK(t.rank(t.coord(r)) == r);
}

TEST_CASE("hop counts: shorter way round only where the dimension wraps", "[torus]") {
  const Torus ring(8, 8, true, true);
  const Torus line(8, 8, false, false);
  CHECK(ring.hops(0, ring.rank({7, 0})) == 1);
  CHECK(line.hops(0, line.rank({7, 0})) == 7);
  CHECK(ring.hops(0, ring.rank({4, 4})) == 8);
  CHECK(ring.diameter() == 8);
  CHECK(line.diameter() == 14);
  CHECK(Torus(32, 32, true, true).diameter() == 32);
}

TEST_CASE("links exist only towards neighbours", "[torus]") {
  const Torus line(4, 1, false, false);
  CHECK_FALSE(line.link_exists(0, Direction::MinusX));
  CHECK(line.link_exists(0, Direction::PlusX));
  CHECK_FALSE(line.link_exists(3, Direction::PlusX));
  CHECK_FALSE(line.link_exists(0, Direction::PlusY));
  CHECK(line.link_count() == 6);
  const Torus torus(4, 4, true, true);
  CHECK(torus.link_count() == 64);
  CHECK(torus.link_target(torus.rank({3, 2}), Direction::PlusX) == torus.rank({0, 2}));
  // A 2-chip dimension never gets a duplicate wrap link.
  CHECK(Torus(2, 2, true, true).link_count() == 8);
}

TEST_CASE("routes follow dimension order and have the hop count's length", "[torus]") {
  for (const Torus& t : {Torus(8, 8, true, true), Torus(4, 8, false, false), Torus(8, 4, true, false)}) {
    for (int a = 0; a < t.chips(); ++a)
      for (int b = 0; b < t.chips(); b += 3) {
        const auto route = t.route(a, b);
        REQUIRE(int(route.size()) == t.hops(a, b));
        int at = a;
        bool in_y = false;
        for (int link : route) {
          REQUIRE(link / 4 == at);
          const auto d = Direction(link % 4);
          REQUIRE(t.link_exists(at, d));
          const bool y = d == Direction::PlusY || d == Direction::MinusY;
          REQUIRE((!in_y || y));  // never back to x after y
          in_y = y;
          at = t.link_target(at, d);
        }
        REQUIRE(at == b);
      }
  }
}

TEST_CASE("a whole wrapping dimension gets a bidirectional ring", "[torus]") {
  const Torus t(8, 8, true, true);
  std::vector<int> row;
  for (int x = 0; x < 8; ++x) row.push_back(t.rank({x, 2}));
  const auto rings = t.rings_along(row, 0);
  REQUIRE(rings.size() == 2);
  CHECK(rings[0].share == 0.5);
  CHECK(rings[1].order == std::vector<int>(row.rbegin(), row.rend()));
}

TEST_CASE("a line gets a folded ring using every directed link once", "[torus]") {
  for (int p : {3, 4, 7, 8}) {
    const Torus t(p, 1, false, false);
    std::vector<int> members;
    for (int x = 0; x < p; ++x) members.push_back(x);
    const auto rings = t.rings_along(members, 0);
    REQUIRE(rings.size() == 1);
    const auto& order = rings[0].order;
    CHECK(std::set<int>(order.begin(), order.end()).size() == std::size_t(p));
    std::map<int, int> use;
    int max_hops = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const auto route = t.route(order[i], order[(i + 1) % order.size()]);
      max_hops = std::max(max_hops, int(route.size()));
      for (int l : route) ++use[l];
    }
    CHECK(max_hops == 2);
    CHECK(int(use.size()) == t.link_count());
    for (const auto& [link, n] : use) CHECK(n == 1);
  }
}

TEST_CASE("bisection: the narrowest cut into halves", "[torus]") {
  CHECK(Torus(32, 32, true, true).bisection_links() == 64);
  CHECK(Torus(4, 8, false, false).bisection_links() == 4);
  CHECK(Torus(16, 32, false, true).bisection_links() == 32);
}
