#include "sim/collectives/collective_algorithm.hpp"

#include <algorithm>
#include <set>

#include "hardware/errors.hpp"

namespace tpusim::sim {

GroupShape group_shape(const Topology& topology, int cores_per_chip, const std::vector<int>& group) {
  GroupShape s;
  for (int core : group) s.cores_of_chip[core / cores_per_chip].push_back(core);
  const std::size_t per = s.cores_of_chip.empty() ? 0 : s.cores_of_chip.begin()->second.size();
  std::vector<std::set<int>> coordinates(std::size_t(topology.dims()));
  for (auto& [chip, cores] : s.cores_of_chip) {
    std::sort(cores.begin(), cores.end());
    s.uniform = s.uniform && cores.size() == per;
    for (int d = 0; d < topology.dims(); ++d) coordinates[std::size_t(d)].insert(topology.coord(chip, d));
  }
  std::size_t combinations = 1;
  for (int d = 0; d < topology.dims(); ++d) {
    const auto& c = coordinates[std::size_t(d)];
    s.coordinates.emplace_back(c.begin(), c.end());
    combinations *= c.size();
    if (c.size() > 1) s.spanned.push_back(d);
  }
  s.grid = s.uniform && combinations == s.cores_of_chip.size();
  return s;
}

const CollectiveAlgorithm* find_collective_algorithm(const std::string& name) {
  const auto& all = collective_algorithms();
  auto it = all.find(name);
  return it == all.end() ? nullptr : it->second.get();
}

std::string collective_algorithms_problem(const std::vector<std::string>& names) {
  std::string known;
  for (const auto& [name, algorithm] : collective_algorithms()) known += (known.empty() ? "" : ", ") + name;
  bool general = false;
  for (const auto& n : names) {
    const CollectiveAlgorithm* a = find_collective_algorithm(n);
    if (!a) return "registered collective algorithms (" + known + "); \"" + n + "\" is none of them";
    general = general || (a->supports_any_group() && !a->latency_optimal());
  }
  if (!general)
    return "a list holding an algorithm that supports every group (snake_ring), for the groups the "
           "others do not support; registered: " +
           known;
  return "";
}

const CollectiveAlgorithm& collective_algorithm_for(const std::vector<std::string>& preference,
                                                    const Topology& topology, int cores_per_chip,
                                                    CollectiveOp op, const std::vector<int>& group,
                                                    double bytes, double latency_max_bytes) {
  for (const auto& name : preference) {
    const CollectiveAlgorithm* a = find_collective_algorithm(name);
    if (a && (!a->latency_optimal() || bytes <= latency_max_bytes) &&
        a->supports(topology, cores_per_chip, op, group))
      return *a;
  }
  // An op the hardware's list does not choose among (an all-to-all: its list names reductions
  // and gathers) runs the registered algorithm made for it.
  for (const auto& [name, a] : collective_algorithms())
    if (a->outside_lists() && a->supports(topology, cores_per_chip, op, group)) return *a;
  std::string listed;
  for (const auto& n : preference) listed += (listed.empty() ? "" : ", ") + n;
  throw SimulationError("no collective algorithm of chip.collective_algorithms (" + listed + ") supports a " +
                        to_string(op) + " over a group of " + std::to_string(group.size()) + " cores");
}

std::vector<Phase> CollectivePlanner::plan(const Task& t, const std::vector<int>& group) const {
  if (!across_slices(t)) return plan(t.op, group, t.bytes);
  using C = CollectiveOp;
  std::vector<Phase> phases = plan(C::ReduceScatter, group, t.bytes);
  const CollectiveAlgorithm& dcn = *find_collective_algorithm("dcn_rings");
  for (auto& phase :
       dcn.plan(topology_, cores_per_chip_, C::AllReduce, group, t.bytes / double(group.size())))
    phases.push_back(std::move(phase));
  if (t.op == C::AllReduce)
    for (auto& phase : plan(C::AllGather, group, t.bytes)) phases.push_back(std::move(phase));
  return phases;
}

std::string CollectivePlanner::algorithm_names(const Task& t, const std::vector<int>& group) const {
  if (!across_slices(t)) return algorithm(t.op, group, t.bytes).name();
  if (group.size() <= 1) return "dcn_rings";  // a lone replica in each slice
  std::string names = algorithm(CollectiveOp::ReduceScatter, group, t.bytes).name() + "+dcn_rings";
  if (t.op == CollectiveOp::AllReduce) {
    const std::string gather = algorithm(CollectiveOp::AllGather, group, t.bytes).name();
    if (names.rfind(gather + "+", 0) != 0) names += "+" + gather;
  }
  return names;
}

double plan_wire_bytes(const std::vector<Phase>& plan) {
  double total = 0;
  for (const auto& phase : plan)
    for (const auto& ring : phase.rings)
      total += ring.chunk_bytes * double(ring.steps) * double(ring.cores.size());
  return total;
}

}  // namespace tpusim::sim
