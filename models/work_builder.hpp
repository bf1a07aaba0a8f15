// Bricks for lowering layers: each call adds an operation's forward ops, its backward ops
// (input gradient, and weight gradient where it has weights), the activations it keeps for
// backward and its transient workspace. Model builders compose these; nothing here knows a
// particular model.
#pragma once

#include <set>

#include "hardware/cost_model.hpp"
#include "models/model.hpp"

namespace tpusim {

class WorkBuilder {
 public:
  /// `act` is bytes per activation element; weights are fp32 masters read as such.
  explicit WorkBuilder(double act) : act_(act) {}

  /// x (t x k) . W (k x n): forward, dX, dW. Keeps x for dW, unless `x_recomputed`: x is an
  /// element-wise result (a normalization's output) recomputed for dW from what it is computed
  /// from, as for a convolution's input (conv).
  void dense(const std::string& name, std::int64_t t, std::int64_t k, std::int64_t n,
             bool x_recomputed = false);
  /// A bias add over t x n (fused), with its gradient (a reduction over t).
  void bias(const std::string& name, std::int64_t t, std::int64_t n);
  /// batch x (m x k) . (k x n) where both operands are activations (attention): forward and
  /// the two operand gradients. Keeps the operands not already kept by another brick.
  void batched_matmul(const std::string& name, std::int64_t batch, std::int64_t m, std::int64_t k,
                      std::int64_t n, bool keep_a = true, bool keep_b = true);
  /// A convolution: forward, dX (unless it reads the model input), dW. Its dW reads its input:
  /// `input` names a materialized tensor it reads (the layer's input, the model's image), kept
  /// once per tensor however many ops read it; empty: its input is an element-wise result (the
  /// ReLU of a normalization's output, a sum of branches) that XLA fuses into the convolution's
  /// operand, forward and backward alike, so it is recomputed from what it is computed from (the
  /// normalization's kept input and statistics, pool outputs) and never kept.
  void conv(const std::string& name, const ConvShape& shape, bool input_gradient = true,
            const std::string& input = "");
  /// Batch normalization over `elements` values of `channels` channels: statistics and
  /// normalization (not fusible: a reduction), gradient; keeps its input.
  void batch_norm(const std::string& name, double elements, std::int64_t channels);
  /// Layer normalization over `elements`: like batch norm but over the feature dimension.
  void layer_norm(const std::string& name, double elements);
  /// An element-wise op fused into its producer (ReLU, residual add): `ops` per element forward,
  /// `grad_ops` backward.
  void elementwise(const std::string& name, double elements, double ops, double grad_ops);
  /// Softmax over `elements`: keeps its output for the gradient, written over its input (which
  /// dies there, so the softmax needs no buffer of its own).
  void softmax(const std::string& name, double elements);
  /// A pooling window of `window` elements per output, `out_elements` outputs, reading
  /// `in_elements`. Keeps nothing itself: a max pool's gradient goes to each window's maximum,
  /// found again in its input, which is an element-wise result recomputed like a convolution's
  /// input; an average pool's gradient needs no activation. A pool output that later recomputed
  /// sums read is kept by the caller (`keep`).
  enum class Pool { Max, Average };
  void pool(const std::string& name, double in_elements, double out_elements, double window,
            Pool kind = Pool::Max);
  /// A table lookup of `rows` rows of `width` from a `vocab` x `width` table; the gradient is a
  /// scatter-add into a dense fp32 table.
  void gather(const std::string& name, double rows, std::int64_t vocab, std::int64_t width);
  /// `rows` rows of `width` activations picked out of `from_rows` (a masked LM's predicted
  /// positions): a copy forward; backward, their gradients scattered into zeros of the whole.
  void pick(const std::string& name, double rows, double from_rows, std::int64_t width);
  /// Softmax cross-entropy over `elements` logits. Its gradient (probabilities minus the one-hot
  /// targets) is computed with the loss in the forward, like TF's SoftmaxCrossEntropyWithLogits,
  /// and is what it keeps: the op that produced the logits reads it as its output gradient, so
  /// that op's backward holds no output gradient of its own.
  void softmax_xent(const std::string& name, double elements);

  void stash(double bytes) { work_.stash_bytes += bytes; }
  /// Keeps the tensor named `tensor` (`bytes`) unless it is kept already; empty: always keeps.
  void keep(const std::string& tensor, double bytes);
  void workspace(double bytes) { work_.workspace_bytes = std::max(work_.workspace_bytes, bytes); }
  /// An op's backward holds its output gradient (`output` elements) and writes its input
  /// gradients (`inputs`); the largest op's set the layer's backward workspace (finish).
  void gradients(double output, double inputs) { gradients_.push_back({output, inputs}); }
  double act() const { return act_; }

  /// The finished work, with what the layer reads and hands on.
  LayerWork finish(double input_bytes, double output_bytes);

 private:
  /// A normalization's ops and the input it keeps (batch and layer norm alike).
  void normalization(const std::string& name, double elements);

  double act_;
  LayerWork work_;
  std::set<std::string> kept_;
  struct Gradients {
    double output = 0, inputs = 0;  ///< elements
  };
  std::vector<Gradients> gradients_;  ///< per op, in forward order
};

}  // namespace tpusim
