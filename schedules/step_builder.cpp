#include "schedules/step_builder.hpp"

namespace tpusim {

using sim::MemoryCategory;
using sim::MemoryEffect;

StepBuilder::StepBuilder(const Study& study, int cores)
    : study_(study), cost_model_(study.hardware.core), graph_(cores) {
  for (const auto& layer : study.model.layers) update_s_.push_back(cost_model_.cost(study.optimizer.update_op(layer)).seconds);
}

const LayerCost& StepBuilder::cost(int layer, std::int64_t batch) {
  auto key = std::make_pair(layer, batch);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const LayerWork w = study_.model.layers[layer].work(batch);
  LayerCost c;
  for (const auto& op : w.forward) {
    const OpCost oc = cost_model_.cost(op);
    c.forward_s += oc.seconds;
    c.forward_flops += oc.model_flops;
    c.forward_hardware_flops += oc.hardware_flops;
  }
  for (const auto& op : w.backward) {
    const OpCost oc = cost_model_.cost(op);
    c.backward_s += oc.seconds;
    c.backward_flops += oc.model_flops;
    c.backward_hardware_flops += oc.hardware_flops;
  }
  c.stash_bytes = w.stash_bytes;
  c.workspace_bytes = w.workspace_bytes;
  c.output_bytes = w.output_bytes;
  return cache_.emplace(key, c).first->second;
}

void StepBuilder::resident_weights(int core, int first, int last, double slot_fraction) {
  for (int l = first; l < last; ++l) {
    const Layer& layer = study_.model.layers[l];
    graph_.resident(core, MemoryCategory::Weights, 4.0 * double(layer.params()));
    graph_.resident(core, MemoryCategory::Optimizer, 4.0 * study_.optimizer.slot_elements(layer) * slot_fraction);
  }
}

int StepBuilder::forward(int core, int layer, std::int64_t batch, int prev) {
  const LayerCost& c = cost(layer, batch);
  sim::Task t;
  t.kind = sim::TaskKind::Compute;
  t.name = "fwd " + study_.model.layers[layer].name + " core " + std::to_string(core);
  t.phase = "forward";
  t.core = core;
  t.layer = layer;
  t.seconds = c.forward_s;
  t.model_flops = c.forward_flops;
  t.hardware_flops = c.forward_hardware_flops;
  t.memory = {{core, MemoryCategory::Activations, c.stash_bytes, MemoryEffect::When::Start},
              {core, MemoryCategory::Workspace, c.workspace_bytes, MemoryEffect::When::Start},
              {core, MemoryCategory::Workspace, -c.workspace_bytes, MemoryEffect::When::End}};
  model_flops_ += c.forward_flops;
  hardware_flops_ += c.forward_hardware_flops;
  const int id = graph_.add(std::move(t));
  if (prev >= 0) graph_.depend(prev, id);
  return id;
}

int StepBuilder::backward(int core, int layer, std::int64_t batch, int prev) {
  const LayerCost& c = cost(layer, batch);
  sim::Task t;
  t.kind = sim::TaskKind::Compute;
  t.name = "bwd " + study_.model.layers[layer].name + " core " + std::to_string(core);
  t.phase = "backward";
  t.core = core;
  t.layer = layer;
  t.seconds = c.backward_s;
  t.model_flops = c.backward_flops;
  t.hardware_flops = c.backward_hardware_flops;
  t.memory = {{core, MemoryCategory::Gradients, gradient_bytes(layer), MemoryEffect::When::Start},
              {core, MemoryCategory::Workspace, c.workspace_bytes, MemoryEffect::When::Start},
              {core, MemoryCategory::Workspace, -c.workspace_bytes, MemoryEffect::When::End},
              {core, MemoryCategory::Activations, -c.stash_bytes, MemoryEffect::When::End}};
  model_flops_ += c.backward_flops;
  hardware_flops_ += c.backward_hardware_flops;
  const int id = graph_.add(std::move(t));
  if (prev >= 0) graph_.depend(prev, id);
  return id;
}

int StepBuilder::update(int core, int first, int last, double fraction) {
  sim::Task t;
  t.kind = sim::TaskKind::Compute;
  t.name = "update core " + std::to_string(core);
  t.phase = "update";
  t.core = core;
  for (int l = first; l < last; ++l) {
    // The update's duration scales with the shard; the fixed per-op overhead does not.
    const double overhead = study_.hardware.core.op_overhead_s;
    t.seconds += (update_s_[l] - overhead) * fraction + overhead;
    t.memory.push_back({core, MemoryCategory::Gradients, -gradient_bytes(l), MemoryEffect::When::End});
  }
  return graph_.add(std::move(t));
}

BuiltStep StepBuilder::finish() {
  BuiltStep step;
  step.graph = std::move(graph_);
  step.model_flops = model_flops_;
  step.hardware_flops = hardware_flops_;
  return step;
}

}  // namespace tpusim
