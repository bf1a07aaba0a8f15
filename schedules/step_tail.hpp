// The step's tail, after the backward and behind it, for a group of cores playing layers'
// programs (ProgramPlayer): the weight-gradient reductions across the replicas, combined as XLA's
// all-reduce combiner combines them (mesh::gradient_chunks) or a layer's at a time (fully sharded
// weights), continued across slices, the optimizer's statistics, each layer's updates, and under
// weight-update sharding the all-gathers of the updated pieces. The schedule's player derives
// from it and says which groups a set of mesh dimensions makes and which of them span replicas.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "schedules/layer_cost.hpp"
#include "schedules/mesh_functional.hpp"
#include "schedules/program_player.hpp"

namespace tpusim {

class TailPlayer : public ProgramPlayer {
 protected:
  /// How the tail runs: weight-update sharding (`sharded`: reduce-scatters, each core updating its
  /// piece), fully sharded weights (`fully`: a layer's reductions scattered per layer, nothing
  /// gathered after the update), the combined reductions behind the backward (`overlap`), the
  /// reductions across slices after it (`dcn_after_backward`), the wire's dtypes and the
  /// combiner's threshold.
  /// `layers`: those whose tail this is (last < 0: every layer); `unit`: what the combiner takes
  /// whole (mesh::gradient_chunks); `data_dim`: a mesh dimension whose cores hold the same pieces
  /// (Sharding::data_dim), over which a sharded reduction's pieces are all-reduced after its
  /// reduce-scatter over the others.
  struct Settings {
    bool sharded = false, fully = false, overlap = false, dcn_after_backward = false;
    WireDtypes wire;
    double bucket_bytes = 0;
    LayerRange layers{0, -1};
    mesh::CombineUnit unit = mesh::CombineUnit::Tensor;
    std::string data_dim = {};
  };
  TailPlayer(const Study& study, StepBuilder& builder, std::vector<int> cores,
             const std::vector<LayerProgram>& programs, Keep remat, const Settings& settings,
             std::shared_ptr<MeshExecutor> exec);

  /// The groups of cores a set of mesh dimensions makes (each core in one), and those of an
  /// event (its dimensions, blocked when it says so).
  virtual std::vector<std::vector<int>> groups(const std::vector<std::string>& dims) const = 0;
  virtual std::vector<std::vector<int>> groups(const Event& ev) const = 0;
  /// Whether a reduction over `dims` spans the replicas (and so continues across slices).
  virtual bool over_replicas(const std::vector<std::string>& dims) const = 0;

  /// After the backward: the combined reductions not yet played, the pieces across slices, the
  /// optimizer's statistics (over the layout `s`), the updates and the gathers of the updated
  /// pieces.
  void tail(const Sharding& s);

  /// Weight-update sharding: a weight whose gradient is reduce-scattered.
  struct Scattered {
    MeshExecutor::ShardedWeight weight;
    std::string name;
    std::vector<std::string> mesh_dims;
    double bytes;
    /// The reduce-scatter it came from: the weights of one combined reduction are all-gathered
    /// together too.
    int chunk = 0;
  };

  /// Functional mode: the host math of weight-gradient reduction `ev` of layer `l` over
  /// `family`, of core `i`'s update of layer `l` (its pieces of the reduce-scattered weights), and
  /// of the gather of `w`'s updated pieces; empty: none. By default the mesh executor's.
  virtual Closure reduction_host(const std::vector<std::vector<int>>& family, int l, const Event& ev);
  virtual Closure update_host(int i, int l);
  virtual Closure gather_host(int l, const Scattered& w);
  /// A core's update of layer `l`: the optimizer's update of its share (update_fraction) of the
  /// layer's weights, and the part of it HBM's bandwidth sets.
  struct UpdateTime {
    double seconds = 0, hbm_s = 0;
  };
  virtual UpdateTime update_time(int l) const;
  /// After the optimizer's statistics, before the updates (a pipeline's sums of tied copies).
  virtual void before_updates() {}

  /// The dimensions a sharded weight-gradient reduction over `dims` reduce-scatters over: all but
  /// the data dimension (Settings::data_dim). Empty: an all-reduce over the data dimension alone.
  std::vector<std::string> scatter_dims(const std::vector<std::string>& dims) const {
    return mesh::scatter_dims(dims, data_dim_);
  }
  /// After reduce-scatter `scatter` over `dims` of layer `layer`'s `what`: with the data dimension
  /// among them, each core's piece (`piece` bytes on the wire) all-reduced over it (the cores
  /// along it hold the same pieces). The task the update waits for: the all-reduce, or `scatter`.
  int pieces_over_data(int scatter, const std::vector<std::string>& dims, const std::string& what, int layer,
                       double piece);

