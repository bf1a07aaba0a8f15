// Functional mode's state and the host closures the schedules attach to their tasks: every
// core holds real fp32 parameters, gradients and optimizer slots for the layers it owns, and
// stores of activations and activation gradients keyed by (core, micro-batch, layer boundary).
// Compute tasks run the layers' kernels (a recompute really recomputes), transfers copy
// tensors between cores' stores, collectives really sum or gather, updates really update.
#pragma once

#include <functional>
#include <map>
#include <tuple>

#include "schedules/layer_cost.hpp"
#include "schedules/study.hpp"

namespace tpusim {

class FunctionalRuntime {
 public:
  /// `seed` fixes the initial weights and the data.
  FunctionalRuntime(const Study& study, std::uint64_t seed);

  /// Throws ConfigError when the study cannot run functionally (a layer without host math,
  /// an optimizer without a functional update).
  static void check_supported(const Study& study);
  /// Host memory functional mode would use for the study, in bytes (an estimate).
  static double host_bytes_needed(const Study& study, int cores_holding_weights);

  /// `core` holds parameters (and gradients, optimizer slots) for `layers`, initialized
  /// identically on every core.
  void hold(int core, LayerRange layers);

  /// How the cores' pieces of a parameter relate to the whole tensor, when cores hold shards
  /// (mesh layouts) instead of whole layers.
  class Shards {
   public:
    virtual ~Shards() = default;
    /// `core`'s pieces of `layer`'s parameters, cut from the whole ones (as the layer's
    /// function lays them out).
    virtual std::vector<Tensor> slice(int core, int layer, const std::vector<Tensor>& whole) const = 0;
    /// Writes `core`'s pieces back into the whole parameters.
    virtual void place(int core, int layer, const std::vector<Tensor>& pieces,
                       std::vector<Tensor>& whole) const = 0;
  };
  /// `core` holds its pieces (as `shards` cuts them) of the parameters of `layers`, with
  /// gradients and optimizer slots of the same shapes. Comparisons and fingerprints then
  /// reassemble whole parameters.
  void hold_shards(int core, LayerRange layers, std::shared_ptr<const Shards> shards);
  /// Executors that run layers' math themselves (mesh layouts) read and accumulate through these.
  std::vector<Tensor>& params(int core, int layer) { return held(core, layer).params; }
  std::vector<Tensor>& grads(int core, int layer) { return held(core, layer).grads; }
  void add_loss(double loss) { losses_[std::size_t(step_)] += loss; }
  int step() const { return step_; }
  Batch batch(std::int64_t first, std::int64_t count) const;
  const LayerFunction& fn(int layer) const { return *study_.model.layers[std::size_t(layer)].function; }

  using Closure = std::function<void()>;
  /// `count` examples starting at `first` (the micro-batch's key) through `layers` on `core`.
  Closure forward(int core, LayerRange layers, std::int64_t first, std::int64_t count, Keep keep);
  Closure recompute(int core, LayerRange layers, std::int64_t first, std::int64_t count);
  Closure backward(int core, LayerRange layers, std::int64_t first, std::int64_t count);
  /// Copies the activation (or its gradient) at layer boundary `boundary` of micro-batch
  /// `first` from `src` to `dst`.
  Closure transfer(int src, int dst, int boundary, std::int64_t first, bool gradient);
  /// Sums the gradients of `layers` over `group` (all-reduce; a reduce-scatter's shards are
  /// the same sums).
  Closure reduce(std::vector<int> group, LayerRange layers);
  /// Optimizer update of piece `shard` of `shards` equal pieces of each of the layers' weights
  /// (each padded on its own, as XLA shards a tensor; shards = 1: everything).
  Closure update(int core, LayerRange layers, int shard, int shards);
  /// Optimizer update of one piece of each parameter of `layer`: piece pieces[k].first of
  /// pieces[k].second equal pieces (see piece()) of parameter k.
  Closure update_pieces(int core, int layer, std::vector<std::pair<int, int>> pieces);
  /// Elements [begin, end) of piece `index` of `count` equal pieces (the last ones padded) of n.
  static std::pair<std::int64_t, std::int64_t> piece(std::int64_t n, int index, int count);
  /// All-gather: every core of `group` (in group order = piece order) sends its piece of each weight.
  Closure gather(std::vector<int> group, LayerRange layers);

