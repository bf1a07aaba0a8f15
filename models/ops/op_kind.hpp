// What each kind of named op is: one registered class per kind, in a file of its own under
// models/ops/ (einsum, elementwise, reduction, gather, conv, batch_norm, pool). A kind owns the
// hardware ops of a core's shard of it, forward and backward (the cost model prices them), what
// its backward needs held (the gradients in flight besides the kept tensors), how a mesh layout
// splitting its dimensions adds collectives around it, and its host math for functional mode, on
// whole tensors and on a mesh's shards.
// The lowerings and interpreters (op_lowering, the mesh lowering, the whole-tensor interpreter,
// the mesh executor) walk a layer's ops and ask each op's kind; none switches on kinds. A new
// kind of op is one file plus one registry line (registry.cpp).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hardware/cost_model.hpp"
#include "models/functional.hpp"
#include "models/model.hpp"
#include "models/named_ops.hpp"
#include "models/sharding.hpp"

namespace tpusim {

/// What a layout induces around an op, as the mesh lowering offers it to the op's kind: the
/// core's computations and the collectives over the mesh dimensions that split its tensors.
class MeshLoweringSink {
 public:
  virtual ~MeshLoweringSink() = default;
  /// Runs `op` on the core (forward or backward, as the lowering pass is); returns its model FLOPs.
  virtual double compute(const Op& op) = 0;
  /// The weight-gradient half of a backward (a convolution's dw).
  virtual void compute_weight_gradient(const Op& op) = 0;
  /// Partial sums of the op's output over `mesh` dimensions (a split contraction, a split table,
  /// a global pool over a split image), all-reduced before the next op reads them; `what` names
  /// the collective after the op ("partial sums", "rows").
  virtual void sum_output(const std::string& what, const std::vector<std::string>& mesh, double bytes) = 0;
  /// The op's tensor exchanged among the cores of `mesh` dimensions (an all-to-all, blocking: a
  /// mixture-of-experts' tokens to and from the experts' cores), `bytes` the buffer each holds;
  /// `what` names it after the op. Nothing when `mesh` is empty.
  virtual void exchange(const std::string& what, const std::vector<std::string>& mesh, double bytes) = 0;
  /// The mesh dimensions splitting the image (a global pool's partial sums).
  virtual std::vector<std::string> spatial_mesh() const = 0;
  /// An einsum under the layout: its operands gathered along a split sequence, its forward and its
  /// partial sums (returns the local model FLOPs); its backward, with its input gradient's partial
  /// sums reduced now or deferred to the lazy all-reduce of an activation several einsums read.
  /// The lowering owns these: they depend on which op produced each operand.
  virtual double einsum_forward(const NamedOp& op, const Op& forward) = 0;
  virtual void einsum_backward(const NamedOp& op, const Op& input_gradient, const Op& operand_gradient) = 0;
  /// A normalization's statistics over its split reduced dimension (forward), or its gradient's
  /// row sums (backward).
  virtual void combine_statistics(const NamedOp& op) = 0;
  /// Cross-replica batch norm's statistics (forward) or gradient statistics (backward).
  virtual void batch_norm_statistics(const NamedOp& op) = 0;
  /// The halo rows a window reads from its spatial neighbours (forward) or sends back (backward).
  virtual void halos(const NamedOp& op) = 0;
  /// The gradient of the op's weight (if it has one), reduced over the mesh dimensions that
  /// split `operands` but not the weight.
  virtual void weight_gradient(const NamedOp& op, const std::vector<const NamedTensor*>& operands) = 0;
  /// True when the op at hand reads the model's input (which needs no gradient).
  virtual bool reads_model_input() const = 0;
};

/// What the whole-tensor interpreter hands an op's host math in the forward pass.
struct HostForward {
  const Tensor& a;                  ///< the first operand's value (empty for a lookup)
  const Tensor* b = nullptr;        ///< the second operand, when an activation
  const Tensor* skip = nullptr;     ///< a residual's added activation
  const Tensor* weights = nullptr;  ///< the op's first weight copy (copies follow)
  Tensor* extras = nullptr;         ///< its saved_extras() tensors, to fill
  Saved& saved;                     ///< ids and targets of the layer's call
  const DataSource& data;           ///< the batch's ids and targets
  const Batch& batch;
  double& loss;  ///< a loss op adds its share
};

/// ... and in the backward pass, with the gradients it produces.
struct HostBackward {
  const Tensor& a;                  ///< the first operand's value
  const Tensor* b = nullptr;        ///< the second operand, when an activation
  const Tensor& y;                  ///< its own output's value
  const Tensor* weights = nullptr;  ///< its first weight copy
  const Tensor* extras = nullptr;   ///< what its forward saved besides its output
  const Saved& saved;
  const Batch& batch;
  Tensor& dy;                      ///< its output's gradient (a loss fills it)
  Tensor* weight_grads = nullptr;  ///< its weight copies' gradients, added to
  Tensor da, db, dskip;            ///< its operands' gradients (empty: none)
};

/// One core's view of an op on a mesh's shards, as functional mode's mesh executor offers it to
/// the op's kind (schedules/mesh_functional.cpp): where the core's pieces of the op's tensors lie
/// in the whole ones, the values it reads and writes, where its operands' gradients go, and what
/// it keeps between its steps (row statistics, per-row ids).
class ShardHost {
 public:
  /// A core's piece of a tensor: the whole tensor's sizes, where the piece starts, its sizes.
  struct Box {
    std::vector<std::int64_t> whole, offset, local;
    std::int64_t elements() const;
  };
  /// Where an operand's gradient goes: complete on this core; a partial sum added to its
  /// producer's pending sum, which a later all-reduce completes; or, for an operand read whole
  /// along a sequence its producer splits, kept for the reduce-scatter back to the pieces.
  enum class Part { Whole, Pending, OfGathered };

