// DCN rings: the all-reduce of each core's piece across S identical slices over the data-center
// network, the middle of the hierarchical reduction across slices (CollectivePlanner::plan: a
// reduce-scatter inside each slice, this, then an all-gather inside the slice). Core c of every
// slice holds the same piece of the reduced buffer after the reduce-scatter; the S copies of core
// c form a ring over the slices, run as a ring all-reduce: 2 (S - 1) steps, each sending a chunk
// of piece / S to the next slice's core c. Only this slice is simulated (every slice runs the
// same program): core c's flow to the next slice leaves through its host's network card and the
// mirror flow from the previous slice arrives through it, so each step is two flows per core, to
// and from the host's DCN endpoint (dcn_endpoint). Without other traffic, with k of the group's
// cores on the busiest host, a card of B bytes/s each way and a latency a:
//   2 (S - 1) (a + k piece / (S B)).
// Never chosen from a hardware's list (supports() is false): the planner runs it for a task that
// reduces across slices.
#include <map>

#include "sim/collectives/collective_algorithm.hpp"

namespace tpusim::sim {
namespace {

class DcnRings : public CollectiveAlgorithm {
 public:
  std::string name() const override { return "dcn_rings"; }
  std::string description() const override {
    return "across slices, over the data-center network: each core's piece all-reduced by a ring "
           "over the slices, 2(S - 1) steps of piece/S through its host's network card, "
           "2(S - 1)(a + k piece/(S B)) with k of the group's cores on a host (run by the planner "
           "for a reduction across slices, never from a list)";
  }
  bool supports(const Topology&, int, CollectiveOp, const std::vector<int>&) const override { return false; }
  std::vector<Phase> plan(const Topology& topology, int cores_per_chip, CollectiveOp op,
                          const std::vector<int>& group, double bytes) const override {
    const int slices = topology.slices();
    if (slices <= 1 || op != CollectiveOp::AllReduce || group.empty() || bytes <= 0) return {};
    // The busiest host's rings stand for the others (each host's card is its own).
    std::map<int, int> per_host;
    for (int core : group) ++per_host[topology.host(core / cores_per_chip)];
    int busiest = per_host.begin()->first;
    for (const auto& [host, n] : per_host)
      if (n > per_host[busiest]) busiest = host;
    Phase phase{"all_reduce dcn", {}};
    for (int core : group) {
      const int host = topology.host(core / cores_per_chip);
      PlannedRing ring;
      ring.cores = {core, dcn_endpoint(host)};
      ring.chunk_bytes = bytes / double(slices);
      ring.steps = 2 * (slices - 1);
      ring.representative = host == busiest;
      phase.rings.push_back(std::move(ring));
    }
    return {phase};
  }
};

}  // namespace

std::unique_ptr<CollectiveAlgorithm> make_dcn_rings() { return std::make_unique<DcnRings>(); }

}  // namespace tpusim::sim
