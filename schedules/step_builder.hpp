// Shared bricks of every schedule: forward, backward and update tasks of a layer on a core,
// timed by the cost model and carrying their memory effects, with the results cached per
// (layer, batch) so that thousands of identical cores cost one lowering.
#pragma once

#include <map>

#include "hardware/cost_model.hpp"
#include "schedules/study.hpp"

namespace tpusim {

/// A layer's cost for one batch size on one core.
struct LayerCost {
  double forward_s = 0, backward_s = 0;
  double forward_flops = 0, backward_flops = 0;                    ///< model FLOPs
  double forward_hardware_flops = 0, backward_hardware_flops = 0;  ///< padded MXU FLOPs
  double stash_bytes = 0, workspace_bytes = 0, output_bytes = 0;
};

class StepBuilder {
 public:
  StepBuilder(const Study& study, int cores);

  sim::TaskGraph& graph() { return graph_; }
  const LayerCost& cost(int layer, std::int64_t batch);
  /// fp32 gradient bytes of a layer.
  double gradient_bytes(int layer) const { return 4.0 * double(study_.model.layers[layer].params()); }

  /// Weights and optimizer slots of layers [first, last) resident on `core` from the start;
  /// `slot_fraction` of the slots (1 unless the update is sharded).
  void resident_weights(int core, int first, int last, double slot_fraction);
  /// Forward of `layer` on `core` for `batch` examples after task `prev` (-1: none). Holds the
  /// layer's stashed activations from its start until the matching backward frees them.
  int forward(int core, int layer, std::int64_t batch, int prev);
  /// Backward of `layer`: allocates the layer's gradient buffer, frees the stash at its end.
  int backward(int core, int layer, std::int64_t batch, int prev);
  /// Optimizer update of layers [first, last) on `core` (a `fraction` of each when sharded);
  /// frees the gradient buffers at its end.
  int update(int core, int first, int last, double fraction);

  /// Hands over the graph with the FLOP totals.
  BuiltStep finish();

 private:
  const Study& study_;
  CostModel cost_model_;
  sim::TaskGraph graph_;
  std::map<std::pair<int, std::int64_t>, LayerCost> cache_;
  std::vector<double> update_s_;  // per layer, full update on one core
  double model_flops_ = 0;
  double hardware_flops_ = 0;
};

}  // namespace tpusim
