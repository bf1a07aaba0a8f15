// A pipeline's step tail, one model chunk at a time, through the one tail (TailPlayer): on the
// chunk's stage's cores of every replica, after the chunk's last backward, its weight-gradient
// reductions over the replicas (the stage programs reduce every weight gradient over mesh
// dimension "replica", Sharding::replica_dim) and within a tensor-parallel stage, combined as
// XLA's combiner combines them, continued across slices; the optimizer's statistics; the sums
// of the tied copies' gradients with their owners' (Megatron-LM's embedding all-reduce between
// the first and last stage); the updates; under weight-update sharding the gathers of the
// updated pieces.
#pragma once

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "schedules/layer_program.hpp"
#include "schedules/step_tail.hpp"

namespace tpusim {

/// Where a pipeline's model chunks and cores are.
struct PipelineLayout {
  std::vector<std::vector<std::vector<int>>> cores;  ///< [replica][stage][core of the stage's group]
  std::vector<LayerRange> ranges;                    ///< model chunks: chunk c on stage c mod stages
  std::vector<StepBuilder::TiedCopy> copies;         ///< the copies stages hold of tied weights
  int built = 0;                                     ///< the replicas played (the first ones)
  /// What the combiner of the reductions across replicas takes whole (mesh::gradient_chunks).
  mesh::CombineUnit combine_unit = mesh::CombineUnit::Layer;
  int stages() const { return int(cores.front().size()); }
  int replicas() const { return int(cores.size()); }
  /// The model chunk holding `layer`.
  int chunk_of(int layer) const;
  /// "stage s" (and its chunk when interleaved), naming a chunk's collectives.
  std::string stage_name(int chunk) const;
};

/// The stage programs as their tails play them: under weight-update sharding (`stage.sharded`)
/// each core updating its pieces of the weights whose gradients are reduce-scattered (as the
/// lowering cuts a mesh's), and each tied copy a weight of its reader: its gradient reduced over
/// the replicas (when the programs reduce over "replica") and updated with the reader's weights.
void tail_programs(std::vector<mesh::LayerProgram>& programs, const PipelineLayout& layout,
                   const StageSharding& stage, const Model& model);

/// The sums of the tied copies' gradients with their owners', per (copy, replica, core of the
/// group): shared by the tails of the owner's and the reader's chunks.
using TiedSums = std::map<std::tuple<std::size_t, int, int>, int>;

class StageTail : public TailPlayer {
 public:
  /// Model chunk `chunk`'s tail on its stage's cores of the built replicas, each core's after
  /// `ends[r][t]` (the chunk's last backward on core t of replica r's group). `stage`: how the
  /// stage programs split the layers.
  StageTail(const Study& study, StepBuilder& builder, const PipelineLayout& layout, int chunk,
            const std::vector<mesh::LayerProgram>& programs, Keep remat, const StageSharding& stage,
            const std::vector<std::vector<std::vector<int>>>& ends, FunctionalRuntime* functional,
            TiedSums& sums);
  void play();

 protected:
  std::vector<std::vector<int>> groups(const std::vector<std::string>& dims) const override;
  std::vector<std::vector<int>> groups(const Event& ev) const override { return groups(ev.mesh_dims); }
  bool over_replicas(const std::vector<std::string>& dims) const override;
  Closure reduction_host(const std::vector<std::vector<int>>& family, int l, const Event& ev) override;
  Closure update_host(int i, int l) override;
  Closure gather_host(int l, const Scattered& w) override;
  UpdateTime update_time(int l) const override;
  void before_updates() override;

  // A tail plays no layer's program.
  void play_collective(const Event&, int, bool) override { no_program(); }
  void play_halo(const Event&, bool) override { no_program(); }
  void replay_collective(const Event&, int) override { no_program(); }
  bool played_in_place(const Event&, bool) const override { return false; }
  double kept_in_forward(int) const override { return 0; }

 private:
  [[noreturn]] static void no_program();
  static Settings settings(const Study& study, const StageSharding& stage, const PipelineLayout& layout,
                           int chunk);
  /// The copy layer `l` reads, or null.
  const StepBuilder::TiedCopy* copy_read_by(int l) const;
  /// The sum of `copy`'s gradient with its owner's on core t of replica r's groups.
  int tied_sum(const StepBuilder::TiedCopy& copy, int r, int t);

  const PipelineLayout& layout_;
  int stage_, group_size_;
  const StageSharding& sharding_;
  FunctionalRuntime* functional_;
  TiedSums& sums_;
  std::set<int> reduced_, gathered_;  ///< functional mode: the layers whose host math is placed
};

}  // namespace tpusim
