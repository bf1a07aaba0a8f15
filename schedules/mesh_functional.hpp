// Functional mode for mesh layouts: every core holds its shards of the parameters and runs the
// real fp32 math of each op on its local pieces of the tensors, and the collectives the layout
// induces really sum (or, for a split softmax, combine) the cores' partial results. The closures
// follow the mesh schedule's own events, so a collective the schedule forgot, or one over the
// wrong mesh dimensions, shows up as a difference from one core.
//
// Executes models whose layers are chains of ops with known math: einsums of two-dimensional
// tensors with a weight (dense layers), bias and bias + ReLU, softmax cross-entropy (mlp).
#pragma once

#include <map>
#include <memory>

#include "schedules/functional_runtime.hpp"

namespace tpusim {

/// One piece of functional work in a mesh event: op `op` of the event's layer.
struct MeshAction {
  int op = 0;
  enum What {
    Forward,            ///< local forward (an einsum with a split contraction leaves partial sums)
    Backward,           ///< local input gradient (an einsum's), or the whole backward of another op
    WeightGradient,     ///< an einsum's local weight gradient, accumulated
    SumOutput,          ///< all-reduce the partial sums of the op's output
    SumInputGradient,   ///< all-reduce the partial sums of the op's input gradient
    SumWeightGradient,  ///< all-reduce the op's weight gradient
    CombineStatistics,  ///< all-reduce a split softmax's row statistics (max, sum of exponentials)
  } what = Forward;
};

class MeshExecutor : public FunctionalRuntime::Shards, public std::enable_shared_from_this<MeshExecutor> {
 public:
  /// `mesh`: dimensions in placement order with their sizes; `layout`: tensor dimension -> mesh
  /// dimension; `coords(core)`: a core's mesh coordinates. Throws ConfigError when the model has
  /// an op functional mode cannot execute on shards.
  MeshExecutor(const Study& study, FunctionalRuntime& runtime, std::vector<std::pair<std::string, int>> mesh,
               std::map<std::string, std::string> layout, std::vector<std::vector<int>> coords);

  /// Every core takes its shards of every layer's initial parameters.
  void hold();
  FunctionalRuntime::Closure compute(int core, int layer, std::vector<MeshAction> actions);
  /// One collective over every group of a family at once.
  FunctionalRuntime::Closure collective(std::vector<std::vector<int>> groups, int layer, MeshAction action);
  /// A weight whose gradient is reduce-scattered over `groups` (weight-update sharding): op
  /// `op`'s weight; each core updates its piece (its position in its group) and all-gathers.
  struct ShardedWeight {
    int op;
    std::vector<std::vector<int>> groups;
  };
  /// The optimizer update of `core`'s shards of `layer`: the piece of each sharded weight, the
  /// whole of the others.
  FunctionalRuntime::Closure update(int core, int layer, const std::vector<ShardedWeight>& sharded);
  /// The all-gather of a sharded weight's updated pieces within each group.
  FunctionalRuntime::Closure gather(int layer, ShardedWeight weight);

  Tensor slice(int core, int layer, std::size_t k, const Tensor& whole) const override;
  void place(int core, int layer, std::size_t k, const Tensor& piece, Tensor& whole) const override;

  /// A core's piece of a tensor: the whole tensor's sizes, where the piece starts, its sizes.
  struct Box {
    std::vector<std::int64_t> whole, offset, local;
    std::int64_t elements() const;
  };
  Box box(const NamedTensor& t, int core) const;

 private:
  using Key = std::pair<int, int>;  // core, op (numbered across the model)
  int flat(int layer, int op) const { return first_op_[std::size_t(layer)] + op; }
  const NamedOp& op(int f) const { return ops_[std::size_t(f)]; }
  /// Whether `core` is the first of the cores holding the same piece of a tensor over `dims`
  /// (coordinate 0 along every mesh dimension that splits none of them).
  bool first_replica(int core, const std::vector<std::string>& dims) const;
  /// Op f's input on `core` (the model's input for op 0: this core's examples and features).
  const Tensor& input_of(int core, int f);
  void run(int core, int f, MeshAction::What what);
  void reduce(const std::vector<int>& group, int f, MeshAction::What what);
  void finish_softmax(int core, int f);

  const Study& study_;
  FunctionalRuntime& rt_;
  std::vector<std::pair<std::string, int>> mesh_;
  std::map<std::string, std::string> layout_;
  std::vector<std::vector<int>> coords_;
  std::vector<NamedOp> ops_;                   // every layer's ops, in order
  std::vector<int> layer_of_, first_op_;       // op -> layer; layer -> its first op
  std::vector<int> param_of_;                  // op -> index of its weight in the layer's parameters (-1: none)
  std::vector<std::vector<NamedTensor>> params_;  // layer -> its parameters over named dimensions
  std::map<Key, Tensor> out_, dout_;           // an op's local output, the gradient of it
  std::map<Key, std::vector<double>> stats_;   // softmax: per local row, (max, sum of exponentials), then log-sum-exp
  std::map<int, std::pair<int, Tensor>> input_;  // core -> (step, its piece of the model's input)
  std::map<int, std::vector<std::int32_t>> targets_;  // core -> targets of its examples
};

}  // namespace tpusim
