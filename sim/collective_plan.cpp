#include "sim/collective_plan.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace tpusim::sim {
namespace {

enum class Half { ReduceScatter, AllGather };

/// Adds the phase moving `payload` bytes along one dimension for every line of the grid.
/// `lines` holds the chip-level leader cores of each line, ordered by coordinate.
void add_dimension_phase(std::vector<Phase>& plan, const Torus& torus, int cores_per_chip, Half half, int dim,
                         const std::vector<std::vector<int>>& lines, double payload) {
  if (lines.empty() || lines.front().size() < 2) return;
  Phase phase;
  phase.name = std::string(half == Half::ReduceScatter ? "reduce_scatter " : "all_gather ") + (dim == 0 ? "x" : "y");
  const double p = double(lines.front().size());
  for (std::size_t li = 0; li < lines.size(); ++li) {
    std::vector<int> chips;
    for (int core : lines[li]) chips.push_back(core / cores_per_chip);
    std::map<int, int> leader_of_chip;
    for (int core : lines[li]) leader_of_chip[core / cores_per_chip] = core;
    for (const Ring& ring : torus.rings_along(chips, dim)) {
      PlannedRing pr;
      for (int chip : ring.order) pr.cores.push_back(leader_of_chip.at(chip));
      pr.chunk_bytes = payload * ring.share / p;
      pr.steps = int(p) - 1;
      pr.representative = li == 0;
      phase.rings.push_back(std::move(pr));
    }
  }
  plan.push_back(std::move(phase));
}

/// The on-chip half: each chip's group cores form a small ring over the on-chip link.
void add_onchip_phase(std::vector<Phase>& plan, Half half, const std::vector<std::vector<int>>& per_chip,
                      double bytes) {
  if (per_chip.empty() || per_chip.front().size() < 2) return;
  Phase phase;
  phase.name = half == Half::ReduceScatter ? "reduce_scatter on-chip" : "all_gather on-chip";
  const double c = double(per_chip.front().size());
  for (std::size_t i = 0; i < per_chip.size(); ++i) {
    phase.rings.push_back(PlannedRing{per_chip[i], bytes / c, int(c) - 1, i == 0});
  }
  plan.push_back(std::move(phase));
}

}  // namespace

std::vector<Phase> plan_collective(const Torus& torus, int cores_per_chip, CollectiveOp op,
                                   const std::vector<int>& group, double bytes) {
  std::vector<Phase> plan;
  if (group.size() < 2 || bytes <= 0) return plan;

  // Group cores by chip.
  std::map<int, std::vector<int>> by_chip;
  for (int core : group) by_chip[core / cores_per_chip].push_back(core);
  std::size_t per = by_chip.begin()->second.size();
  bool uniform = true;
  for (auto& [chip, cores] : by_chip) {
    std::sort(cores.begin(), cores.end());
    uniform = uniform && cores.size() == per;
  }

  std::set<int> xs, ys;
  for (const auto& [chip, _] : by_chip) {
    xs.insert(torus.coord(chip).x);
    ys.insert(torus.coord(chip).y);
  }
  const bool grid = uniform && xs.size() * ys.size() == by_chip.size();

  const bool reduce = op != CollectiveOp::AllGather;
  const bool gather = op != CollectiveOp::ReduceScatter;

  if (!grid) {
    // One ring through every core, chips in snake order, multi-hop flows.
    std::vector<int> order;
    std::vector<int> ylist(ys.begin(), ys.end());
    for (std::size_t yi = 0; yi < ylist.size(); ++yi) {
      std::vector<std::pair<int, int>> row;
      for (const auto& [chip, cores] : by_chip)
        if (torus.coord(chip).y == ylist[yi]) row.emplace_back(torus.coord(chip).x, chip);
      std::sort(row.begin(), row.end());
      if (yi % 2 == 1) std::reverse(row.begin(), row.end());
      for (const auto& [x, chip] : row)
        for (int core : by_chip[chip]) order.push_back(core);
    }
    const double p = double(order.size());
    if (reduce) plan.push_back(Phase{"reduce_scatter ring", {PlannedRing{order, bytes / p, int(p) - 1, true}}});
    if (gather) plan.push_back(Phase{"all_gather ring", {PlannedRing{order, bytes / p, int(p) - 1, true}}});
    return plan;
  }

  std::vector<std::vector<int>> per_chip;
  for (const auto& [chip, cores] : by_chip) per_chip.push_back(cores);
  // Rows (fixed y, x varying) and columns (fixed x) of chip leaders, ordered by coordinate.
  auto leader = [&](int x, int y) { return by_chip.at(torus.rank(Coord{x, y})).front(); };
  std::vector<std::vector<int>> rows, cols;
  for (int y : ys) {
    rows.emplace_back();
    for (int x : xs) rows.back().push_back(leader(x, y));
  }
  for (int x : xs) {
    cols.emplace_back();
    for (int y : ys) cols.back().push_back(leader(x, y));
  }
  const double shard = bytes / double(xs.size());
  const int cpc = cores_per_chip;
  if (reduce) {
    add_onchip_phase(plan, Half::ReduceScatter, per_chip, bytes);
    add_dimension_phase(plan, torus, cpc, Half::ReduceScatter, 0, rows, bytes);
    add_dimension_phase(plan, torus, cpc, Half::ReduceScatter, 1, cols, shard);
  }
  if (gather) {
    add_dimension_phase(plan, torus, cpc, Half::AllGather, 1, cols, shard);
    add_dimension_phase(plan, torus, cpc, Half::AllGather, 0, rows, bytes);
    add_onchip_phase(plan, Half::AllGather, per_chip, bytes);
  }
  return plan;
}

double plan_wire_bytes(const std::vector<Phase>& plan) {
  double total = 0;
  for (const auto& phase : plan)
    for (const auto& ring : phase.rings) total += ring.chunk_bytes * double(ring.steps) * double(ring.cores.size());
  return total;
}

}  // namespace tpusim::sim