  virtual ~ShardHost() = default;
  /// This core's piece of a tensor of the op.
  virtual Box box(const NamedTensor& t) const = 0;
  /// Whether the layout splits tensor dimension `dim`.
  virtual bool split(const std::string& dim) const = 0;
  /// Operand 0 (a) or 1 (b) as the op reads it (its all-gathered copy where it reads whole a
  /// sequence its producer splits), or the model's input.
  virtual const Tensor& operand(int which) = 0;
  /// Whether operand `which` is read whole along a sequence its producer splits.
  virtual bool reads_gathered(int which) const = 0;
  /// Whether operand `which` (0, 1; 2 the residual) is an activation some op of the step produced
  /// (not the model's input, not a weight, not absent).
  virtual bool produced(int which) const = 0;
  /// The residual an op adds, or null.
  virtual const Tensor* skip() = 0;
  /// Copy `k` of the op's weight on this core (its gradient with `gradient`), or null without one.
  virtual Tensor* weight(int k, bool gradient) = 0;
  /// The op's output on this core (a forward step writes it).
  virtual Tensor& output() = 0;
  /// The gradient of its output (has_output_gradient: whether one has arrived).
  virtual Tensor& output_gradient() = 0;
  virtual bool has_output_gradient() const = 0;
  /// Adds `g` to the gradient of operand `which` (0, 1; 2 the residual).
  virtual void add_gradient(int which, Tensor g, Part part) = 0;
  /// What the op keeps between steps on this core: row statistics (`slot` 0: the forward's, 1:
  /// its gradient's), the tensors its whole-tensor forward saves, per-row ids.
  virtual std::vector<double>& statistics(int slot) = 0;
  virtual std::vector<Tensor>& extras() = 0;
  virtual std::vector<std::int32_t>& ids() = 0;
  /// True the first time this step's backward of the op reaches it on this core.
  virtual bool first_backward() = 0;
  /// Per row of this core's piece of `rows`: the target (the loss's) or token (a lookup's) of
  /// the examples the rows belong to.
  virtual std::vector<std::int32_t> targets_per_row(const NamedTensor& rows) = 0;
  virtual std::vector<std::int32_t> tokens_per_row(const NamedTensor& rows) = 0;
  /// Whether this core is the first of those holding the same piece of a tensor over `dims`.
  virtual bool first_replica(const std::vector<std::string>& dims) const = 0;
  /// Adds this core's share of the loss.
  virtual void add_loss(double loss) = 0;
  /// The micro-batches a replica's batch runs as (gradient accumulation): the op sees one, and a
  /// loss averaged over the whole batch divides by this many times its rows.
  virtual int micro_batches() const { return 1; }
};

/// What a layout gives an op on the shards, for the check of whether its kind can run there.
struct ShardSupport {
  std::function<bool(const std::string&)> split;  ///< whether the layout splits a tensor dimension
  bool second_operand = false;                    ///< its second operand is an activation
  bool residual = false;                          ///< it adds a residual
  bool first_op = false;                          ///< the model's first op
};

/// A step of an op on a core's shards: its forward, its input gradient (the whole backward of an
/// op other than an einsum), an einsum's gradient of its second operand.
enum class ShardStep { Forward, Backward, WeightGradient };

class NamedOpKind {
 public:
  virtual ~NamedOpKind() = default;

