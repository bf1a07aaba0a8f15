// Building blocks of the ring-based collective algorithms: the lines of a group's sub-grid
// along a torus dimension, their rings (Topology::rings_along: bidirectional on a whole wrapping
// dimension, folded on a line), and the on-chip ring among the group cores of each chip.
#pragma once

#include <string>
#include <vector>

#include "sim/collectives/collective_algorithm.hpp"

namespace tpusim::sim::rings {

enum class Half { ReduceScatter, AllGather };

/// "reduce_scatter" or "all_gather".
std::string half_name(Half half);

/// The chip-level leader cores (each chip's first group core) of every line of the group's
/// sub-grid along dimension `dim`, each ordered by its coordinate along `dim`; the lines in order
/// of their other coordinates, dimension 0 fastest.
std::vector<std::vector<int>> lines_along(const Topology& topology, const GroupShape& shape, int dim);

/// Appends to `phase` the rings moving `payload` bytes along dimension `dim` on every line (a
/// ring of p chips: p - 1 steps of payload x share / p); the first line's are representative.
void add_line_rings(Phase& phase, const Topology& topology, int cores_per_chip,
                    const std::vector<std::vector<int>>& lines, int dim, double payload);

/// The on-chip half: each chip's group cores form a small ring over the on-chip link, moving
/// `bytes`. Nothing when a chip holds a single group core.
void add_onchip_phase(std::vector<Phase>& plan, Half half, const GroupShape& shape, double bytes);

/// Whether a ring algorithm over the torus's lines takes `group`: its chips a sub-grid, each
/// holding as many of its cores.
bool grid_group(const Topology& topology, int cores_per_chip, const std::vector<int>& group);

/// A hierarchical ring algorithm over a group whose chips form a sub-grid (grid_group): the
/// on-chip reduce-scatter, the torus phases of the reduce-scatter (`torus_phases`), then those
/// of the all-gather and the on-chip all-gather, each half as the collective needs it; no phase
/// for a group of one core or an empty buffer. A derived algorithm says only how the chip
/// buffer moves along the spanned torus dimensions.
class GridRings : public CollectiveAlgorithm {
 public:
  bool supports(const Topology& topology, int cores_per_chip, CollectiveOp op,
                const std::vector<int>& group) const final;
  std::vector<Phase> plan(const Topology& topology, int cores_per_chip, CollectiveOp op,
                          const std::vector<int>& group, double bytes) const final;

 protected:
  /// Appends to `plan` the torus phases of one half, moving the chip buffer of `bytes`.
  virtual void torus_phases(const Topology& topology, int cores_per_chip, Half half, const GroupShape& shape,
                            double bytes, std::vector<Phase>& plan) const = 0;
};

}  // namespace tpusim::sim::rings
