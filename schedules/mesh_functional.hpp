// Functional mode for mesh layouts: every core holds its shards of the parameters and runs the
// real fp32 math of each op on its local pieces of the tensors, and the collectives the layout
// induces really sum (or, for a split softmax, combine) the cores' partial results. The closures
// follow the mesh schedule's own events, so a collective the schedule forgot, or one over the
// wrong mesh dimensions, shows up as a difference from one core.
//
// The executor interprets the layers' named ops, following the activations they read (ids), and
// hands each step of an op to its kind (NamedOpKind::shard_step, with the core's view of it:
// ShardHost): einsums of any two tensors (projections, attention scores and context, feed-forward,
// logits), layer norm, causal softmax, softmax cross-entropy and embedding lookups have shard
// math of their own; element-wise ops (bias, ReLU, GELU, residual adds, gated activations), and
// convolutions, batch norms and pools over a split batch, run their whole-tensor math on a core's
// pieces: mlp, the decoder-only transformer (SwiGLU, GEGLU), conv nets and ResNet-50. The
// executor owns what is the same for every kind: where values and gradients live, and the
// collectives' sums, gathers and scatters.
#pragma once

#include <map>
#include <memory>
#include <set>

#include "models/ops/op_kind.hpp"
#include "schedules/functional_runtime.hpp"

namespace tpusim {

/// One piece of functional work in a mesh event: op `op` of the event's layer.
struct MeshAction {
  int op = 0;
  enum What {
    Forward,            ///< local forward (an einsum with a split contraction leaves partial sums)
    Backward,           ///< local input gradient (an einsum's), or the whole backward of another op
    WeightGradient,     ///< an einsum's local gradient of its second operand (a weight: accumulated)
    SumOutput,          ///< all-reduce the partial sums of the op's output
    SumInputGradient,   ///< all-reduce the partial sums of the op's input gradient
    SumWeightGradient,  ///< all-reduce the gradient of the op's second operand (a weight, or an activation)
    CombineStatistics,  ///< all-reduce the row statistics of a normalization over a split dimension
    CombineGradientStatistics,  ///< all-reduce the row sums of its gradient
    GatherOperand,              ///< all-gather an operand split along seq that the op reads whole (seq_k)
    ScatterOperandGradient,     ///< reduce-scatter that operand's gradient back to its pieces
    Exchange,                   ///< all-to-all of a mixture-of-experts' tokens (timing only: refused
                                ///< in functional mode)
  } what = Forward;
  int operand = 0;  ///< GatherOperand, ScatterOperandGradient: 0 the op's first operand, 1 its second
  /// Backward, WeightGradient of an activation: the result is a partial sum, added to the
  /// producer's pending sum that a later all-reduce completes.
  bool partial = false;
};

class MeshExecutor : public FunctionalRuntime::Shards, public std::enable_shared_from_this<MeshExecutor> {
 public:
  /// `mesh`: dimensions in placement order with their sizes; `layout`: tensor dimension -> mesh
  /// dimension; `coords(core)`: a core's mesh coordinates. Throws ConfigError when the model has
  /// an op functional mode cannot execute on shards.
  /// `micro_batches`: each replica's batch runs as that many micro-batches (gradient
  /// accumulation), each op on one micro-batch's shapes; a core's micro-batch advances at each
  /// forward of the model's first op.
  MeshExecutor(const Study& study, FunctionalRuntime& runtime, std::vector<std::pair<std::string, int>> mesh,
               std::map<std::string, std::string> layout, std::vector<std::vector<int>> coords,
               int micro_batches = 1);

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

  std::vector<Tensor> slice(int core, int layer, const std::vector<Tensor>& whole) const override;
  void place(int core, int layer, const std::vector<Tensor>& pieces,
             std::vector<Tensor>& whole) const override;

  /// A core's piece of a tensor: the whole tensor's sizes, where the piece starts, its sizes.
  using Box = ShardHost::Box;
  Box box(const NamedTensor& t, int core) const;