  // --- Cost on a core ----------------------------------------------------------------------------
  /// A core's shard of the op's forward.
  virtual Op forward(const NamedOp& op, const Sharding& s, double act) const = 0;
  /// Its backward for the gradient of its first operand (the whole backward of ops with one).
  virtual Op input_gradient(const NamedOp& op, const Sharding& s, double act) const = 0;
  /// Its backward for its second operand or weight, where it has one (an einsum's db).
  virtual std::optional<Op> operand_gradient(const NamedOp&, const Sharding&, double) const {
    return std::nullopt;
  }
  /// What its backward computes again before its gradients (flash attention's scores and
  /// softmax, never kept): ops marked `recompute`, hardware FLOPs only.
  virtual std::vector<Op> recomputed_in_backward(const NamedOp&, const Sharding&, double) const { return {}; }
  /// False when reading the model's input it skips its input gradient (a convolution's dx; an
  /// einsum's da is computed all the same, as the frameworks' dense layers do).
  virtual bool input_gradient_of_model_input() const { return true; }
  /// Channels whose statistics cross-replica batch norm combines over a group of replicas (a
  /// batch norm's); 0: none.
  virtual std::int64_t replica_statistics_channels(const NamedOp&) const { return 0; }
  /// How it runs as the core's multi-pass kernels (normalizations, softmaxes), if it does.
  virtual std::optional<MultiPass> multipass(const NamedOp&, bool /*backward*/) const { return std::nullopt; }

  // --- Memory ------------------------------------------------------------------------------------
  /// Fuses into its producer, in place: no transient and no gradients in flight of its own.
  virtual bool fuses_into_producer() const { return false; }
  /// Its output is a loss per row, and its gradient is what it keeps (softmax cross-entropy): the
  /// op producing its input reads that as its output gradient.
  virtual bool is_loss(const NamedOp&) const { return false; }
  /// Local elements of its operands' gradients that its backward holds along with its output's.
  virtual double operand_gradients(const NamedOp& op, const Sharding& s, bool reads_model_input) const = 0;
  /// Bytes its backward needs kept besides the tensors marked `keep` (a lookup's ids).
  virtual double kept_extra_bytes(const NamedOp&, const Sharding&) const { return 0; }
  /// A matmul against weights on the MXU (a dense projection, a convolution): re-materialization's
  /// "save_dots" policy keeps its output and recomputes the other ops, attention's products of
  /// two activations among them (JAX's dots_with_no_batch_dims_saveable).
  virtual bool is_dot(const NamedOp&) const { return false; }

  // --- Under a mesh layout -----------------------------------------------------------------------
  /// Its forward and the collectives a layout splitting its tensors induces; returns the local
  /// model FLOPs the mesh report lists for it (matmuls and convolutions; 0 for vector work).
  virtual double lower_forward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const;
  /// Its backward and the collectives the layout induces (an einsum's partial input gradients are
  /// the mesh lowering's own: it defers them to the activation's producer).
  virtual void lower_backward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const;

