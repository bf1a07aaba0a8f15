// Torus arithmetic in any number of dimensions: coordinates, links, routes, rings, snakes,
// diameter and bisection.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "hardware/topology.hpp"

using namespace tpusim;

namespace {
Topology torus2(int x, int y, bool wx, bool wy) { return Topology({x, y}, {wx, wy}); }
const LinkDirection kPlusX{0, true}, kMinusX{0, false}, kPlusY{1, true}, kMinusY{1, false};
}  // namespace

TEST_CASE("ranks and coordinates: dimension 0 fastest", "[topology]") {
  const Topology t = torus2(4, 8, true, true);
  CHECK(t.coord(5) == std::vector<int>{1, 1});
  CHECK(t.rank({3, 7}) == 31);
  for (int r = 0; r < t.chips(); ++r) CHECK(t.rank(t.coord(r)) == r);
  const Topology cube({4, 4, 4}, {true, true, true});
  CHECK(cube.dims() == 3);
  CHECK(cube.coord(1 + 4 * 2 + 16 * 3) == std::vector<int>{1, 2, 3});
  CHECK(cube.dimension(2).name == "z");
  CHECK(Topology::dimension_name(3) == "d3");
  for (int r = 0; r < cube.chips(); ++r) CHECK(cube.rank(cube.coord(r)) == r);
}

TEST_CASE("hop counts: shorter way round only where the dimension wraps", "[topology]") {
  const Topology ring = torus2(8, 8, true, true);
  const Topology line = torus2(8, 8, false, false);
  CHECK(ring.hops(0, ring.rank({7, 0})) == 1);
  CHECK(line.hops(0, line.rank({7, 0})) == 7);
  CHECK(ring.hops(0, ring.rank({4, 4})) == 8);
  CHECK(ring.diameter() == 8);
  CHECK(line.diameter() == 14);
  CHECK(torus2(32, 32, true, true).diameter() == 32);
  // TPU-v4: a 4x4x4 cube with wrap-around has diameter 6; a 16x16x16 pod 24; a 2x2x1 tray 2.
  CHECK(Topology({4, 4, 4}, {true, true, true}).diameter() == 6);
  CHECK(Topology({16, 16, 16}, {true, true, true}).diameter() == 24);
  CHECK(Topology({2, 2, 1}, {false, false, false}).diameter() == 2);
}

TEST_CASE("links exist only towards neighbours, 2 x dimensions per chip", "[topology]") {
  const Topology line = torus2(4, 1, false, false);
  CHECK_FALSE(line.link_exists(0, kMinusX));
  CHECK(line.link_exists(0, kPlusX));
  CHECK_FALSE(line.link_exists(3, kPlusX));
  CHECK_FALSE(line.link_exists(0, kPlusY));
  CHECK(line.link_count() == 6);
  const Topology torus = torus2(4, 4, true, true);
  CHECK(torus.link_count() == 64);
  CHECK(torus.link_target(torus.rank({3, 2}), kPlusX) == torus.rank({0, 2}));
  CHECK(torus.link_target(torus.rank({3, 0}), kMinusY) == torus.rank({3, 3}));
  // A 2-chip dimension never gets a duplicate wrap link.
  CHECK(torus2(2, 2, true, true).link_count() == 8);
  // In 2D the ids are rank * 4 + {+x, -x, +y, -y}, as before the topology had N dimensions.
  CHECK(torus.link_id(5, kPlusX) == 20);
  CHECK(torus.link_id(5, kMinusY) == 23);
  // 3D: six links per chip; a 4x4x4 cube with wrap-around has 64 x 6 = 384 directed links.
  const Topology cube({4, 4, 4}, {true, true, true});
  CHECK(cube.links_per_chip() == 6);
  CHECK(cube.link_count() == 384);
  const LinkDirection plus_z{2, true};
  CHECK(cube.link_target(cube.rank({1, 2, 3}), plus_z) == cube.rank({1, 2, 0}));
  for (int id = 0; id < cube.link_id_bound(); ++id)
    CHECK(cube.link_id(cube.link_source(id), cube.link_direction(id)) == id);
  // No wrap-around below a whole cube: a 2x4x4 slice has lines along y and z.
  CHECK(Topology({2, 4, 4}, {false, false, false}).link_count() == 32 * 1 + 32 * 3 / 4 * 2 * 2);
}

