// Pipeline parallelism (GPipe, and PipeDream-flush "1F1B" for comparison): the layers split
// into K contiguous stages on K cores, the mini-batch into M micro-batches that flow through
// the stages; boundary activations and their gradients cross between stage cores as
// transfers; optional re-materialization keeps only each stage's input per micro-batch and
// recomputes the rest before the backward; gradients accumulate over the micro-batches, are
// all-reduced across R replicas of the pipeline, then one optimizer update. Each (replica,
// stage) group of cores runs its stage program on the one player (schedules/program_player.hpp):
// an item of the program is its model chunk's layers' programs for one micro-batch, one task per
// core; this file adds what is a pipeline's own: the stage programs' order, the transfers between
// stages, the reductions across replicas, the partition and the placement.
#pragma once

#include <set>

#include "schedules/layer_program.hpp"
#include "schedules/step_builder.hpp"

namespace tpusim {

class Pipeline : public Schedule {
 public:
  enum class Order {
    GPipe,     ///< all forwards, then all backwards (last micro-batch first)
    OneFOneB,  ///< warm-up forwards, then one forward / one backward, then drain
  };

  /// Reads "stages", "microbatches", "remat", "replicas", "partition", "placement",
  /// "tensor_parallel" (cores per stage, default 1) and "tensor_layout" (the tensor dimensions
  /// a stage's cores split: default those of d_ff, heads and vocab the model has).
  Pipeline(Order order, Fields& fields, const Study& study, Problems& problems);
  BuiltStep build(const Study& study, FunctionalRuntime* functional = nullptr) const override;
  /// Replica 0's tasks with each stage's gradient all-reduce over every replica.
  BuiltStep representative_step(const Study& study) const override;
  std::vector<std::pair<std::string, std::string>> ignored_hardware_figures() const override {
    return {{"core.gradient_collectives_overlap_backward",
             "a stage all-reduces its gradients once its last backward is done, whatever the setting"},
            {"core.allreduce_combine_threshold_bytes", "a stage all-reduces its gradients as one buffer"}};
  }
  /// A what-if that moved the cost-balanced cut (the cut follows the costs, so the what-if
  /// compares two cuts unless the partition is set explicitly).
  std::vector<std::string> what_if_notes(const Study& study,
                                         const std::function<const Study*()>& on_base) const override;
  Json resolved() const override;
  const SavePolicy& save_policy() const override { return *saves_; }
  std::int64_t layer_batch(const Study& study) const override {
    return study.batch / (replicas_ * microbatches_);
  }
  /// The cores of each replica's first stage read the replica's micro-batches (all of them the
  /// same ones when the stage is split over several cores).
  std::vector<CoreInput> input(const Study& study) const override;

  /// Layers per stage (per model chunk when interleaved: stages x virtual_stages of them, chunk c
  /// on stage c mod stages) and what set the cut: the explicit partition ("explicit"); balanced on the
  /// estimated stage cost (forward + recomputation + backward of one micro-batch on the study's
  /// hardware: "cost"); or, "memory_aware", balanced among the partitions whose every stage fits
  /// its core's usable HBM ("cost" when the cost-balanced cut fits already, "memory" when it
  /// does not and another does, "cost (no partition fits)" otherwise).
  struct Partition {
    std::vector<int> sizes;
    std::string set_by;
  };
  Partition partition(const Study& study) const;
  /// The most the core of stage `stage` holds over the step with layers `range`: its compute
  /// tasks run one at a time, so walking its program with each task's memory effects
  /// (StepBuilder's forward, recompute, backward) gives the engine's peak for that core.
  double stage_peak_bytes(StepBuilder& builder, const Study& study, LayerRange range, int stage) const;
  /// Core of each (replica, stage): the first of its group.
  std::vector<std::vector<int>> placement(const Study& study) const;
  /// Cores of each (replica, stage): `tensor_parallel` of them.
  std::vector<std::vector<std::vector<int>>> groups(const Study& study) const;

 private:
  Order order_;
  int stages_ = 1;
  int microbatches_ = 1;
  int replicas_ = 1;
  Keep remat_ = Keep::Input;
  const SavePolicy* saves_ = &save_dots_policy();  ///< the policy of remat_ Keep::Saved
  /// "weight_update": "sharded": each stage's optimizer slots and update split over its replicas
  /// (gradients reduce-scattered, updated pieces all-gathered), as ZeRO-1 / MLPerf's sharding.
  bool sharded_ = false;
  /// "gradient_combine_unit": what the combiner takes whole in the reductions across replicas.
  mesh::CombineUnit combine_unit_ = mesh::CombineUnit::Layer;
  /// "virtual_stages" (one_f_one_b): model chunks per stage, Megatron's interleaved schedule.
  int virtual_ = 1;
  int chunks() const { return stages_ * virtual_; }
  std::vector<int> partition_;  ///< explicit, or empty for "balanced"/"memory_aware"
  bool memory_aware_ = false;
  std::vector<std::vector<int>> placement_;  ///< explicit, or empty for "auto" or "by_stage"
  /// "by_stage": a stage's replicas on neighbouring cores (its gradient all-reduce stays local;
  /// the activations travel between blocks); otherwise ("auto") a pipeline's stages are.
  bool by_stage_ = false;
  int tensor_ = 1;          ///< cores per stage
  StageSharding sharding_;  ///< how they split its layers (tensor_ > 1)

  void read_tensor_parallel(Fields& f, const Study& study, Problems& problems);
  /// The step's tasks over the partition `cut` (`built` replicas' or every one's when -1);
  /// `stages`: the stages' table.
  BuiltStep play(const Study& study, const Partition& cut, FunctionalRuntime* functional, int built,
                 Json* stages) const;
  /// "virtual_stages": V > 1 only under one_f_one_b, with micro-batches a multiple of the stages.
  void read_virtual_stages(Fields& f, int layers, Problems& problems);
  /// "partition": "balanced", "memory_aware" or layer counts per stage.
  void read_partition(const Json& p, const std::string& path, int layers, Problems& problems);
  /// "placement": "auto", "by_stage" or core ids per replica and stage.
  void read_placement(const Json& p, const std::string& path, const Study& study, Problems& problems);
  void read_replica_placement(const Json& row, const std::string& path, const Study& study,
                              std::set<int>& used, Problems& problems);
  /// A builder whose layer costs are one core's share of a stage.
  void split(StepBuilder& builder) const {
    if (tensor_ > 1 || sharding_.over_replicas) builder.split_layers(sharding_);
  }
};

/// Cores in the order "auto" placement fills them: the torus tiled by boxes of
/// `chips_per_pipeline` chips (as wide along dimension 0 as the slice allows, then dimension 1,
/// ...), each walked as a snake so that consecutive cores are on the same or neighbouring chips,
/// all cores of a chip first.
std::vector<int> pipeline_core_order(const SliceSpec& slice, int cores_per_chip, int chips_per_pipeline);

}  // namespace tpusim