  /// What a weight-gradient reduction of `bytes` (as held) carries on the wire (gradient_dtype).
  double on_wire(double bytes) const { return wire_.gradients_on_wire(bytes); }
  double update_fraction(int l) const { return mesh::update_fraction(programs_[std::size_t(l)]); }

  /// Several slices: a layer's weight gradients that no reduction over the replicas covers (an
  /// expert split over the batch's mesh dimension, each core holding its own) are all-reduced
  /// across the slices alone, each core with its counterparts (dcn_rings), before the update.
  void reduce_rest_across_slices(int l);
  /// Prefetched fully sharded weights: the next backward waits until layer `l`'s gradients are
  /// reduce-scattered (at most two layers' whole gradients in flight, as at most two are gathered).
  void wait_for_gradients_scattered(int l);
  /// With overlap: after layer `l`'s backward, each combined reduction whose last gradients it
  /// computed, running behind the rest of the backward.
  void reduce_chunks_ending_at(int l);
  /// Without overlap: every combined reduction after the backward, one after another per set of
  /// mesh dimensions. A layer's update waits for its chunks only.
  void combined_gradient_reductions();
  /// Prefetched fully sharded weights: layer `l`'s weight gradients reduce-scattered as its
  /// backward ends, one reduce-scatter per family of mesh dimensions (as its weights are
  /// gathered: FSDP's flat parameter), after the previous one; they run behind the backward.
  void scatter_layer(int l);
  /// One combined weight-gradient reduction of `events` over `dims`, after every core's last task
  /// (of layer `layer`'s backward, or -1: of the whole backward).
  int combined_reduction(const std::vector<std::string>& dims,
                         const std::vector<std::pair<const Event*, int>>& events, double bytes,
                         int layer = -1);
  /// Several slices on a stack whose reductions across slices wait for the backward's end
  /// (dcn.reductions_overlap_backward false): the pieces the reduce-scatters behind the backward
  /// left, each all-reduced across the slices (each core with its counterparts, dcn_rings) once
  /// its reduce-scatter and the backward are done, one after another (XLA's latency-hiding
  /// scheduler keeps one all-reduce in flight: all_reduce_overlap_limit = 1). The layers'
  /// updates wait for theirs.
  void reduce_pieces_across_slices();
  /// An optimizer statistic over split weights, all-reduced before the layer's update.
  void statistics(int l, const std::string& phase, const std::vector<std::string>& over, double bytes);

  void optimizer_statistics(const Sharding& s);
  /// Each layer's shards are updated as soon as its weight gradients are reduced (layers in
  /// backward order, like data parallelism's buckets), after the core's backward.
  void updates();
  /// Fully sharded, functional mode: the updated pieces as the next step's gathers will see
  /// them, on every core (a zero-length task after the layer's updates; no gather is timed).
  void functional_gathers();
  /// Weight-update sharding: the updated pieces are all-gathered within the reduce-scatter's
  /// groups, those of one reduce-scatter together (XLA combines all-gathers as it combines
  /// reductions), once every layer among them is updated; last layers first.
  void gather_updated_pieces();

  bool sharded_;
  bool fully_;    ///< fully sharded: weights gathered before use, never after the update
  bool overlap_;  ///< combined reductions behind the backward (core.gradient_collectives_overlap_backward)
  bool dcn_after_backward_;  ///< across slices after the backward (dcn.reductions_overlap_backward)
  /// Reduce-scatters behind the backward whose pieces continue across the slices after it.
  struct PiecesAcrossSlices {
    std::vector<int> layers;  ///< whose gradients they are
    int after;                ///< the reduce-scatter
    double bytes;             ///< a core's piece on the wire
  };
  std::vector<PiecesAcrossSlices> pieces_across_slices_;
  WireDtypes wire_;
  std::string data_dim_;   ///< Settings::data_dim
  int last_scatter_ = -1;  ///< prefetched: the reduce-scatters one after another
  std::shared_ptr<MeshExecutor> exec_;
  int layers_;
  LayerRange range_;                                   ///< the layers whose tail this is
  CostModel cost_;                                     ///< the updates'
  std::vector<std::vector<int>> gradient_reductions_;  ///< per layer
  std::vector<std::vector<Scattered>> scattered_;      ///< per layer
  int chunks_ = 0;                                     ///< reduce-scatters of weight gradients
  std::vector<std::vector<int>> updates_;              ///< per layer
  /// Prefetched fully sharded weights: the layer's reductions, reduce-scattered as it ends.
  std::vector<std::pair<const Event*, int>> deferred_;
  /// The weight-gradient reductions as XLA's combiner combines them (mesh::gradient_chunks, up to
  /// the combiner's threshold); none when fully sharded (a layer's are scattered per layer).
  std::vector<mesh::GradientChunk> combined_;
};

}  // namespace tpusim