TEST_CASE("routes follow dimension order and have the hop count's length", "[topology]") {
  for (const Topology& t :
       {torus2(8, 8, true, true), torus2(4, 8, false, false), torus2(8, 4, true, false),
        Topology({4, 3, 5}, {true, false, true}), Topology({2, 2, 4}, {false, false, true})}) {
    for (int a = 0; a < t.chips(); ++a)
      for (int b = 0; b < t.chips(); b += 3) {
        const auto route = t.route(a, b);
        REQUIRE(int(route.size()) == t.hops(a, b));
        int at = a, dim = 0;
        for (int link : route) {
          REQUIRE(t.link_source(link) == at);
          const LinkDirection d = t.link_direction(link);
          REQUIRE(t.link_exists(at, d));
          REQUIRE(d.dim >= dim);  // never back to a lower dimension
          dim = d.dim;
          at = t.link_target(at, d);
        }
        REQUIRE(at == b);
      }
  }
}

TEST_CASE("a whole wrapping dimension gets a bidirectional ring", "[topology]") {
  const Topology t = torus2(8, 8, true, true);
  std::vector<int> row;
  for (int x = 0; x < 8; ++x) row.push_back(t.rank({x, 2}));
  const auto rings = t.rings_along(row, 0);
  REQUIRE(rings.size() == 2);
  CHECK(rings[0].share == 0.5);
  CHECK(rings[1].order == std::vector<int>(row.rbegin(), row.rend()));
  const Topology cube({4, 4, 4}, {true, true, true});
  std::vector<int> pillar;
  for (int z = 0; z < 4; ++z) pillar.push_back(cube.rank({1, 1, z}));
  CHECK(cube.rings_along(pillar, 2).size() == 2);
}

TEST_CASE("a line gets a folded ring using every directed link once", "[topology]") {
  for (int p : {3, 4, 7, 8}) {
    const Topology t = torus2(p, 1, false, false);
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

TEST_CASE("a snake visits a sub-grid through neighbours only", "[topology]") {
  // 2D: rows of increasing y, x increasing on even rows, decreasing on odd ones.
  const Topology t = torus2(4, 4, false, false);
  CHECK(t.snake_order({0, 1, 4, 5, 8, 9}) == std::vector<int>{0, 1, 5, 4, 8, 9});
  // 3D: every consecutive pair of a whole box's snake is one hop apart.
  const Topology box({3, 4, 2}, {false, false, false});
  std::vector<int> all;
  for (int r = 0; r < box.chips(); ++r) all.push_back(r);
  const auto snake = box.snake_order(all);
  REQUIRE(snake.size() == all.size());
  CHECK(std::set<int>(snake.begin(), snake.end()).size() == all.size());
  for (std::size_t i = 0; i + 1 < snake.size(); ++i) CHECK(box.hops(snake[i], snake[i + 1]) == 1);
}

TEST_CASE("bisection: the narrowest cut into halves", "[topology]") {
  CHECK(torus2(32, 32, true, true).bisection_links() == 64);
  CHECK(torus2(4, 8, false, false).bisection_links() == 4);
  CHECK(torus2(16, 32, false, true).bisection_links() == 32);
  // TPU-v4 pod: a 16x16x16 cut crosses 2 x 256 links one way (x 45 GB/s: shared/HARDWARE.md's
  // 24 TB/s bisection at its 47 GB/s).
  CHECK(Topology({16, 16, 16}, {true, true, true}).bisection_links() == 512);
  CHECK(Topology({4, 4, 8}, {true, true, true}).bisection_links() == 32);
}