  // --- Host math (functional mode) ---------------------------------------------------------------
  /// Why the whole-tensor interpreter cannot run it ("" when it can), from the op alone.
  virtual std::string missing_host_math(const NamedOp& op) const = 0;
  /// The initial value of copy `copy` of its weight, deterministic in `seed` and the
  /// parameter's `index`: Xavier-uniform over the dimensions it contracts with its other operand
  /// (fan in) and the rest (fan out).
  virtual Tensor initial_weight(const NamedOp& op, int copy, std::uint64_t seed, int index) const;
  /// Its first operand is the ids a lookup reads from the data, not an activation (functional
  /// mode: only a first op of the model does).
  virtual bool reads_ids() const { return false; }
  /// Tensors its forward saves for its backward besides its output (layer norm: mean and rstd).
  virtual int saved_extras(const NamedOp&) const { return 0; }
  /// Its forward on whole tensors: the output (empty for a loss).
  virtual Tensor host_forward(const NamedOp& op, HostForward& f) const;
  /// Its backward on whole tensors: fills da (and db, dskip, the weight gradients).
  virtual void host_backward(const NamedOp& op, HostBackward& b) const;

  // --- Host math on a mesh's shards (functional mode) --------------------------------------------
  /// Why it cannot run on the pieces a layout gives a core ("" when it can). By default a split
  /// batch only: each core's examples through the whole-tensor math (convolutions, batch norms
  /// over a replica's own examples, pools); halos and split statistics have no host math.
  virtual std::string missing_shard_math(const NamedOp& op, const ShardSupport& s) const;
  /// It reads an operand whole along a sequence its producer splits (an einsum's keys and values).
  virtual bool reads_split_sequence_whole() const { return false; }
  /// One step of it on a core's pieces (`partial`: an einsum's gradient of an activation is a
  /// partial sum). By default its whole-tensor math on the pieces at their local sizes, the whole
  /// backward at the first backward step (a convolution's weight gradient comes with its input
  /// gradient).
  virtual void shard_step(const NamedOp& op, ShardStep step, bool partial, ShardHost& h) const;
  /// After a layout splitting what it normalizes: its row statistics (or, with `gradient`, its
  /// gradient's row sums) combined over `group`, each member's step finished.
  virtual void shard_combine(const NamedOp& op, bool gradient, const std::vector<ShardHost*>& group) const;
};

/// The kind of `op`: the registered kind named `op.kind` (SimulationError if none: a model
/// builder's bug).
const NamedOpKind& op_kind(const NamedOp& op);
/// The registered kinds' names, sorted.
std::vector<std::string> op_kind_names();

// Registered kinds (one per file in models/ops/).
std::unique_ptr<const NamedOpKind> make_einsum_kind();
std::unique_ptr<const NamedOpKind> make_elementwise_kind();
std::unique_ptr<const NamedOpKind> make_reduction_kind();
std::unique_ptr<const NamedOpKind> make_gather_kind();
std::unique_ptr<const NamedOpKind> make_conv_kind();
std::unique_ptr<const NamedOpKind> make_batch_norm_kind();
std::unique_ptr<const NamedOpKind> make_pool_kind();
std::unique_ptr<const NamedOpKind> make_dispatch_kind();

// Shared by the kinds.
/// x . y -> z as a (batched) matmul of local sizes: batch dims in all three, m in x and z, k in
/// x and y, n in y and z.
Op local_matmul(const std::string& name, const Sharding& s, const NamedTensor& x, const NamedTensor& y,
                const NamedTensor& z, double act);
/// A tensor of `op.b`'s shape (one copy), Xavier-uniform over `fan_in` and the rest of its elements.
Tensor xavier(const NamedOp& op, double fan_in, std::uint64_t seed, int index);
/// `forward` done again in a backward (recomputed_in_backward): hardware FLOPs only.
std::vector<Op> recomputed(Op forward);
/// `forward` done again by each of flash attention's two backward kernels (the keys' and values'
/// gradients, "_dkv"; the queries', "_dq").
std::vector<Op> recomputed_by_each_backward_kernel(Op forward);
/// A normalization or softmax as its multi-pass kernels, or one element-wise pass where it has
/// none (softmax cross-entropy's gradient).
Op norm_or_softmax(const NamedOp& op, const Sharding& s, double act, bool backward);

}  // namespace tpusim
