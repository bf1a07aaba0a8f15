// The N-dimensional torus (or mesh, where a dimension does not wrap around) of a slice's chips:
// named dimensions, rank <-> vector coordinates (dimension 0 fastest), directed ICI links (two
// per dimension per chip), dimension-order routes the shorter way round, hops, diameter,
// bisection, and the rings and lines along a dimension. Pure arithmetic: the engine builds its
// SimGrid platform from this, the collective algorithms plan on it, and tests check one against
// the other. TPU-v2/v3 slices are 2D (x, y), TPU-v4 slices 3D (x, y, z).
#pragma once

#include <string>
#include <vector>

#include "hardware/hardware_spec.hpp"

namespace tpusim {

/// One dimension of a torus.
struct TorusDimension {
  std::string name;    ///< "x", "y", "z", then "d3", "d4", ...
  int size = 1;        ///< chips along it
  bool wraps = false;  ///< has wrap-around links (only ever true with more than 2 chips)
};

/// Which way a directed ICI link leaves its chip: along dimension `dim`, the + or the - way.
struct LinkDirection {
  int dim = 0;
  bool plus = true;
};

/// A ring over some chips: `order` lists them in ring order; data moves order[i] -> order[i+1]
/// and order.back() -> order.front(). `share` is the fraction of the payload this ring carries
/// (0.5 each for the two directions of a bidirectional ring).
struct Ring {
  std::vector<int> order;
  double share = 1.0;
};

class Topology {
 public:
  /// `sizes[d]` chips along dimension d, which wraps when `wraparound[d]` and it has more than 2
  /// chips (with 2 the neighbour is the same both ways; a wrap link would duplicate the direct
  /// one). Both lists have one entry per dimension (at least one).
  Topology(std::vector<int> sizes, std::vector<bool> wraparound);
  explicit Topology(const SliceSpec& slice) : Topology(slice.shape, slice.wraparound) {}

  /// The name of dimension `dim`: x, y, z, then d3, d4, ...
  static std::string dimension_name(int dim);

  int dims() const { return int(dims_.size()); }
  const TorusDimension& dimension(int dim) const { return dims_[std::size_t(dim)]; }
  int size(int dim) const { return dims_[std::size_t(dim)].size; }
  bool wraps(int dim) const { return dims_[std::size_t(dim)].wraps; }
  int chips() const { return chips_; }
  /// Directed links a chip can have: two per dimension.
  int links_per_chip() const { return 2 * dims(); }

  /// The coordinates of a chip (dimension 0 fastest), and one of them.
  std::vector<int> coord(int rank) const;
  int coord(int rank, int dim) const { return rank / stride_[std::size_t(dim)] % size(dim); }
  /// The chip at coordinates `c` (one per dimension).
  int rank(const std::vector<int>& c) const;

  /// Hops between two coordinates along one dimension (shorter way round when it wraps).
  int distance(int from, int to, int dim) const;
  /// Hops between two chips with dimension-order routing.
  int hops(int from_rank, int to_rank) const;
  /// Largest hop count between any two chips.
  int diameter() const;

  /// Directed link ids are rank * links_per_chip() + 2 * dim + (0 for +, 1 for -); in 2D that
  /// is rank * 4 + {+x, -x, +y, -y}. A link exists only where there is a neighbour.
  int link_id(int rank, LinkDirection d) const {
    return rank * links_per_chip() + 2 * d.dim + (d.plus ? 0 : 1);
  }
  /// One past the largest link id (ids of links that do not exist included).
  int link_id_bound() const { return chips_ * links_per_chip(); }
  /// The chip a link id leaves from, and its direction.
  int link_source(int link) const { return link / links_per_chip(); }
  LinkDirection link_direction(int link) const {
    const int d = link % links_per_chip();
    return LinkDirection{d / 2, d % 2 == 0};
  }
  bool link_exists(int rank, LinkDirection d) const;
  /// The chip a link leads to.
  int link_target(int rank, LinkDirection d) const;
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

  /// `chips` in snake (boustrophedon) order: sorted by the last dimension, then the one before
  /// within it, and so on, every other run reversed, so that consecutive chips of a sub-grid
  /// are neighbours. In 2D: rows of increasing y, x increasing on even rows, decreasing on odd.
  std::vector<int> snake_order(const std::vector<int>& chips) const;

  /// Directed links crossing the narrowest cut into two equal halves (counted one way): the
  /// chips of a cross-section of the longest dimension, twice where that dimension wraps.
  int bisection_links() const;

  /// Several identical slices joined by the data-center network (DCN): `slices` of them, each
  /// chip's host by rank (host_of_chip). The torus stays one slice's: every slice runs the same
  /// program, so a flow to the next slice leaves through the host's network card and the
  /// mirror flow from the previous slice arrives through it (sim/collectives/dcn_rings.cpp).
  void join_slices(int slices, std::vector<int> host_of_chip);
  /// Slices joined by DCN (1: this slice alone).
  int slices() const { return slices_; }
  /// The host a chip hangs off (0 without join_slices).
  int host(int rank) const { return hosts_.empty() ? 0 : hosts_[std::size_t(rank)]; }

 private:
  std::vector<TorusDimension> dims_;
  std::vector<int> stride_;  ///< rank stride of each dimension
  int chips_ = 1;
  int slices_ = 1;
  std::vector<int> hosts_;  ///< by chip rank, with several slices
};

/// The host of chip `index` of `slice`: hosts feed boxes of chip.host_board_chips chips, numbered
/// dimension 0 fastest, as the chips are.
int host_of_chip(const SliceSpec& slice, const ChipSpec& chip, int index);
/// How many hosts feed `slice` (the last chip's host is the last).
int hosts_of_slice(const SliceSpec& slice, const ChipSpec& chip);
/// Every chip's host, by rank.
std::vector<int> hosts_of_chips(const SliceSpec& slice, const ChipSpec& chip);
/// `slice`'s torus, joined by the data-center network to `slices` - 1 identical others.
Topology slices_topology(const SliceSpec& slice, const ChipSpec& chip, int slices);

}  // namespace tpusim
