#include "schedules/step_bound.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace tpusim {
namespace {

/// The fastest link (on-chip or ICI) and the shortest latency: what a floor may assume of any hop.
double fastest_bandwidth(const Study& s) {
  return std::max(s.hardware.chip.onchip_bandwidth_bytes_per_s, s.hardware.chip.ici_bandwidth_bytes_per_s);
}
double shortest_latency(const Study& s) {
  return std::min(s.hardware.chip.onchip_latency_s, s.hardware.chip.ici_latency_s);
}

}  // namespace

sim::CollectivePlanner collective_planner(const Study& s) {
  return sim::CollectivePlanner(slices_topology(s.slice, s.hardware.chip, s.slices), s.hardware.chip.cores,
                                s.hardware.chip.collective_algorithms,
                                s.hardware.chip.latency_collective_max_bytes);
}

namespace {

/// The floor of a collective's phases: each ring's steps at the fastest link and shortest hop (a
/// step over the data-center network at a host card's rate and latency, the card to itself).
double phases_floor(const Study& s, const std::vector<sim::Phase>& phases, bool latency) {
  const double bandwidth = fastest_bandwidth(s), hop = latency ? shortest_latency(s) : 0.0;
  const DcnSpec& dcn = s.hardware.dcn;
  double floor = 0;
  for (const auto& phase : phases) {
    double slowest = 0;
    for (const auto& ring : phase.rings) {
      const double step = sim::crosses_slices(ring) ? ring.chunk_bytes / dcn.nic_bandwidth_bytes_per_s +
                                                          (latency ? dcn.latency_s : 0.0)
                                                    : ring.chunk_bytes / bandwidth + hop;
      slowest = std::max(slowest, ring.steps * step);
    }
    floor += slowest;
  }
  return floor;
}

}  // namespace

double collective_floor(const Study& s, const sim::CollectivePlanner& planner, sim::CollectiveOp op,
                        const std::vector<int>& group, double bytes, bool latency, bool across_slices) {
  if (!across_slices) return phases_floor(s, planner.plan(op, group, bytes), latency);
  sim::Task t;
  t.kind = sim::TaskKind::Collective;
  t.op = op;
  t.bytes = bytes;
  t.across_slices = true;
  return phases_floor(s, planner.plan(t, group), latency);
}

namespace {

/// A task's floor: a compute task takes its time; a transfer moves its bytes over one link at the
/// fastest bandwidth after the shortest latency; a collective, collective_floor.
double task_floor(const Study& s, const sim::CollectivePlanner& planner, const sim::Task& t) {
  if (t.kind == sim::TaskKind::Compute) return t.seconds;
  if (t.kind == sim::TaskKind::Transfer && t.src_core == t.dst_core) return t.seconds;  // a host DMA
  if (t.kind == sim::TaskKind::Transfer)
    return t.bytes > 0 ? t.bytes / fastest_bandwidth(s) + shortest_latency(s) : 0.0;
  return phases_floor(s, planner.plan(t, t.collective_groups().front()), true);
}

}  // namespace

StepBound graph_bound(const Study& s, const BuiltStep& step) {
  StepBound b;
  const auto& graph = step.graph;
  const sim::CollectivePlanner planner = collective_planner(s);
  std::vector<double> floors;
  // A step repeats its collectives (every micro-batch's, every layer's): each planned once.
  std::map<std::tuple<sim::CollectiveOp, std::vector<int>, double, bool>, double> collective_floors;
  for (int id = 0; id < graph.size(); ++id) {
    const sim::Task& t = graph.task(id);
    if (t.kind != sim::TaskKind::Collective) {
      floors.push_back(task_floor(s, planner, t));
      continue;
    }
    const auto key = std::make_tuple(t.op, t.collective_groups().front(), t.bytes, t.across_slices);
    auto it = collective_floors.find(key);
    if (it == collective_floors.end()) it = collective_floors.emplace(key, task_floor(s, planner, t)).first;
    floors.push_back(it->second);
  }
  for (int core = 0; core < graph.cores(); ++core) b.cores_used += graph.program(core).empty() ? 0 : 1;
  b.cores_used *= step.replicas_represented;
  // The longest chain of dependent work (each core's program order included, so never less
  // than the busiest core's compute and the partial sums it waits for): a pipeline's fill and
  // drain, a core's waits.
  b.seconds = graph.critical_path(floors);
  if (const int core = graph.most_resident_core(); core >= 0) {
    b.resident_bytes = graph.resident_bytes(core);
    b.resident_by = graph.resident()[std::size_t(core)];
  }
  for (double f : graph.memory_floors()) b.floor_bytes = std::max(b.floor_bytes, f);
  return b;
}

StepBound Schedule::bound(const Study& study) const { return graph_bound(study, representative_step(study)); }

}  // namespace tpusim
