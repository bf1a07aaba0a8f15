// All-to-all, one torus dimension at a time: every member's buffer of S bytes holds S/N for each
// of the group's N members (mixture-of-experts' dispatch and combine). On a sub-grid group the
// cores of each chip exchange first (over the on-chip link), then along each spanned dimension
// every line exchanges: each member sends S/p to each of the other p - 1 members of its line, all
// at once, routed the shortest way (multi-hop); after a dimension every member again holds S,
// sorted by its destination's coordinate there. A group that is not a sub-grid exchanges among
// all its members in one phase. A shift k (member i to member i + k) is a ring of one step
// through the members k apart (gcd(p, k) such rings), so the engine plays the exchange as it
// plays rings. Without other traffic, on a wrapping line of p chips (p even, half-way flows
// routed one way), link bandwidth B, hop latency a: the busiest link carries
// (p/2)(p/2 + 1)/2 chunks of S/p, so about (p/2) a + (p/2)(p/2 + 1)/2 S/(p B).
#include <numeric>

#include "sim/collectives/ring_phases.hpp"

namespace tpusim::sim {
namespace {

/// Every member of `members` sending `chunk` to every other at once: one ring per cycle of each
/// shift k = 1 .. p - 1.
void add_exchange(Phase& phase, const std::vector<int>& members, double chunk, bool representative) {
  const int p = int(members.size());
  for (int k = 1; k < p; ++k) {
    const int cycles = std::gcd(p, k);
    for (int r = 0; r < cycles; ++r) {
      PlannedRing ring;
      for (int i = r, n = 0; n < p / cycles; i = (i + k) % p, ++n)
        ring.cores.push_back(members[std::size_t(i)]);
      ring.chunk_bytes = chunk;
      ring.steps = 1;
      ring.representative = representative;
      phase.rings.push_back(std::move(ring));
    }
  }
}

class AllToAllByDimension : public CollectiveAlgorithm {
 public:
  std::string name() const override { return "all_to_all_by_dimension"; }
  std::string description() const override {
    return "all-to-all one dimension at a time (on-chip first), each line's members sending S/p to "
           "every other at once, shortest routes: on a wrapping line of p chips about (p/2) a + "
           "(p/2)(p/2 + 1)/2 S/(p B)";
  }
  bool supports(const Topology&, int, CollectiveOp op, const std::vector<int>&) const override {
    return op == CollectiveOp::AllToAll;
  }
  bool outside_lists() const override { return true; }
  std::vector<Phase> plan(const Topology& topology, int cores_per_chip, CollectiveOp,
                          const std::vector<int>& group, double bytes) const override {
    std::vector<Phase> plan;
    if (group.size() < 2 || bytes <= 0) return plan;
    const GroupShape shape = group_shape(topology, cores_per_chip, group);
    if (!shape.grid) {
      plan.push_back(Phase{"all_to_all", {}});
      add_exchange(plan.back(), group, bytes / double(group.size()), true);
      return plan;
    }
    const std::size_t per_chip = shape.cores_of_chip.begin()->second.size();
    if (per_chip > 1) {
      plan.push_back(Phase{"all_to_all on-chip", {}});
      bool first = true;
      for (const auto& [chip, cores] : shape.cores_of_chip) {
        add_exchange(plan.back(), cores, bytes / double(per_chip), first);
        first = false;
      }
    }
    for (int d : shape.spanned) {
      plan.push_back(Phase{"all_to_all " + topology.dimension(d).name, {}});
      const auto lines = rings::lines_along(topology, shape, d);
      for (std::size_t i = 0; i < per_chip; ++i)
        for (std::size_t li = 0; li < lines.size(); ++li) {
          std::vector<int> members;  // the i-th group core of each chip of the line
          for (int leader : lines[li]) members.push_back(shape.cores_of_chip.at(leader / cores_per_chip)[i]);
          // The first line's rings, of every core index (they share its links), stand for the rest.
          add_exchange(plan.back(), members, bytes / double(members.size()), li == 0);
        }
    }
    return plan;
  }
};

}  // namespace

std::unique_ptr<CollectiveAlgorithm> make_all_to_all_by_dimension() {
  return std::make_unique<AllToAllByDimension>();
}

}  // namespace tpusim::sim
