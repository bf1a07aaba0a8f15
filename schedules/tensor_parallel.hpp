// Tensor parallelism inside a pipeline stage (Megatron-style): a stage runs on a group of T
// cores that split its layers along model dimensions that stay inside a layer (the feed-forward
// width, the heads, the vocabulary), lowered by the mesh lowering over a one-dimensional mesh
// "model" of T cores. Every core of the group runs the same program on its shard; the
// activations between layers (and so between stages) are whole on every core of the group;
// the partial sums of the einsums that contract a split dimension are all-reduced over the
// group (blocking: forward, and for input gradients in backward).
#pragma once

#include <map>
#include <string>

#include "hardware/cost_model.hpp"
#include "models/model.hpp"
#include "schedules/layer_cost.hpp"

namespace tpusim {

struct StageSharding {
  std::map<std::string, std::string> layout;  ///< tensor dimension -> "model"
  std::map<std::string, int> sizes;           ///< {"model": T}
  int cores() const { return sizes.empty() ? 1 : sizes.begin()->second; }
};

/// The tensor dimensions a stage may split: they never cross a layer boundary.
const std::vector<std::string>& tensor_parallel_dims();

/// One core's share of `layer` for `batch` examples split by `s`: its compute and memory, and
/// the collectives over its group in the order its program meets them.
LayerCost sharded_layer_cost(const Layer& layer, std::int64_t batch, const StageSharding& s,
                             const CostModel& cost, double act, bool model_input);

}  // namespace tpusim
