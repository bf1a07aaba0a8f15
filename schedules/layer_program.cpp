#include "schedules/layer_program.hpp"

#include <optional>

#include "schedules/mesh_lowering.hpp"

namespace tpusim {

const std::vector<std::string>& tensor_parallel_dims() {
  static const std::vector<std::string> dims = {"d_ff", "heads", "d_kv", "vocab"};
  return dims;
}

namespace {

/// A blocking collective of a program over the group (none for compute or a weight-gradient
/// reduction).
std::optional<GroupCollective> group_collective(const mesh::Event& ev) {
  if (ev.kind == mesh::Event::Halo)  // excluded by tensor_parallel_dims(): no image is split
    throw SimulationError("tensor parallelism: a halo exchange in " + ev.name);
  if (const auto b = mesh::blocking_collective(ev.kind)) return GroupCollective{b->op, ev.bytes};
  return std::nullopt;
}

/// The blocking collectives of a program, in order, and its compute summed (a core runs its
/// pieces and the collectives between them one after another, so their order within a stage's
/// task does not change its length).
void add_events(const std::vector<mesh::Event>& events, double& seconds, double& hbm_seconds, double& flops,
                double& hardware_flops, std::vector<GroupCollective>& collectives, double& gradient_bytes) {
  for (const auto& ev : events) {
    if (ev.kind == mesh::Event::Compute) {
      seconds += ev.seconds;
      hbm_seconds += ev.hbm_seconds;
      flops += ev.model_flops;
      hardware_flops += ev.hardware_flops;
    } else if (ev.kind == mesh::Event::GradientAllReduce) {
      gradient_bytes += ev.bytes;
    } else if (const auto g = group_collective(ev)) {
      collectives.push_back(*g);
    }
  }
}

}  // namespace

LayerCost layer_program_cost(const Layer& layer, std::int64_t batch, const StageSharding* s,
                             const CostModel& cost, double act) {
  const Sharding whole = Sharding::whole(layer.lanes);
  const Sharding sharding = s ? Sharding{s->layout, s->sizes, cost.core().activation_tile_lanes()} : whole;
  const mesh::LayerProgram p =
      mesh::lower_layer(layer.named_ops(batch), sharding, cost, act, layer.name, layer.model_input, false);
  const LayerBoundary boundary = layer.boundary(batch);
  LayerCost c;
  add_events(p.forward, c.forward_s, c.forward_hbm_s, c.forward_flops, c.forward_hardware_flops,
             c.forward_collectives, c.group_gradient_bytes);
  add_events(p.backward, c.backward_s, c.backward_hbm_s, c.backward_flops, c.backward_hardware_flops,
             c.backward_collectives, c.group_gradient_bytes);
  // "save_dots": the recompute runs the forward ops it needs, and their collectives (not a kept
  // matmul's partial sums).
  for (const auto& ev : p.forward) {
    c.non_dot_forward_s += ev.non_dot_seconds;
    c.non_dot_forward_hbm_s += ev.non_dot_hbm_seconds;
    c.non_dot_forward_hardware_flops += ev.non_dot_hardware_flops;
    if (const auto g = group_collective(ev); g && !ev.kept_by_save_dots)
      c.non_dot_forward_collectives.push_back(*g);
  }
  c.dot_output_bytes = p.dot_output_bytes;
  c.stash_bytes = p.kept_bytes;
  c.workspace_bytes = p.workspace_bytes;
  c.backward_workspace_bytes = p.backward_workspace_bytes;
  c.input_bytes = boundary_bytes(boundary.in, whole);  // whole on every core of the group
  c.output_bytes = boundary_bytes(boundary.out, whole);
  c.weight_fraction = p.total_weight_elements > 0 ? p.weight_elements / p.total_weight_elements : 1.0;
  return c;
}

}  // namespace tpusim
