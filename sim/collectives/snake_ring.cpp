// The snake ring: one unidirectional ring through every core of the group, its chips in snake
// (boustrophedon) order over the torus (Topology::snake_order) and the cores of a chip one after
// the other; a step's flows between chips that are not neighbours are routed over several hops.
// It supports any group, so a hardware file's list of algorithms holds it for the groups the
// others do not (groups that are not sub-grids). Without other traffic, for p cores and a ring
// whose every step crosses one free link: (p - 1) (a + S / (p B)) per half.
#include "sim/collectives/collective_algorithm.hpp"

namespace tpusim::sim {
namespace {

class SnakeRing : public CollectiveAlgorithm {
 public:
  std::string name() const override { return "snake_ring"; }
  std::string description() const override {
    return "one unidirectional ring through every core, chips in snake order, multi-hop where "
           "chips are not neighbours: (p - 1)(a + S/(p B)) per half on neighbouring chips";
  }
  /// Every group, for the reductions and gathers (an all-to-all is not a ring's).
  bool supports(const Topology&, int, CollectiveOp op, const std::vector<int>&) const override {
    return op != CollectiveOp::AllToAll;
  }
  bool supports_any_group() const override { return true; }
  std::vector<Phase> plan(const Topology& topology, int cores_per_chip, CollectiveOp op,
                          const std::vector<int>& group, double bytes) const override {
    std::vector<Phase> plan;
    if (group.size() < 2 || bytes <= 0) return plan;
    const GroupShape shape = group_shape(topology, cores_per_chip, group);
    std::vector<int> chips;
    for (const auto& [chip, cores] : shape.cores_of_chip) chips.push_back(chip);
    std::vector<int> order;
    for (int chip : topology.snake_order(chips))
      for (int core : shape.cores_of_chip.at(chip)) order.push_back(core);
    const double p = double(order.size());
    if (op != CollectiveOp::AllGather)
      plan.push_back(
          Phase{"reduce_scatter ring", {PlannedRing{order, bytes / p, int(p) - 1, true, {}, false}}});
    if (op != CollectiveOp::ReduceScatter)
      plan.push_back(Phase{"all_gather ring", {PlannedRing{order, bytes / p, int(p) - 1, true, {}, false}}});
    return plan;
  }
};

}  // namespace

std::unique_ptr<CollectiveAlgorithm> make_snake_ring() { return std::make_unique<SnakeRing>(); }

}  // namespace tpusim::sim