  /// Starts step `step`: zero gradients, empty stores.
  void begin_step(int step);
  const std::vector<double>& losses() const { return losses_; }
  /// The largest, over every layer held by any core, of max|w - w_ref| / max|w_ref| over the
  /// layer's parameter tensors.
  double max_rel_diff(const FunctionalRuntime& reference) const;
  /// Keeps a copy of every core's gradients as they stand (call when the first step has run:
  /// reduced, before the next step zeroes them).
  void keep_first_gradients();
  /// The largest, over every layer held by any core, of max|g - g_ref| / max|g_ref| over its tensors,
  /// between the kept first-step gradients and the reference's: what a schedule can get wrong,
  /// before an optimizer turns rounding noise into steps.
  double gradient_max_rel_diff(const FunctionalRuntime& reference) const;
  /// A hash (FNV-1a, hex) of the bytes of every layer's weights as held by the lowest core
  /// holding the layer (or reassembled from every core's pieces): equal fingerprints mean
  /// bit-identical models. The other cores holding a layer are checked by replicas_identical().
  std::string weights_fingerprint() const;
  /// True when every core holding a whole layer holds bit-identical weights for it (replicas
  /// that diverged would otherwise hide behind the lowest core's fingerprint).
  bool replicas_identical() const;

  /// Steps 1 .. steps-1: the engine ran step 0 and recorded the order its tasks completed in;
  /// the graph is the same every step, so later steps run the closures in that order.
  void replay(const sim::TaskGraph& graph, const std::vector<int>& order, int steps);
  /// Trains the study's model on one core with the whole batch for `steps` steps: the
  /// reference every schedule must reproduce. A model with batch normalizations runs the batch
  /// in the schedule's layer calls (a replica's examples, a micro-batch), adding their
  /// gradients: its statistics are over the same examples as the schedule's.
  static std::unique_ptr<FunctionalRuntime> reference(const Study& study, int steps, std::uint64_t seed);
  /// Whether the model normalizes over the batch (its statistics depend on the layer calls).
  static bool has_batch_norm(const Model& model);

 private:
  struct Held {
    std::vector<Tensor> params, grads;
    std::vector<std::vector<Tensor>> slots;  // per optimizer slot, per tensor
  };
  using Key = std::tuple<int, std::int64_t, int>;  // core, micro-batch (first example), layer or boundary

  Held& held(int core, int layer);
  std::vector<Tensor> initial_params(int layer) const;
  /// `core` holds `params` of `layer`, with zero gradients and optimizer slots of their shapes.
  void take(int core, int layer, std::vector<Tensor> params);
  /// The optimizer's rule on elements [lo, hi) of parameter k.
  void update_range(Held& h, std::size_t k, std::int64_t lo, std::int64_t hi) const;
  void run_forward(int core, LayerRange layers, std::int64_t first, std::int64_t count, bool keep_all,
                   bool count_loss);

  const Study& study_;
  std::uint64_t seed_;
  int step_ = 0;
  int layers_;
  double learning_rate_;
  std::map<std::pair<int, int>, Held> held_;  // (core, layer)
  std::map<Key, Tensor> activations_, gradients_;
  std::map<Key, Saved> saved_;
  std::vector<double> losses_;
  std::shared_ptr<const Shards> shards_;                            // null: cores hold whole layers
  std::map<std::pair<int, int>, std::vector<Tensor>> first_grads_;  // (core, layer)

  /// max|a - b| / max|b| over a layer's tensors, where `mine` (a core's, whole or pieces) is
  /// compared with the reference's whole tensors `ref`.
  double rel_diff(int core, int layer, const std::vector<Tensor>& mine, const std::vector<Tensor>& ref) const;
};

}  // namespace tpusim
