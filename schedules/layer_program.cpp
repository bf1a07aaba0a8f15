#include "schedules/layer_program.hpp"

#include "schedules/mesh_lowering.hpp"

namespace tpusim {

const std::vector<std::string>& tensor_parallel_dims() {
  static const std::vector<std::string> dims = {"d_ff", "heads", "d_kv", "vocab"};
  return dims;
}

namespace {

/// A program's compute summed.
void add_events(const std::vector<mesh::Event>& events, double& seconds, double& hbm_seconds, double& flops,
                double& hardware_flops) {
  for (const auto& ev : events) {
    if (ev.kind != mesh::Event::Compute) continue;
    seconds += ev.seconds;
    hbm_seconds += ev.hbm_seconds;
    flops += ev.model_flops;
    hardware_flops += ev.hardware_flops;
  }
}

}  // namespace

mesh::LayerProgram stage_layer_program(const Layer& layer, std::int64_t batch, const StageSharding* s,
                                       const CostModel& cost, double act, const SavePolicy& saves) {
  if (!s) {
    return mesh::lower_layer(layer.named_ops(batch), Sharding::whole(layer.lanes, layer.weight_bytes), cost,
                             act, layer.name, layer.model_input, false, 1, saves);
  }
  // The reductions over the replicas do not depend on how many there are: one program for every
  // count (weight-update sharding's pieces are cut from it: tail_programs).
  Sharding sharding{s->layout, s->sizes, cost.core().activation_tile_lanes(), layer.weight_bytes};
  if (s->over_replicas) sharding.replica_dim = "replica";
  return mesh::lower_layer(layer.named_ops(batch), sharding, cost, act, layer.name, layer.model_input, false,
                           1, saves);
}

LayerCost layer_program_cost(const Layer& layer, std::int64_t batch, const StageSharding* s,
                             const CostModel& cost, double act, const SavePolicy& saves) {
  const Sharding whole = Sharding::whole(layer.lanes, layer.weight_bytes);
  const mesh::LayerProgram p = stage_layer_program(layer, batch, s, cost, act, saves);
  const LayerBoundary boundary = layer.boundary(batch);
  LayerCost c;
  add_events(p.forward, c.forward_s, c.forward_hbm_s, c.forward_flops, c.forward_hardware_flops);
  add_events(p.backward, c.backward_s, c.backward_hbm_s, c.backward_flops, c.backward_hardware_flops);
  // A save policy ("save_dots"): the recompute runs the forward ops it needs.
  for (const auto& ev : p.forward) {
    c.partial_forward_s += ev.partial_seconds;
    c.partial_forward_hbm_s += ev.partial_hbm_seconds;
    c.partial_forward_hardware_flops += ev.partial_hardware_flops;
  }
  c.saved_output_bytes = p.saved_output_bytes;
  c.stash_bytes = p.kept_bytes;
  c.workspace_bytes = p.workspace_bytes;
  c.backward_workspace_bytes = p.backward_workspace_bytes;
  c.input_bytes = boundary_bytes(boundary.in, whole);  // whole on every core of the group
  c.output_bytes = boundary_bytes(boundary.out, whole);
  c.weight_fraction = p.total_weight_elements > 0 ? p.weight_elements / p.total_weight_elements : 1.0;
  return c;
}

}  // namespace tpusim
