#include "schedules/step_bound.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace tpusim {
namespace {

/// What a floor may assume of a flow on the planner's torus: the ICI's bandwidth (times the
/// fastest link's scale where a what-if speeds a link up) and latency per hop, and the on-chip
/// link's between two cores of one chip (only chips of several devices have one: a megacore
/// chip's device is the chip).
struct HopFloor {
  const sim::CollectivePlanner& planner;
  double ici_bandwidth = 0, ici_latency = 0, onchip_bandwidth = 0, onchip_latency = 0;
  HopFloor(const Study& s, const sim::CollectivePlanner& p)
      : planner(p),
        ici_bandwidth(s.hardware.chip.ici_bandwidth_bytes_per_s),
        ici_latency(s.hardware.chip.ici_latency_s),
        onchip_bandwidth(s.hardware.chip.onchip_bandwidth_bytes_per_s),
        onchip_latency(s.hardware.chip.onchip_latency_s) {
    double fastest = 1;
    for (double scale : s.network.link_bandwidth_scale) fastest = std::max(fastest, scale);
    ici_bandwidth *= fastest;
  }
  /// No flow of `bytes` from core `from` to core `to` arrives sooner: over the on-chip link
  /// between cores of one chip, else over the shortest route's hops (a flow takes one route:
  /// its latency is every hop's, its rate one link's at most).
  double flow(int from, int to, double bytes, bool latency) const {
    const int a = from / planner.cores_per_chip(), b = to / planner.cores_per_chip();
    if (a == b) return bytes / onchip_bandwidth + (latency ? onchip_latency : 0.0);
    return bytes / ici_bandwidth + (latency ? planner.topology().hops(a, b) * ici_latency : 0.0);
  }
};

}  // namespace

sim::CollectivePlanner collective_planner(const Study& s) {
  return sim::CollectivePlanner(slices_topology(s.slice, s.hardware.chip, s.slices), s.hardware.chip.cores,
                                s.hardware.chip.collective_algorithms,
                                s.hardware.chip.latency_collective_max_bytes);
}

namespace {

/// The floor of a collective's phases: each ring's steps at its slowest member's floor (a step
/// ends when every member's chunk has arrived; a step over the data-center network at a host
/// card's rate and latency, the card to itself).
double phases_floor(const Study& s, const HopFloor& hop, const std::vector<sim::Phase>& phases,
                    bool latency) {
  const DcnSpec& dcn = s.hardware.dcn;
  double floor = 0;
  for (const auto& phase : phases) {
    double slowest = 0;
    for (const auto& ring : phase.rings) {
      double step = 0;
      if (sim::crosses_slices(ring)) {
        step = ring.chunk_bytes / dcn.nic_bandwidth_bytes_per_s + (latency ? dcn.latency_s : 0.0);
      } else {
        const std::size_t n = ring.cores.size();
        for (std::size_t i = 0; i < n; ++i)
          step = std::max(step, hop.flow(ring.cores[i], ring.cores[(i + 1) % n], ring.chunk_bytes, latency));
      }
      slowest = std::max(slowest, ring.steps * step);
    }
    floor += slowest;
  }
  return floor;
}

}  // namespace

double collective_floor(const Study& s, const sim::CollectivePlanner& planner, sim::CollectiveOp op,
                        const std::vector<int>& group, double bytes, bool latency, bool across_slices) {
  if (!across_slices) return phases_floor(s, HopFloor(s, planner), planner.plan(op, group, bytes), latency);
  sim::Task t;
  t.kind = sim::TaskKind::Collective;
  t.op = op;
  t.bytes = bytes;
  t.across_slices = true;
  return phases_floor(s, HopFloor(s, planner), planner.plan(t, group), latency);
}

namespace {

/// A task's floor: a compute task takes its time; a transfer, its flow's floor (HopFloor); a
/// collective, collective_floor.
double task_floor(const Study& s, const HopFloor& hop, const sim::Task& t) {
  if (t.kind == sim::TaskKind::Compute) return t.seconds;
  if (t.kind == sim::TaskKind::Transfer && t.src_core == t.dst_core) return t.seconds;  // a host DMA
  if (t.kind == sim::TaskKind::Transfer)
    return t.bytes > 0 ? hop.flow(t.src_core, t.dst_core, t.bytes, true) : 0.0;
  return phases_floor(s, hop, hop.planner.plan(t, t.collective_groups().front()), true);
}

}  // namespace

StepBound graph_bound(const Study& s, const BuiltStep& step) {
  StepBound b;
  const auto& graph = step.graph;
  const sim::CollectivePlanner planner = collective_planner(s);
  const HopFloor hop(s, planner);
  std::vector<double> floors;
  // A step repeats its collectives (every micro-batch's, every layer's): each planned once.
  std::map<std::tuple<sim::CollectiveOp, std::vector<int>, double, bool>, double> collective_floors;
  for (int id = 0; id < graph.size(); ++id) {
    const sim::Task& t = graph.task(id);
    if (t.kind != sim::TaskKind::Collective) {
      floors.push_back(task_floor(s, hop, t));
      continue;
    }
    const auto key = std::make_tuple(t.op, t.collective_groups().front(), t.bytes, t.across_slices);
    auto it = collective_floors.find(key);
    if (it == collective_floors.end()) it = collective_floors.emplace(key, task_floor(s, hop, t)).first;
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
