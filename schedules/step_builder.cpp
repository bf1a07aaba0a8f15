#include "schedules/step_builder.hpp"

#include <algorithm>

#include "schedules/functional_runtime.hpp"
#include "schedules/layer_program.hpp"

namespace tpusim {

using sim::MemoryCategory;
using sim::MemoryEffect;
using When = sim::MemoryEffect::When;

const LayerCost& LayerCostCache::get(int layer, std::int64_t batch, const std::string& sharding,
                                     const std::function<LayerCost()>& compute) {
  return lookup(costs_, {layer, batch, sharding}, compute);
}

const mesh::LayerProgram& LayerCostCache::program(int layer, std::int64_t batch, const std::string& sharding,
                                                  const std::function<mesh::LayerProgram()>& compute) {
  return lookup(programs_, {layer, batch, sharding}, compute);
}

StepBuilder::StepBuilder(const Study& study, int cores, FunctionalRuntime* functional)
    : study_(study),
      functional_(functional),
      cost_model_(study.hardware.core),
      saves_(study.schedule ? study.schedule->save_policy() : save_dots_policy()),
      graph_(cores),
      costs_(study.layer_costs ? study.layer_costs : std::make_shared<LayerCostCache>()) {
  for (const auto& layer : study.model.layers) {
    const OpCost update = cost_model_.cost(study.optimizer.update_op(study.model, layer));
    update_s_.push_back(update.seconds);
    update_hbm_s_.push_back(update.hbm_bound_s());
  }
  weight_fraction_.assign(study.model.layers.size(), 1.0);
  copy_.assign(study.model.layers.size(), TiedCopy{});
}

std::vector<StepBuilder::TiedCopy> StepBuilder::tied_copies(const std::vector<int>& stage_of_layer,
                                                            std::int64_t batch) {
  std::vector<TiedCopy> copies;
  const auto& layers = study_.model.layers;
  for (int l = 0; l < int(layers.size()); ++l) {
    const int owner = layers[std::size_t(l)].tied_to, stage = stage_of_layer[std::size_t(l)];
    if (owner < 0 || stage_of_layer[std::size_t(owner)] == stage) continue;
    const double bytes = study_.model.weight_bytes * program(l, batch).tied_elements;
    auto same = std::find_if(copies.begin(), copies.end(), [&](const TiedCopy& c) {
      return c.owner == owner && stage_of_layer[std::size_t(c.reader)] == stage;
    });
    if (same == copies.end())
      copies.push_back({l, owner, bytes});
    else
      same->bytes = std::max(same->bytes, bytes);
  }
  return copies;
}

void StepBuilder::hold(const std::vector<TiedCopy>& copies) {
  for (const TiedCopy& c : copies) copy_[std::size_t(c.reader)] = c;
}

double StepBuilder::resident_bytes(const TiedCopy& copy, double slot_fraction) const {
  const Layer& owner = study_.model.layers[std::size_t(copy.owner)];
  const double slots_per_weight = study_.optimizer.slot_elements(owner) / double(owner.params());
  return copy.bytes * (1.0 + slots_per_weight * slot_fraction);
}

void StepBuilder::split_layers(const StageSharding& s) {
  sharding_ = &s;
  sharding_key_.clear();
  for (const auto& [dim, mesh_dim] : s.layout) sharding_key_ += dim + "=" + mesh_dim + ";";
  for (const auto& [mesh_dim, size] : s.sizes) sharding_key_ += mesh_dim + ":" + std::to_string(size) + ";";
  cache_.clear();
  for (std::size_t l = 0; l < weight_fraction_.size(); ++l)
    weight_fraction_[l] = cost(int(l), 1).weight_fraction;
}

const LayerCost& StepBuilder::cost(int layer, std::int64_t batch) {
  // A layer that is the same computation as an earlier one has its costs.
  const int same_as = study_.model.layers[std::size_t(layer)].same_as;
  if (same_as >= 0) layer = same_as;
  const auto key = std::make_pair(layer, batch);
  if (auto it = cache_.find(key); it != cache_.end()) return *it->second;
  const LayerCost& c = costs_->get(layer, batch, cache_key(), [&] { return layer_cost(layer, batch); });
  cache_.emplace(key, &c);
  return c;
}

mesh::LayerProgram StepBuilder::program(int layer, std::int64_t batch) {
  const auto& layers = study_.model.layers;
  const int same_as = layers[std::size_t(layer)].same_as, source = same_as >= 0 ? same_as : layer;
  const mesh::LayerProgram& p = costs_->program(source, batch, cache_key(), [&] {
    mesh::LayerProgram lowered = stage_layer_program(layers[std::size_t(source)], batch, sharding_,
                                                     cost_model_, study_.model.activation_bytes, saves_);
    lowered.ops = Json::array();  // the per-op table is the mesh's report
    return lowered;
  });
  return mesh::renamed(p, layers[std::size_t(source)].name, layers[std::size_t(layer)].name);
}

LayerCost StepBuilder::layer_cost(int layer, std::int64_t batch) const {
  return layer_program_cost(study_.model.layers[std::size_t(layer)], batch, sharding_, cost_model_,
                            study_.model.activation_bytes, saves_);
}

LayerCost StepBuilder::cost(LayerRange layers, std::int64_t batch) {
  LayerCost sum;
  for (int l = layers.first; l < layers.last; ++l) {
    const LayerCost& c = cost(l, batch);
    sum.forward_s += c.forward_s;
    sum.backward_s += c.backward_s;
    sum.forward_hbm_s += c.forward_hbm_s;
    sum.backward_hbm_s += c.backward_hbm_s;
    sum.partial_forward_hbm_s += c.partial_forward_hbm_s;
    sum.forward_flops += c.forward_flops;
    sum.backward_flops += c.backward_flops;
    sum.forward_hardware_flops += c.forward_hardware_flops;
    sum.backward_hardware_flops += c.backward_hardware_flops;
    sum.stash_bytes += c.stash_bytes;
    sum.saved_output_bytes += c.saved_output_bytes;
    sum.partial_forward_s += c.partial_forward_s;
    sum.partial_forward_hardware_flops += c.partial_forward_hardware_flops;
    sum.group_gradient_bytes += c.group_gradient_bytes;
  }
  // A forward that keeps everything allocates the range's kept activations as it starts, so a
  // layer's transient adds beyond them only what the later layers have not kept yet.
  double later = 0;
  for (int l = layers.last - 1; l >= layers.first; --l) {
    const LayerCost& c = cost(l, batch);
    sum.workspace_bytes = std::max(sum.workspace_bytes, c.workspace_bytes - later);
    later += c.stash_bytes;
  }
  double freed = 0;  // kept by the layers whose backward has run
  for (int l = layers.last - 1; l >= layers.first; --l) {
    const LayerCost& c = cost(l, batch);
    sum.backward_workspace_bytes = std::max(sum.backward_workspace_bytes, c.backward_workspace_bytes - freed);
    freed += c.stash_bytes;
  }
  if (layers.size() > 0) {
    sum.input_bytes = cost(layers.first, batch).input_bytes;
    sum.output_bytes = cost(layers.last - 1, batch).output_bytes;
  }
  return sum;
}

double StepBuilder::gradient_bytes(LayerRange layers) const {
  double bytes = 0;
  for (int l = layers.first; l < layers.last; ++l)
    bytes += study_.model.weight_bytes * double(study_.model.layers[l].params()) *
                 weight_fraction_[std::size_t(l)] +
             copy_[std::size_t(l)].bytes;
  return bytes;
}

double StepBuilder::resident_bytes(LayerRange layers, double slot_fraction) const {
  double bytes = 0;
  for (int l = layers.first; l < layers.last; ++l) {
    const Layer& layer = study_.model.layers[l];
    const double share = weight_fraction_[std::size_t(l)];
    bytes += study_.model.weight_bytes * double(layer.params()) * share +
             study_.model.slot_bytes * study_.optimizer.slot_elements(layer) * slot_fraction * share;
    if (copy_[std::size_t(l)].bytes > 0) bytes += resident_bytes(copy_[std::size_t(l)], slot_fraction);
  }
  return bytes;
}

void StepBuilder::resident_weights(int core, LayerRange layers, double slot_fraction,
                                   double weight_fraction) {
  if (functional_) functional_->hold(core, layers);
  for (int l = layers.first; l < layers.last; ++l) {
    const Layer& layer = study_.model.layers[l];
    const double share = weight_fraction_[std::size_t(l)];
    graph_.resident(core, MemoryCategory::Weights,
                    study_.model.weight_bytes * double(layer.params()) * share * weight_fraction);
    graph_.resident(core, MemoryCategory::Optimizer,
                    study_.model.slot_bytes * study_.optimizer.slot_elements(layer) * slot_fraction * share);
    if (const TiedCopy& copy = copy_[std::size_t(l)]; copy.bytes > 0) {
      graph_.resident(core, MemoryCategory::Weights, copy.bytes * weight_fraction);
      graph_.resident(core, MemoryCategory::Optimizer, resident_bytes(copy, slot_fraction) - copy.bytes);
    }
  }
}

std::string StepBuilder::describe(LayerRange layers) const {
  const auto& ls = study_.model.layers;
  if (layers.size() == 1) return ls[layers.first].name;
  return ls[layers.first].name + ".." + ls[layers.last - 1].name;
}

sim::Task StepBuilder::compute_task(const char* phase, int core, LayerRange layers, Labels labels) const {
  sim::Task t;
  t.kind = sim::TaskKind::Compute;
  t.phase = phase;
  t.core = core;
  t.layer = layers.size() == 1 ? layers.first : -1;
  t.stage = labels.stage;
  t.micro_batch = labels.micro_batch;
  t.chunk = std::int16_t(labels.chunk);  // at most virtual_stages (4096) - 1
  t.name = std::string(phase) + " " + describe(layers) +
           (labels.micro_batch >= 0 ? " mb" + std::to_string(labels.micro_batch) : "") + " core " +
           std::to_string(core);
  return t;
}

int StepBuilder::transfer(int src, int dst, double bytes, int prev, const std::string& phase, Labels labels,
                          int boundary, bool gradient) {
  sim::Task t;
  t.kind = sim::TaskKind::Transfer;
  t.phase = phase;
  t.src_core = src;
  t.dst_core = dst;
  t.bytes = bytes;
  t.stage = labels.stage;
  t.micro_batch = labels.micro_batch;
  t.name = phase + " core " + std::to_string(src) + "->" + std::to_string(dst) +
           (labels.micro_batch >= 0 ? " mb" + std::to_string(labels.micro_batch) : "");
  if (functional_) t.host = functional_->transfer(src, dst, boundary, labels.first_example, gradient);
  const int id = graph_.add(std::move(t));
  if (prev >= 0) graph_.depend(prev, id);
  return id;
}

int StepBuilder::collective(sim::CollectiveOp op, const std::string& phase, const std::string& name,
                            std::vector<int> group, double bytes, LayerRange layers) {
  sim::Task t;
  t.kind = sim::TaskKind::Collective;
  t.op = op;
  t.name = name;
  t.phase = phase;
  t.bytes = bytes;
  if (functional_) {
    if (phase.rfind("gradient_", 0) == 0)
      t.host = functional_->reduce(group, layers);
    else if (phase == "weight_allgather")
      t.host = functional_->gather(group, layers);
  }
  t.group = std::move(group);
  return graph_.add(std::move(t));
}

int StepBuilder::keep_gradient_shard(int reduce, const std::vector<int>& holders,
                                     const std::vector<int>& group, LayerRange layers, double fraction,
                                     const std::string& what) {
  const double released = gradient_bytes(layers) - gradient_bytes(layers) * fraction;
  for (int core : holders)
    graph_.task(reduce).memory.push_back({core, MemoryCategory::Gradients, -released, When::End});
  const double norms = study_.optimizer.rule->layer_statistics_bytes();
  if (norms <= 0) return reduce;
  const std::string phase = study_.optimizer.rule->layer_statistics_phase();
  const int ready = collective(sim::CollectiveOp::AllReduce, phase, phase + " " + what, group,
                               norms * layers.size(), layers);
  graph_.depend(reduce, ready);
  return ready;
}

int StepBuilder::update(int core, LayerRange layers, double fraction, Labels labels, int shard, int shards) {
  sim::Task t = compute_task("update", core, layers, labels);
  t.name = "update core " + std::to_string(core);
  for (int l = layers.first; l < layers.last; ++l) {
    // The update's duration scales with the shard; the fixed per-op overhead does not.
    const double overhead = study_.hardware.core.op_overhead_s;
    t.seconds += (update_s_[l] - overhead) * fraction * weight_fraction_[std::size_t(l)] + overhead;
    t.hbm_s += update_hbm_s_[std::size_t(l)] * fraction * weight_fraction_[std::size_t(l)];
    if (const TiedCopy& copy = copy_[std::size_t(l)]; copy.bytes > 0) {
      // The copy's update: its owner's for a full layer, scaled by the copy's share of its elements.
      const double share = copy.bytes / (study_.model.weight_bytes *
                                         double(study_.model.layers[std::size_t(copy.owner)].params()));
      t.seconds += (update_s_[std::size_t(copy.owner)] - overhead) * fraction * share;
      t.hbm_s += update_hbm_s_[std::size_t(copy.owner)] * fraction * share;
    }
  }
  // The gradients it consumes: the whole buffer, or the shard a reduce-scatter left.
  t.memory.push_back({core, MemoryCategory::Gradients, -gradient_bytes(layers) * fraction, When::End});
  if (functional_) t.host = functional_->update(core, layers, shard, shards);
  return graph_.add(std::move(t));
}

BuiltStep StepBuilder::finish() {
  BuiltStep step;
  step.graph = std::move(graph_);
  step.model_flops = study_.model.step_model_flops(study_.batch);
  step.hardware_flops = hardware_flops_;
  return step;
}

}  // namespace tpusim
