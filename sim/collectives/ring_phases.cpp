#include "sim/collectives/ring_phases.hpp"

#include <map>

namespace tpusim::sim::rings {

std::string half_name(Half half) { return half == Half::ReduceScatter ? "reduce_scatter" : "all_gather"; }

std::vector<std::vector<int>> lines_along(const Topology& topology, const GroupShape& shape, int dim) {
  // Key a chip by its other coordinates, dimension 0 fastest (the highest dimension compared
  // first); within a line the chips come by their coordinate along `dim`.
  std::map<std::vector<int>, std::map<int, int>> lines;
  for (const auto& [chip, cores] : shape.cores_of_chip) {
    std::vector<int> key;
    for (int d = topology.dims() - 1; d >= 0; --d)
      if (d != dim) key.push_back(topology.coord(chip, d));
    lines[key][topology.coord(chip, dim)] = cores.front();
  }
  std::vector<std::vector<int>> out;
  for (const auto& [key, line] : lines) {
    out.emplace_back();
    for (const auto& [pos, leader] : line) out.back().push_back(leader);
  }
  return out;
}

void add_line_rings(Phase& phase, const Topology& topology, int cores_per_chip,
                    const std::vector<std::vector<int>>& lines, int dim, double payload) {
  if (lines.empty() || lines.front().size() < 2) return;
  const double p = double(lines.front().size());
  for (std::size_t li = 0; li < lines.size(); ++li) {
    std::vector<int> chips;
    std::map<int, int> leader_of_chip;
    for (int core : lines[li]) {
      chips.push_back(core / cores_per_chip);
      leader_of_chip[core / cores_per_chip] = core;
    }
    for (const Ring& ring : topology.rings_along(chips, dim)) {
      PlannedRing pr;
      for (int chip : ring.order) pr.cores.push_back(leader_of_chip.at(chip));
      pr.chunk_bytes = payload * ring.share / p;
      pr.steps = int(p) - 1;
      pr.representative = li == 0;
      phase.rings.push_back(std::move(pr));
    }
  }
}

void add_onchip_phase(std::vector<Phase>& plan, Half half, const GroupShape& shape, double bytes) {
  if (shape.cores_of_chip.empty() || shape.cores_of_chip.begin()->second.size() < 2) return;
  Phase phase;
  phase.name = half_name(half) + " on-chip";
  const double c = double(shape.cores_of_chip.begin()->second.size());
  bool first = true;
  for (const auto& [chip, cores] : shape.cores_of_chip) {
    phase.rings.push_back(PlannedRing{cores, bytes / c, int(c) - 1, first, {}, false});
    first = false;
  }
  plan.push_back(std::move(phase));
}

bool grid_group(const Topology& topology, int cores_per_chip, const std::vector<int>& group) {
  return group_shape(topology, cores_per_chip, group).grid;
}

bool GridRings::supports(const Topology& topology, int cores_per_chip, CollectiveOp op,
                         const std::vector<int>& group) const {
  return op != CollectiveOp::AllToAll && grid_group(topology, cores_per_chip, group);
}

std::vector<Phase> GridRings::plan(const Topology& topology, int cores_per_chip, CollectiveOp op,
                                   const std::vector<int>& group, double bytes) const {
  std::vector<Phase> plan;
  if (group.size() < 2 || bytes <= 0) return plan;
  const GroupShape shape = group_shape(topology, cores_per_chip, group);
  if (op != CollectiveOp::AllGather) {
    add_onchip_phase(plan, Half::ReduceScatter, shape, bytes);
    torus_phases(topology, cores_per_chip, Half::ReduceScatter, shape, bytes, plan);
  }
  if (op != CollectiveOp::ReduceScatter) {
    torus_phases(topology, cores_per_chip, Half::AllGather, shape, bytes, plan);
    add_onchip_phase(plan, Half::AllGather, shape, bytes);
  }
  return plan;
}

}  // namespace tpusim::sim::rings
