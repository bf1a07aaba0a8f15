// Hierarchical rings (as XLA ran collectives on the 2D torus of TPU-v2/v3 pods): when a group
// holds the same cores of every chip of a sub-grid, the cores of a chip first reduce-scatter
// over the on-chip link; then, one torus dimension at a time in dimension order, every line of
// the sub-grid reduce-scatters the chip's shard, which shrinks by the line's length after each
// dimension; the all-gathers run back in reverse order, then on-chip. Rings along a dimension
// come from Topology::rings_along (bidirectional on a whole wrapping dimension, folded on a line).
// Without other traffic, with ring sizes p_d, link bandwidth B, hop latency a, payload S:
// the sum over the spanned dimensions of (p_d - 1) (a + S_d / (2 p_d B)) on a bidirectional ring
// ((p_d - 1) (a' + S_d / (p_d B)) on a folded line), S_d = S / (p_0 ... p_{d-1}), twice for an
// all-reduce.
#include "sim/collectives/ring_phases.hpp"

namespace tpusim::sim {
namespace {

class HierarchicalRings : public rings::GridRings {
 public:
  std::string name() const override { return "hierarchical_rings"; }
  std::string description() const override {
    return "on-chip reduce-scatter, then a reduce-scatter along each spanned torus dimension in "
           "order on the shrinking shard, then the all-gathers in reverse: sum over dimensions of "
           "(p_d - 1)(a + S_d/(2 p_d B)) per half on whole wrapping dimensions";
  }

 protected:
  void torus_phases(const Topology& topology, int cores_per_chip, rings::Half half, const GroupShape& shape,
                    double bytes, std::vector<Phase>& plan) const override {
    // The payload each dimension's rings move: the whole chip buffer along the first, then the
    // shard left by the dimensions before; the all-gathers in reverse order.
    std::vector<double> payload;
    double shard = bytes;
    for (int d : shape.spanned) {
      payload.push_back(shard);
      shard /= double(shape.coordinates[std::size_t(d)].size());
    }
    auto dimension_phase = [&](std::size_t k) {
      const int d = shape.spanned[k];
      Phase phase{rings::half_name(half) + " " + topology.dimension(d).name, {}};
      rings::add_line_rings(phase, topology, cores_per_chip, rings::lines_along(topology, shape, d), d,
                            payload[k]);
      plan.push_back(std::move(phase));
    };
    if (half == rings::Half::ReduceScatter)
      for (std::size_t k = 0; k < shape.spanned.size(); ++k) dimension_phase(k);
    else
      for (std::size_t k = shape.spanned.size(); k-- > 0;) dimension_phase(k);
  }
};

}  // namespace

std::unique_ptr<CollectiveAlgorithm> make_hierarchical_rings() {
  return std::make_unique<HierarchicalRings>();
}

}  // namespace tpusim::sim
