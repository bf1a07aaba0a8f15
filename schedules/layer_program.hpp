// Every schedule's one way from a layer to what its tasks cost: the layer's named ops lowered by
// the mesh lowering (schedules/mesh_lowering.hpp) into the program one core runs, which the one
// player (schedules/program_player.hpp) puts on the task graph, and summed into the LayerCost that
// pipelines' partition, memory walk and stage table read. Unsplit, the program is the whole layer on one core
// (data parallelism, a pipeline stage's core). Split over a pipeline stage's group of T cores (tensor
// parallelism, Megatron-style), along model dimensions that stay inside a layer (the feed-forward width, the
// heads, the vocabulary) over a one-dimensional mesh "model": every core of the group runs the same program
// on its shard; the activations between layers (and so between stages) are whole on every core of the group;
// the partial sums of the einsums that contract a split dimension are all-reduced over the group (blocking:
// forward, and for input gradients in backward).
#pragma once

#include <map>
#include <string>

#include "hardware/cost_model.hpp"
#include "models/model.hpp"
#include "schedules/layer_cost.hpp"
#include "schedules/mesh_lowering.hpp"

namespace tpusim {

struct StageSharding {
  std::map<std::string, std::string> layout;  ///< tensor dimension -> "model"
  std::map<std::string, int> sizes;           ///< {"model": T}
  int cores() const { return sizes.empty() ? 1 : sizes.begin()->second; }
  /// The stage's replicas (each on other examples), and whether its weight gradients are reduced
  /// over them (several replicas, or a lone one across slices), along mesh dimension "replica"
  /// (Sharding::replica_dim): reduce-scattered when `sharded` (weight-update sharding). A layer
  /// is lowered once for any count (its reductions are the same); its pieces under weight-update
  /// sharding are cut afterwards (tail_programs, schedules/stage_tail.hpp).
  int replicas = 1;
  bool over_replicas = false, sharded = false;
};

/// The tensor dimensions a stage may split: they never cross a layer boundary.
const std::vector<std::string>& tensor_parallel_dims();

/// The program one core of a stage runs for `layer` on `batch` examples: the whole layer (`s`
/// null) or its shard under `s`, its partial recompute that of `saves`.
mesh::LayerProgram stage_layer_program(const Layer& layer, std::int64_t batch, const StageSharding* s,
                                       const CostModel& cost, double act, const SavePolicy& saves);

/// One core's share of `layer` for `batch` examples, whole (`s` null) or split by `s`: its
/// compute and memory, and the collectives over its group in the order its program meets them.
LayerCost layer_program_cost(const Layer& layer, std::int64_t batch, const StageSharding* s,
                             const CostModel& cost, double act, const SavePolicy& saves);

}  // namespace tpusim
