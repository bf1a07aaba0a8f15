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

  /// x (t x k) . W (k x n): forward, dX, dW. Keeps x for dW.
  void dense(const std::string& name, std::int64_t t, std::int64_t k, std::int64_t n);
  /// A bias add over t x n (fused), with its gradient (a reduction over t).
  void bias(const std::string& name, std::int64_t t, std::int64_t n);
  /// batch x (m x k) . (k x n) where both operands are activations (attention): forward and
  /// the two operand gradients. Keeps the operands not already kept by another brick.
  void batched_matmul(const std::string& name, std::int64_t batch, std::int64_t m, std::int64_t k,
                      std::int64_t n, bool keep_a = true, bool keep_b = true);
  /// A convolution: forward, dX (unless it reads the model input), dW. Keeps its input for dW,
  /// once per tensor: `input` names the tensor it reads (empty: a tensor of its own), and an
  /// input another op of the layer already keeps is not kept twice.
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
  /// Softmax over `elements` (keeps its output for the gradient).
  void softmax(const std::string& name, double elements);
  /// A pooling window of `window` elements per output, `out_elements` outputs, reading
  /// `in_elements`. A max pool keeps its input (the gradient goes to each window's maximum; once
  /// per tensor, as for conv); an average pool's gradient needs no activation and keeps nothing.
  enum class Pool { Max, Average };
  void pool(const std::string& name, double in_elements, double out_elements, double window,
            Pool kind = Pool::Max, const std::string& input = "");
  /// A table lookup of `rows` rows of `width` from a `vocab` x `width` table; the gradient is a
  /// scatter-add into a dense fp32 table.
  void gather(const std::string& name, double rows, std::int64_t vocab, std::int64_t width);
  /// `rows` rows of `width` activations picked out of `from_rows` (a masked LM's predicted
  /// positions): a copy forward; backward, their gradients scattered into zeros of the whole.
  void pick(const std::string& name, double rows, double from_rows, std::int64_t width);
  /// Softmax cross-entropy over `elements` logits.
  void softmax_xent(const std::string& name, double elements);

  void stash(double bytes) { work_.stash_bytes += bytes; }
  /// Keeps the tensor named `tensor` (`bytes`) unless it is kept already; empty: always keeps.
  void keep(const std::string& tensor, double bytes);
  void workspace(double bytes) { work_.workspace_bytes = std::max(work_.workspace_bytes, bytes); }
  double act() const { return act_; }

  /// The finished work, with what the layer reads and hands on.
  LayerWork finish(double input_bytes, double output_bytes);

 private:
  /// A normalization's ops and the input it keeps (batch and layer norm alike).
  void normalization(const std::string& name, double elements);

  double act_;
  LayerWork work_;
  std::set<std::string> kept_;
};

}  // namespace tpusim
