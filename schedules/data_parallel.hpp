// Data parallelism: the weights replicated on every core, each core runs forward and backward
// on its share of the batch, and the weight gradients are reduced across all cores, combined as
// XLA's all-reduce combiner combines them: per weight tensor in backward order, up to the
// bucket ("gradient_bucket_bytes"), each combined reduction as soon as its gradients exist
// (overlapping the rest of the backward) when the software stack overlaps them; a layer's update
// once its gradients are reduced.
//   replicated update: all-reduce, every core updates every weight.
//   sharded update (MLPerf-0.6 "weight-update sharding"): reduce-scatter, every core updates only
//   its 1/N piece of each weight (padded so all pieces are equal) and keeps only that piece's
//   optimizer slots, then the updated weights are all-gathered. With LARS the per-layer weight
//   and gradient norms of the pieces are all-reduced before the update.
//   fully sharded (ZeRO-3, FSDP): weights, gradients and slots 1/N per core, each layer's
//   weights gathered before its forward and its backward, its gradients reduce-scattered as its
//   backward ends.
//   "shard_group": G (sharded or fully sharded): the pieces cut over groups of G consecutive
//   replicas, the same pieces held by the other groups (MaxText's data x fsdp mesh:
//   ici_fsdp_parallelism G, ici_data_parallelism N / G); each gradient reduce-scattered within
//   the group, its piece all-reduced across the groups.
// The step is a mesh splitting only the batch over the replicas, played by the mesh's player.
// Gradients may be communicated in bf16 ("gradient_dtype"); they are kept in fp32.
// Cross-replica batch norm ("batch_norm_group": G > 1): each batch normalization combines its
// statistics over groups of G consecutive replicas (MLPerf's distributed_group_size): a small
// all-reduce of its per-channel mean and variance in forward, and of its gradient statistics in
// backward, which the rest of the layer waits for.
#pragma once

#include <memory>

#include "schedules/step_builder.hpp"

namespace tpusim {

class MeshSchedule;
namespace mesh {
struct GradientChunk;
struct LayerProgram;
}  // namespace mesh

class DataParallel : public Schedule {
 public:
  /// Reads "replicas", "weight_update", "shard_group", "gradient_dtype", "gradient_bucket_bytes",
  /// "batch_norm_group", "remat" (all optional) and checks that the batch divides over the replicas and
  /// the replicas over the batch-norm groups.
  DataParallel(Fields& fields, const Study& study, Problems& problems);
  BuiltStep build(const Study& study, FunctionalRuntime* functional = nullptr) const override;
  Json resolved() const override;
  const SavePolicy& save_policy() const override { return *saves_; }
  /// A replica's micro-batch (its whole batch without accumulation): the mesh's.
  std::int64_t layer_batch(const Study& study) const override;
  /// Each replica's core reads its share of the batch: the mesh's.
  std::vector<CoreInput> input(const Study& study) const override;
  int batch_norm_group() const override { return batch_norm_group_; }

 private:
  int replicas_ = 1;     ///< cores used: the first `replicas_` of the slice
  int shard_group_ = 1;  ///< replicas a weight's pieces are cut over (all of them by default)
  bool sharded_ = false;
  WireDtypes wire_;           ///< "gradient_dtype", "gathered_weight_dtype"
  double bucket_bytes_ = 0;   ///< default: the hardware's all-reduce combine threshold
  int batch_norm_group_ = 1;  ///< replicas whose batch-norm statistics are combined
  /// "remat": true, each layer keeps only its input in the forward and runs its forward again
  /// just before its backward (activation re-materialization, as the pipelines do per stage);
  /// "save_dots": it keeps its matmuls' outputs too and recomputes only its other ops
  Keep remat_ = Keep::All;
  const SavePolicy* saves_ = &save_dots_policy();  ///< the policy of remat_ Keep::Saved
  /// weight_update "fully_sharded" (ZeRO-3, FSDP): weights too 1/N per core, gathered per layer
  bool fully_sharded_ = false;
  int accumulation_steps_ = 1;  ///< micro-batches per replica whose gradients are summed
  /// The step: a mesh splitting only the batch over the replicas, played by the mesh's player
  /// (weight gradients combined per tensor up to the bucket, as XLA's all-reduce combiner does;
  /// fully sharded weights gathered as FSDP gathers them, "weight_gathers": "prefetched").
  std::shared_ptr<const MeshSchedule> mesh_;
  void read_mesh(Fields& f, const Study& study, Problems& problems);
  /// "shard_group": a divisor of the replicas, with weight-update sharding.
  void read_shard_group(Fields& f, Problems& problems);
  const char* weight_update() const;
  std::vector<mesh::GradientChunk> gradient_chunks(const std::vector<mesh::LayerProgram>& programs) const;
  Json bucket_json(const mesh::GradientChunk& chunk, double& padding) const;
};

}  // namespace tpusim
