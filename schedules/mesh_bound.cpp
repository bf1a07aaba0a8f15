// A mesh layout's bound (MeshSchedule::bound) from its SPMD program alone: a task graph of every
// core is costly on a large slice, and every core runs the same program.
#include <map>
#include <tuple>

#include "schedules/mesh.hpp"
#include "schedules/step_bound.hpp"

namespace tpusim {
namespace {

/// Collective floors on a mesh's groups: layers repeat their events, so each group and each
/// collective's floor is found once.
class FloorCache {
 public:
  FloorCache(const Study& s, const MeshSchedule& mesh)
      : s_(s), mesh_(mesh), planner_(collective_planner(s)) {}
  /// The floor of `op` on `bytes` over the first group of `ev`'s family (a weight-gradient
  /// reduction over the replicas continuing across the slices).
  double operator()(sim::CollectiveOp op, const mesh::Event& ev, double bytes, bool blocking) {
    auto g = groups_.find({ev.mesh_dims, ev.block_dim, ev.block});
    if (g == groups_.end())
      g = groups_.emplace(std::make_tuple(ev.mesh_dims, ev.block_dim, ev.block), mesh_.groups(ev).front())
              .first;
    const bool across =
        ev.kind == mesh::Event::GradientAllReduce && s_.slices > 1 && mesh_.over_replicas(ev.mesh_dims);
    const auto key = std::make_tuple(int(op), g->second, bytes, blocking, across);
    auto f = floors_.find(key);
    if (f == floors_.end())
      f = floors_.emplace(key, collective_floor(s_, planner_, op, g->second, bytes, blocking, across)).first;
    return f->second;
  }

 private:
  const Study& s_;
  const MeshSchedule& mesh_;
  const sim::CollectivePlanner planner_;
  std::map<std::tuple<std::vector<std::string>, std::string, int>, std::vector<int>> groups_;
  std::map<std::tuple<int, std::vector<int>, double, bool, bool>, double> floors_;
};

/// A layer's weight-gradient reductions by the family of mesh dimensions `cut` leaves them
/// (the event standing for the family, and the family's bytes), those it leaves none left out.
template <class Cut>
std::vector<std::pair<mesh::Event, double>> families(const std::vector<mesh::Event>& backward, Cut cut) {
  std::map<std::vector<std::string>, std::pair<mesh::Event, double>> by_dims;
  for (const auto& ev : backward)
    if (ev.kind == mesh::Event::GradientAllReduce && !cut(ev).mesh_dims.empty())
      by_dims.try_emplace(cut(ev).mesh_dims, cut(ev), 0.0).first->second.second += ev.bytes;
  std::vector<std::pair<mesh::Event, double>> out;
  for (auto& [dims, family] : by_dims) out.push_back(std::move(family));
  return out;
}

/// The weight-gradient reductions that wait for the whole backward, each family of mesh
/// dimensions (and block) floored once at its bytes: the tail may combine them into fewer
/// collectives, which moves no fewer bytes at no higher rate.
class WaitingReductions {
 public:
  void add(const mesh::Event& over, double bytes) {
    families_.try_emplace({over.mesh_dims, over.block_dim, over.block}, over, 0.0).first->second.second +=
        bytes;
  }
  double floor(FloorCache& cache) const {
    double total = 0;
    for (const auto& [key, family] : families_)
      total += cache(sim::CollectiveOp::ReduceScatter, family.first, family.second, false);
    return total;
  }

