// Shared bricks of every schedule: the task graph the one player (schedules/program_player.hpp)
// puts the layers' programs on, the layers' programs and summed costs, resident weights,
// transfers and collectives, each timed by the cost model and carrying its memory effects. Layer costs and
// programs are cached per (layer, batch), so thousands of identical cores or micro-batches cost one lowering.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "hardware/cost_model.hpp"
#include "schedules/layer_cost.hpp"
#include "schedules/mesh_lowering.hpp"
#include "schedules/study.hpp"

namespace tpusim {

class FunctionalRuntime;
struct StageSharding;

/// Layer costs by (layer, batch, sharding), shared by the step builders of one model on one
/// hardware (Study::layer_costs: plan's candidates differ only in their schedule). Thread-safe;
/// entries are never removed, so the references it hands out stay valid.
class LayerCostCache {
 public:
  /// The cost stored under the key, or `compute()`'s result stored first (computed unlocked).
  const LayerCost& get(int layer, std::int64_t batch, const std::string& sharding,
                       const std::function<LayerCost()>& compute);
  /// The program stored under the key (a layer's on a core of a pipeline stage), or `compute()`'s.
  const mesh::LayerProgram& program(int layer, std::int64_t batch, const std::string& sharding,
                                    const std::function<mesh::LayerProgram()>& compute);

 private:
  using Key = std::tuple<int, std::int64_t, std::string>;
  /// The value under `key` in `map`, or `compute()`'s stored first (computed unlocked).
  template <class V>
  const V& lookup(std::map<Key, V>& map, const Key& key, const std::function<V()>& compute) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = map.find(key); it != map.end()) return it->second;
    }
    V value = compute();
    const std::lock_guard<std::mutex> lock(mutex_);
    return map.emplace(key, std::move(value)).first->second;
  }
  std::mutex mutex_;
  std::map<Key, LayerCost> costs_;
  std::map<Key, mesh::LayerProgram> programs_;
};

class StepBuilder {
 public:
  /// With a `functional` runtime every task gets the host closure doing its math.
  StepBuilder(const Study& study, int cores, FunctionalRuntime* functional = nullptr);

  sim::TaskGraph& graph() { return graph_; }
  /// Every layer from now on split over a group of cores (tensor parallelism): costs, weights,
  /// gradients and updates are one core's share (`s` outlives the builder).
  void split_layers(const StageSharding& s);
  const LayerCost& cost(int layer, std::int64_t batch);
  /// Layer `layer`'s program on one core for `batch` examples under the builder's split (a layer
  /// that is the same computation as an earlier one: that one's, its events renamed).
  mesh::LayerProgram program(int layer, std::int64_t batch);
  /// The summed cost of a range of layers (stash and time add up; the workspaces are what the
  /// forward and the backward hold beyond the range's kept activations at their peaks).
  LayerCost cost(LayerRange layers, std::int64_t batch);
  /// fp32 gradient bytes of layers.
  /// The weights and optimizer slots (`slot_fraction` of them) one core holds for `layers`: its
  /// share of each layer under the builder's split.
  double resident_bytes(LayerRange layers, double slot_fraction) const;
  double gradient_bytes(LayerRange layers) const;
  double gradient_bytes(int layer) const { return gradient_bytes(LayerRange{layer, layer + 1}); }

  /// A copy a stage keeps of another stage's weight that one of its layers reads (a tied
  /// embedding table, Layer::tied_to; Megatron-LM keeps one on the last stage): its first reader
  /// on the stage, whose gradients, resident weights and update it joins, the owner, and its
  /// fp32 bytes on a core.
  struct TiedCopy {
    int reader = -1, owner = -1;
    double bytes = 0;
  };
  /// The copies stages hold, each layer on stage `stage_of_layer[l]`: one per stage and owner
  /// on another stage (none when the owner is on the same stage), for `batch` examples.
  std::vector<TiedCopy> tied_copies(const std::vector<int>& stage_of_layer, std::int64_t batch);
  /// From now on the copies count with their readers (gradient_bytes, resident_bytes,
  /// resident_weights, update).
  void hold(const std::vector<TiedCopy>& copies);
  /// A copy's weights and optimizer slots (`slot_fraction` of them) on a core.
  double resident_bytes(const TiedCopy& copy, double slot_fraction) const;

  /// Weights and optimizer slots of `layers` resident on `core` from the start;
  /// `slot_fraction` of the slots (1 unless the update is sharded), `weight_fraction` of the
  /// weights (1 unless they are fully sharded).
  void resident_weights(int core, LayerRange layers, double slot_fraction, double weight_fraction = 1.0);
  /// `bytes` from core `src` to core `dst` after `prev`: the activation at layer boundary
  /// `boundary` (its gradient when `gradient`) of the micro-batch in `labels`.
  int transfer(int src, int dst, double bytes, int prev, const std::string& phase, Labels labels,
               int boundary, bool gradient);
  /// A collective over `group` (timing only: a tensor-parallel stage's, the tied copies' sums).
  int collective(sim::CollectiveOp op, const std::string& phase, const std::string& name,
                 std::vector<int> group, double bytes);

  /// Hands over the graph with the FLOP totals.
  BuiltStep finish();

 private:
  /// The cost of `layer` for `batch` examples, computed (cost() caches it).
  LayerCost layer_cost(int layer, std::int64_t batch) const;

  const Study& study_;
  FunctionalRuntime* functional_;
  CostModel cost_model_;
  const SavePolicy& saves_;  ///< the schedule's save policy: layers are lowered with it
  sim::TaskGraph graph_;
  std::shared_ptr<LayerCostCache> costs_;  // the study's, or this builder's own
  std::string sharding_key_;               // the split the costs are for ("" unsplit)
  /// The shared cache's key for this builder's costs: the split and the save policy.
  std::string cache_key() const { return sharding_key_ + "|" + saves_.name(); }
  std::map<std::pair<int, std::int64_t>, const LayerCost*> cache_;  // this builder's lookups
  const StageSharding* sharding_ = nullptr;
  std::vector<double> weight_fraction_;  // per layer, a core's share of its weights
  std::vector<TiedCopy> copy_;           // per layer, the tied copy it holds (bytes 0: none)
  double hardware_flops_ = 0;
};

}  // namespace tpusim