 private:
  /// An op and where its operands come from.
  struct Op {
    NamedOp named;
    int layer = 0;
    int a = -1, b = -1,
        skip = -1;  ///< producing ops (-1: the model's input; b, skip: -1 when absent or a weight)
    bool gather[2] = {false, false};  ///< operand a, b read whole along the sequence its producer splits
    std::vector<int> params;          ///< its weight's copies among the layer's parameters
  };
  /// A parameter of a layer: a weight (copy) of its named ops, row-major over its dimensions, as
  /// the layer function holds it.
  struct Param {
    NamedTensor tensor;
  };
  int flat(int layer, int op) const { return first_op_[std::size_t(layer)] + op; }
  /// The error for an op functional mode cannot execute on shards, and why.
  ConfigError unsupported(int layer, const NamedOp& op, const std::string& why) const;
  /// An operand and the output it reads: the same sizes; names may differ (seq read as seq_k)
  /// only where neither is split, or where the operand reads whole (seq_k) a sequence the
  /// producer splits (then it is all-gathered: `gather`).
  bool same_layout(const NamedTensor& produced, const NamedTensor& read, bool& gather) const;
  /// Appends layer `layer`'s ops with where their operands come from (`last_of_previous`: the
  /// previous layer's last op, which its input is), checking each is supported.
  void add_layer_ops(int layer, int last_of_previous);
  /// Throws unsupported() unless op `f` (of layer `layer`) has host math on shards.
  void check_supported(int layer, const Op& op, int f) const;
  /// Where layer `layer`'s named weights sit in its layer function's parameters.
  void match_params(int layer);
  /// Whether `core` is the first of the cores holding the same piece of a tensor over `dims`
  /// (coordinate 0 along every mesh dimension that splits none of them).
  bool first_replica(int core, const std::vector<std::string>& dims) const;
  bool split(const std::string& dim) const { return layout_.count(dim) > 0; }
  /// The value an op reads: op `producer`'s output, or the model's input (-1).
  const Tensor& value(int core, int producer);
  /// Operand 0 (a) or 1 (b) of op f: the producer's output, or its all-gathered copy.
  const Tensor& operand(int core, int f, int which);
  /// Where member `m`'s piece of op f's operand `which` lies in the gathered operand of the
  /// group (the piece's offset along the sequence, within this core's extent of the others).
  Box piece_in_gathered(int f, int which, int core, int m) const;
  /// Adds to the gradient of op `producer`'s output (nothing for the model's input).
  void accumulate(int core, int producer, Tensor g);
  /// Adds a partial sum to the producer's pending gradient (completed by an all-reduce).
  void add_pending(int core, int producer, Tensor g);
  /// Per row of the whole batch: the examples' targets (or tokens) this core's rows need.
  std::vector<std::int32_t> per_row(int core, const NamedTensor& rows,
                                    const std::vector<std::int32_t>& whole_rows_of_examples) const;
  /// A step of op f on `core`: its kind's shard math (ShardHost: the core's view, CoreView).
  void run(int core, int f, const MeshAction& action);
  class CoreView;
  /// The producer of op f's operand `which` (0 a, 1 b, 2 its residual; -1: the model's input or none).
  int producer(int f, int which) const;
  /// `which`: the operand (GatherOperand, ScatterOperandGradient).
  void reduce(const std::vector<int>& group, int f, MeshAction::What what, int which);
  /// Op f's operand `which`, split along the sequence, gathered whole on every member.
  void gather_operand(const std::vector<int>& group, int f, int which);
  /// The summed gradient of an operand read whole, each member keeping its piece.
  void scatter_operand_gradient(const std::vector<int>& group, int f, int which);

  const Study& study_;
  FunctionalRuntime& rt_;
  std::vector<std::pair<std::string, int>> mesh_;
  std::map<std::string, std::string> layout_;
  std::vector<std::vector<int>> coords_;
  std::vector<Op> ops_;                     // every layer's ops, in order
  std::vector<int> first_op_;               // layer -> its first op
  std::vector<std::vector<Param>> params_;  // layer -> its parameters
  // Per core: op -> its output, the gradient of it, partial gradients awaiting an all-reduce
  // (2 op + operand), row statistics.
  std::vector<std::map<int, Tensor>> out_, dout_, partial_, gathered_;
  std::vector<std::map<int, Tensor>>
      pending_;  // per core: producing op -> partial sums of its gradient awaiting an all-reduce
  std::vector<std::map<int, std::vector<double>>> stats_;
  std::vector<std::map<int, std::vector<Tensor>>> extras_;     // per core: op -> what its forward saved
  std::vector<std::set<int>> backward_run_;                    // per core: ops whose backward ran this step
  std::vector<std::map<int, std::vector<std::int32_t>>> ids_;  // per core: op -> its rows' ids
  std::vector<Tensor> input_;
  int micro_batches_ = 1;
  std::vector<int> micro_;  ///< per core: the micro-batch it runs
  /// The examples a core's piece `b` of a tensor over the batch covers in its micro-batch.
  Batch examples(int core, const Box& b) const;
};

}  // namespace tpusim