 private:
  std::map<std::tuple<std::vector<std::string>, std::string, int>, std::pair<mesh::Event, double>> families_;
};

/// A mesh layout's bound from its SPMD program alone (a task graph of every core is costly on a
/// large slice): one core runs every compute piece (a re-materialized layer's recompute too) and
/// waits for every blocking collective (a fully sharded layer's weight gathers, in program order);
/// its weight-gradient reductions, when they wait for the whole backward, add their bandwidth terms.
/// With gradient accumulation, every micro-batch's program, then the reductions once.
double program_bound(const Study& s, const MeshSchedule& mesh,
                     const std::vector<mesh::LayerProgram>& programs) {
  using E = mesh::Event;
  FloorCache floor(s, mesh);
  double bound = 0;           // per micro-batch
  WaitingReductions waiting;  // once
  const Keep remat = mesh.remat();
  const bool overlap = s.hardware.core.gradient_collectives_overlap_backward;
  // Prefetched fully sharded weights: gathers and reduce-scatters behind the compute.
  const bool behind = mesh.fully_sharded() && mesh.prefetches_gathers();
  const double gradient_wire = mesh.wire().gradients_on_wire(1.0);
  const double gathered_wire = mesh.wire().gathered_on_wire(1.0);
  auto add_floor = [&](sim::CollectiveOp op, const mesh::Event& ev, double bytes, bool blocking) {
    bound += floor(op, ev, bytes, blocking);
  };
  mesh::Event input_gather{};
  input_gather.mesh_dims = {mesh.layer_input_split()};
  // Weight-update sharding cuts pieces over all but the data dimension (data_parallel_dim): the
  // gathers and reduce-scatters span the others; the pieces' all-reduce over it is left out (a floor).
  const bool sharded = mesh.weight_update() != "replicated";
  mesh::Event pieces{};  // the event over those dimensions (only its collective fields), reused
  auto cut = [&](const mesh::Event& ev) -> const mesh::Event& {
    if (mesh.data_parallel_dim().empty()) return ev;
    pieces.kind = ev.kind;
    pieces.mesh_dims = mesh::scatter_dims(ev.mesh_dims, mesh.data_parallel_dim());
    return pieces;
  };
  for (const auto& program : programs) {
    // layer_input_split: the kept pieces of the layer's input gathered before its recompute.
    if (!mesh.layer_input_split().empty() && program.input_bytes > 0)
      add_floor(sim::CollectiveOp::AllGather, input_gather, program.input_bytes, true);
    // Re-materialized: the forward's compute (or the part its save policy recomputes) runs again.
    for (const auto& ev : program.forward)
      if (ev.kind == E::Compute && remat != Keep::All)
        bound += remat == Keep::Input ? ev.seconds : ev.partial_seconds;
    // Fully sharded in program order: the layer's weights gathered, twice, one gather per family
    // of mesh dimensions its gradients are cut over (as the player gathers them).
    if (mesh.fully_sharded() && !behind)
      for (const auto& [family, bytes] : families(program.backward, cut))
        for (int pass = 0; pass < 2; ++pass)
          add_floor(sim::CollectiveOp::AllGather, family, bytes * gathered_wire, true);
    for (const auto* events : {&program.forward, &program.backward})
      for (const auto& ev : *events) {
        if (ev.kind == E::Compute) {
          bound += ev.seconds;
          continue;
        }
        const bool gradient = ev.kind == E::GradientAllReduce;
        if ((gradient && (overlap || behind)) || ev.behind) continue;  // behind the compute
        const auto blocking = mesh::blocking_collective(ev.kind);
        if (!blocking && !gradient) continue;  // a halo
        if (!gradient) {
          bound += floor(blocking->op, ev, ev.bytes, true);
          continue;
        }
        const bool pieces_only = sharded && cut(ev).mesh_dims.empty();  // an all-reduce over it
        const mesh::Event& over = sharded && !pieces_only ? cut(ev) : ev;
        waiting.add(over, ev.bytes * gradient_wire);
      }
  }
  return bound * mesh.accumulation_steps() + waiting.floor(floor);
}

}  // namespace

StepBound MeshSchedule::bound(const Study& s) const {
  StepBound b;
  const auto programs = this->programs(s);
  b.seconds = program_bound(s, *this, programs);
  b.cores_used = cores();
  // Every core holds the same shards of the weights and optimizer slots all step.
  for (std::size_t l = 0; l < programs.size(); ++l) {
    const auto held = mesh::resident_shards(programs[l], s.model, l,
                                            s.optimizer.slot_elements(s.model.layers[l]), fully_sharded());
    b.resident_by[int(sim::MemoryCategory::Weights)] += held.weights;
    b.resident_by[int(sim::MemoryCategory::Optimizer)] += held.optimizer;
  }
  for (double bytes : b.resident_by) b.resident_bytes += bytes;
  // Every layer's kept activations are held at once at the end of the forward, beside the
  // last layer's forward transient.
  double kept = 0;
  for (const auto& p : programs) kept += kept_in_forward(p) - offloaded(p);  // offloaded: on the host
  b.floor_bytes = b.resident_bytes + kept + (programs.empty() ? 0.0 : programs.back().workspace_bytes);
  return b;
}

}  // namespace tpusim
