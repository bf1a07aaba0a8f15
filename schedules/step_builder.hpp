// Shared bricks of every schedule: forward, recompute, backward and update tasks over a range
// of layers on a core, transfers and collectives, each timed by the cost model and carrying its
// memory effects. Layer costs are cached per (layer, batch), so thousands of identical cores or
// micro-batches cost one lowering.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "hardware/cost_model.hpp"
#include "schedules/study.hpp"

namespace tpusim {

/// What a forward keeps for its backward: every activation, or (re-materialization) only the
/// input of the range, the rest being recomputed before the backward, or ("save_dots") the
/// input and the outputs of its matmuls, the other ops being recomputed.
enum class Keep { All, Input, Dots };

/// A schedule's "remat" key: false (keep everything), true (keep each layer's input, recompute
/// its forward before its backward) or "save_dots" (keep the matmuls' outputs too, recompute the
/// other ops); absent: `fallback`. A bad value is a problem at the key's path.
Keep read_remat(Fields& f, Keep fallback);
/// The key's value for a policy (false, true or "save_dots"), as resolved() reports it.
Json remat_json(Keep keep);

/// The one memory rule of the policies, for a layer (or range) that keeps `stash` bytes for its
/// backward, reads `input` and outputs `dots` from matmuls against weights: what its forward
/// keeps, and what the recompute before its backward adds (the rest of the stash).
inline double remat_kept_bytes(Keep keep, double stash, double input, double dots) {
  return keep == Keep::All ? stash : keep == Keep::Input ? input : input + dots;
}
inline double remat_recomputed_bytes(Keep keep, double stash, double dots) {
  return keep == Keep::All ? 0.0 : keep == Keep::Input ? stash : std::max(stash - dots, 0.0);
}

/// A collective over a stage's group of cores (tensor parallelism): what it does, bytes per core.
struct GroupCollective {
  sim::CollectiveOp op = sim::CollectiveOp::AllReduce;
  double bytes = 0;
};

/// A layer's cost for one batch size on one core.
struct LayerCost {
  double forward_s = 0, backward_s = 0;
  double forward_flops = 0, backward_flops = 0;                    ///< model FLOPs
  double forward_hardware_flops = 0, backward_hardware_flops = 0;  ///< padded MXU FLOPs
  double stash_bytes = 0, input_bytes = 0, output_bytes = 0;
  /// One layer: the most its forward holds besides its kept activations (LayerWork). Layers
  /// [first, last): what a forward keeping everything holds beyond all of them at its peak:
  /// max over l of (layer l's transient - what the layers after l keep), at least 0.
  double workspace_bytes = 0;
  /// One layer: the largest op's gradients in flight (LayerWork). Layers [first, last): what
  /// their backward, which runs last to first freeing each layer's kept activations as it
  /// goes, holds at its peak beyond the activations kept at its start:
  /// max over l of (layer l's transient - what the layers after l kept), at least 0.
  double backward_workspace_bytes = 0;
  /// Split over a group of cores (tensor parallelism): the blocking collectives of its forward and
  /// backward in program order, weight-gradient reductions within the group (bytes per core),
  /// and a core's share of the weights.
  std::vector<GroupCollective> forward_collectives, backward_collectives;
  double group_gradient_bytes = 0;
  double weight_fraction = 1;
  /// "save_dots": the matmuls' outputs the forward keeps, and the recompute of the other ops.
  double dot_output_bytes = 0;
  double non_dot_forward_s = 0, non_dot_forward_hardware_flops = 0;
  std::vector<GroupCollective> non_dot_forward_collectives;

  /// What a forward keeping `keep` holds for the backward.
  double kept_bytes(Keep keep) const {
    return remat_kept_bytes(keep, stash_bytes, input_bytes, dot_output_bytes);
  }
  /// What the recompute before the backward adds to it (the rest of the stash).
  double recomputed_bytes(Keep keep) const {
    return remat_recomputed_bytes(keep, stash_bytes, dot_output_bytes);
  }
  /// The blocking collectives of a recompute (tensor parallelism).
  const std::vector<GroupCollective>& recompute_collectives(Keep keep) const {
    return keep == Keep::Dots ? non_dot_forward_collectives : forward_collectives;
  }
  /// The recompute's time: none, the whole forward, or its ops other than matmuls.
  double recompute_s(Keep keep) const {
    return keep == Keep::All ? 0.0 : keep == Keep::Input ? forward_s : non_dot_forward_s;
  }
  double recompute_hardware_flops(Keep keep) const {
    return keep == Keep::All     ? 0.0
           : keep == Keep::Input ? forward_hardware_flops
                                 : non_dot_forward_hardware_flops;
  }
};

/// Layers [first, last).
struct LayerRange {
  int first = 0;
  int last = 0;
  int size() const { return last - first; }
};

/// Report labels of a task, and which examples it processes (functional mode).
struct Labels {
  int stage = -1;
  int micro_batch = -1;
  std::int64_t first_example = 0;  ///< the first of the task's examples in the global batch
};

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

