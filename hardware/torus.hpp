// The 2D torus (or mesh) of chips of a slice: rank <-> coordinates (dimension 0 fastest),
// directed ICI links, dimension-order routes, hop counts and ring orders. Pure arithmetic:
// the engine builds its SimGrid platform from this, and tests check one against the other.
#pragma once

#include <array>
#include <vector>

#include "hardware/hardware_spec.hpp"

namespace tpusim {

struct Coord {
  int x = 0;
  int y = 0;
  bool operator==(const Coord&) const = default;
};

/// Direction of a directed ICI link leaving a chip.
enum class Direction { PlusX = 0, MinusX = 1, PlusY = 2, MinusY = 3 };

/// A ring over some chips: `order` lists them in ring order; data moves order[i] -> order[i+1]
/// and order.back() -> order.front(). `share` is the fraction of the payload this ring carries
/// (0.5 each for the two directions of a bidirectional ring).
struct Ring {
  std::vector<int> order;
  double share = 1.0;
};

class Torus {
 public:
  /// A dimension wraps only if asked and longer than 2 (with 2 chips the neighbour is the same
  /// both ways; a wrap link would just duplicate the direct one).
  Torus(int chips_x, int chips_y, bool wrap_x, bool wrap_y);
  explicit Torus(const SliceSpec& slice) : Torus(slice.chips_x, slice.chips_y, slice.wrap_x, slice.wrap_y) {}

  int size(int dim) const { return dims_[dim]; }
  bool wraps(int dim) const { return wrap_[dim]; }
  int chips() const { return dims_[0] * dims_[1]; }

  Coord coord(int rank) const { return Coord{rank % dims_[0], rank / dims_[0]}; }
  int rank(Coord c) const { return c.y * dims_[0] + c.x; }

  /// Hops between two coordinates along one dimension (shorter way round when it wraps).
  int distance(int from, int to, int dim) const;
  /// Hops between two chips with dimension-order routing.
  int hops(int from_rank, int to_rank) const {
    return distance(coord(from_rank).x, coord(to_rank).x, 0) +
           distance(coord(from_rank).y, coord(to_rank).y, 1);
  }
  /// Largest hop count between any two chips.
  int diameter() const;

  /// Directed link ids are rank * 4 + direction; a link exists only where there is a neighbour.
  static int link_id(int rank, Direction d) { return rank * 4 + int(d); }
  bool link_exists(int rank, Direction d) const;
  /// The chip a link leads to.
  int link_target(int rank, Direction d) const;
  /// Number of existing directed links.
  int link_count() const;

  /// Dimension-order route (dimension 0 first), the shorter way round on a wrapping dimension
  /// (ties go the + way): the directed link ids crossed, in order. Empty for from == to.
  std::vector<int> route(int from_rank, int to_rank) const;

  /// Rings for a collective among `members` (chip ranks that differ only along `dim`, given in
  /// increasing coordinate order). A whole wrapping dimension gets a bidirectional ring (two
  /// rings, half the payload each, every link used once per direction); otherwise a line gets
  /// one folded ring (0, 2, 4, ..., then back through the odd ones), which uses every directed
  /// link of the line once with at most 2 hops per step.
  std::vector<Ring> rings_along(const std::vector<int>& members, int dim) const;

  /// Directed links crossing the narrowest cut into two equal halves (counted one way).
  int bisection_links() const;

 private:
  std::array<int, 2> dims_;
  std::array<bool, 2> wrap_;
};

}  // namespace tpusim
