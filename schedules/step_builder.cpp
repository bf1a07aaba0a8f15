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
  if (s.over_replicas) sharding_key_ += "replica;";
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
                            std::vector<int> group, double bytes) {
  sim::Task t;
  t.kind = sim::TaskKind::Collective;
  t.op = op;
  t.name = name;
  t.phase = phase;
  t.bytes = bytes;
  t.group = std::move(group);
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