 private:
  std::mutex mutex_;
  std::map<std::tuple<int, std::int64_t, std::string>, LayerCost> costs_;
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
  /// The summed cost of a range of layers (stash and time add up; the workspaces are what the
  /// forward and the backward hold beyond the range's kept activations at their peaks).
  LayerCost cost(LayerRange layers, std::int64_t batch);
  /// fp32 gradient bytes of layers.
  /// The weights and optimizer slots (`slot_fraction` of them) one core holds for `layers`: its
  /// share of each layer under the builder's split.
  double resident_bytes(LayerRange layers, double slot_fraction) const;
  double gradient_bytes(LayerRange layers) const;
  double gradient_bytes(int layer) const { return gradient_bytes(LayerRange{layer, layer + 1}); }

  /// Weights and optimizer slots of `layers` resident on `core` from the start;
  /// `slot_fraction` of the slots (1 unless the update is sharded), `weight_fraction` of the
  /// weights (1 unless they are fully sharded).
  void resident_weights(int core, LayerRange layers, double slot_fraction, double weight_fraction = 1.0);
  /// Forward of `layers` on `core` for `batch` examples after task `prev` (-1: none). Holds what
  /// it keeps from its start until the matching backward frees it.
  int forward(int core, LayerRange layers, std::int64_t batch, int prev, Keep keep, Labels labels = {});
  /// Re-materialization: the forward again (the whole of it, or with `keep` Dots its ops other
  /// than matmuls), rebuilding every activation the backward reads (counted in hardware FLOPs,
  /// not model FLOPs).
  int recompute(int core, LayerRange layers, std::int64_t batch, int prev, Labels labels = {},
                Keep keep = Keep::Input);
  /// Backward of `layers`: frees what the forward (and recompute) kept at its end. The first
  /// backward of a step over these layers allocates their gradient buffer; later ones accumulate.
  int backward(int core, LayerRange layers, std::int64_t batch, int prev, Keep kept, bool allocate_gradients,
               Labels labels = {});
  /// `bytes` from core `src` to core `dst` after `prev`: the activation at layer boundary
  /// `boundary` (its gradient when `gradient`) of the micro-batch in `labels`.
  int transfer(int src, int dst, double bytes, int prev, const std::string& phase, Labels labels,
               int boundary, bool gradient);
  /// A collective over `group` on the gradients or weights of `layers` (what it does
  /// functionally follows from its phase: gradient_* reduce gradients, weight_allgather gathers
  /// weights; anything else is timing only).
  int collective(sim::CollectiveOp op, const std::string& phase, const std::string& name,
                 std::vector<int> group, double bytes, LayerRange layers);
  /// Optimizer update on `core` of shard `shard` of `shards` equal pieces of `layers`
  /// (`fraction` of the work and memory, padding included); frees the gradients it consumed
  /// (that fraction of the layers' gradient buffers) at its end.
  int update(int core, LayerRange layers, double fraction, Labels labels = {}, int shard = 0, int shards = 1);

  /// Hands over the graph with the FLOP totals.
  BuiltStep finish();

 private:
  std::string describe(LayerRange layers) const;
  /// The cost of `layer` for `batch` examples, computed (cost() caches it).
  LayerCost layer_cost(int layer, std::int64_t batch) const;
  sim::Task compute_task(const char* phase, int core, LayerRange layers, Labels labels) const;

  const Study& study_;
  FunctionalRuntime* functional_;
  CostModel cost_model_;
  sim::TaskGraph graph_;
  std::shared_ptr<LayerCostCache> costs_;  // the study's, or this builder's own
  std::string sharding_key_;               // the split the costs are for ("" unsplit)
  std::map<std::pair<int, std::int64_t>, const LayerCost*> cache_;  // this builder's lookups
  std::vector<double> update_s_;                                    // per layer, full update on one core
  const StageSharding* sharding_ = nullptr;
  std::vector<double> weight_fraction_;  // per layer, a core's share of its weights
  double hardware_flops_ = 0;
};

}  // namespace tpusim
