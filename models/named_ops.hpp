// Ops over named dimensions (Mesh-TensorFlow's view of a model): every tensor says which
// dimensions it has, so a layout that splits a dimension over a mesh dimension determines each
// core's shard of every op and the collectives the split induces. Einsums cover matmuls
// (contracted dimensions are those of the inputs absent from the output); the other kinds are
// element-wise work, normalizations and softmaxes (which reduce over one dimension) and gathers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hardware/hardware_spec.hpp"

namespace tpusim {

struct Dim {
  std::string name;  ///< batch, seq, d_model, d_ff, heads, d_kv, vocab, ...
  std::int64_t size = 0;
};

struct NamedTensor {
  std::vector<Dim> dims;
  bool weight = false;  ///< a parameter (its gradient is reduced; it is sharded in HBM)
  bool keep = false;    ///< an activation kept from forward for backward
  int copies = 1;       ///< identical-shape tensors it stands for (a norm's scale and shift)
  /// Which activation of the layer this is, where an op reads something other than the previous
  /// op's output ("in": the layer's input; otherwise the `id` of an earlier op's output).
  /// Empty: the previous op's output (or, for an op's output, a name nobody refers to).
  std::string id;
  /// A weight of another layer read as an input (an embedding table tied to the output layer):
  /// its gradient adds to that layer's weight gradient, not to an activation gradient in flight.
  bool tied = false;
  /// Lives only in a fused kernel's on-chip memory (flash attention's scores and probabilities):
  /// never written to or read from HBM, never kept.
  bool on_chip = false;
  /// Times the op's kernel reads it from HBM (flash attention's keys and values: once per block
  /// of queries; causal: only the blocks up to the diagonal, (blocks + 1) / 2 on average).
  double passes = 1;
  double elements() const {
    double n = copies;
    for (const auto& d : dims) n *= double(d.size);
    return n;
  }
  bool has(const std::string& name) const {
    for (const auto& d : dims)
      if (d.name == name) return true;
    return false;
  }
};

struct NamedOp {
  /// What kind of op it is: the name of a registered kind (models/ops/registry.cpp), each a file
  /// under models/ops/ that owns the op's hardware ops, memory, layout collectives and host math:
  ///   "einsum"       a . b -> out
  ///   "elementwise"  a -> out, `ops` per element, fusible into its producer; b: optional bias
  ///   "reduction"    a -> out, normalizing over `reduce_dim` (layer norm, softmax): needs its
  ///                  statistics; b: optional scale and shift
  ///   "gather"       rows of table b picked by ids a -> out (an embedding; b an activation: rows of
  ///                  it, as a masked LM picks its predicted positions)
  ///   "conv"         a [batch, height, width, channels] * b [kernel, channels_out] -> out, a
  ///                  `window` x `window` convolution with `stride` ("SAME" padding)
  ///   "batch_norm"   a [batch, height, width, channels] -> out: per-channel statistics over the
  ///                  batch and the image (b: scale and shift)
  ///   "pool"         a -> out, a `window` x `window` pooling with `stride`; a window covering
  ///                  the whole image is a global pool
  ///   "dispatch"     a -> out, the same values rearranged between tokens [batch, seq, d_model]
  ///                  and expert slots [experts, capacity, d_model] (mixture-of-experts routing;
  ///                  an all-to-all where a layout splits the experts)
  /// What an element-wise op, a reduction or a pool computes, which its kind's host math runs in
  /// functional mode; Unspecified where only the cost is known.
  enum class Math {
    Unspecified,
    Bias,           ///< Elementwise: out = a + b (b over a's last dimension)
    BiasRelu,       ///< Elementwise: out = max(a + b, 0) (b optional: a ReLU alone)
    SoftmaxXent,    ///< Reduction over the last dimension: softmax cross-entropy against the targets
    LayerNorm,      ///< Reduction over the last dimension: (a - mean) / std * scale + shift (b: 2 copies)
    RmsNorm,        ///< Reduction over the last dimension: a / rms(a) * scale (b: 1 copy; cost only)
    Rotary,         ///< Elementwise: rotary positions on queries or keys (cost only)
    Residual,       ///< Elementwise: out = a + b (optional bias over the last dimensions) + `skip`
    CausalSoftmax,  ///< Reduction over the last dimension (positions attended to): softmax of
                    ///< `scale` * a, positions after the query's (the second-to-last dimension) masked
    MaxPool,        ///< Pool: the window's maximum (its gradient finds it again in the input)
    AveragePool,    ///< Pool: the window's mean (its gradient needs no activation)
    BiasGelu,       ///< Elementwise: out = gelu(a + b), BERT's tanh approximation
    ResidualRelu,   ///< Elementwise: out = max(a + `skip`, 0), a ResNet block's sum and ReLU
    Dropout,        ///< Elementwise: out = a * mask / keep with a random mask drawn here and kept
                    ///< for the backward (`a`'s keep flag stands for the mask; cost only)
    GatedSilu,      ///< Elementwise: out = silu(a) * b, b an activation (SwiGLU's gate times its up)
    GatedGelu,      ///< Elementwise: out = gelu(a) * b, b an activation (GEGLU)
  };
  std::string kind = "einsum";
  Math math = Math::Unspecified;
  std::string name;
  NamedTensor a, b, out;
  double ops =
      1;  ///< per element (Elementwise, Pool); normalizations and softmaxes: the core's MultiPassKernels
  std::string reduce_dim;   ///< Reduction
  int window = 1;           ///< Conv, Pool (Conv: its height)
  int window_w = 0;         ///< Conv: its width (0: square)
  bool valid = false;       ///< Conv: no padding ("VALID") instead of "SAME"
  int stride = 1;           ///< Conv, Pool
  std::string skip;         ///< Residual: the id of the activation added
  double scale = 1;         ///< CausalSoftmax
  double backward_ops = 0;  ///< Elementwise: per element of its gradient (0: `ops`)
  /// Einsum: the share of its products the model counts and the share the MXU runs, forward and
  /// backward (causal attention's scores and context: Op::counted_fraction, computed_fraction).
  double counted_fraction = 1, computed_fraction = 1;
  /// Einsum in a fused kernel (flash attention's scores and context): the kernel's grid steps
  /// through blocks of this many queries by as many keys (Op::kernel_block); 0: an XLA matmul.
  std::int64_t kernel_block = 0;
  std::vector<NamedTensor> tensors() const;  ///< a, b (if any), out
};

/// A tensor a layer reads from earlier layers or hands on to later ones (what a pipeline stage
/// stashes and sends), at its bytes per element: activations at the model's dtype, ids as int32,
/// losses as fp32.
struct BoundaryTensor {
  NamedTensor tensor;
  double bytes_per_element = 0;
};
/// What a layer reads from earlier layers and what it hands on, for a batch.
struct LayerBoundary {
  std::vector<BoundaryTensor> in, out;
};
/// An activation of `dims` at `bytes_per_element`.
BoundaryTensor boundary_tensor(std::vector<Dim> dims, double bytes_per_element);
/// A flat activation [batch, width].
BoundaryTensor features(std::int64_t batch, std::int64_t width, double act);
/// What a model's last layer hands on: one fp32 loss per example (`per_example` of them).
BoundaryTensor losses(std::int64_t batch, std::int64_t per_example = 1);
/// A layer's boundary for a batch.
using Boundary = std::function<LayerBoundary(std::int64_t batch)>;

/// Dimension names a layout may split.
const std::vector<std::string>& named_dims();

/// Shorthands for building ops.
NamedTensor act(std::vector<Dim> dims, bool keep = false);
NamedTensor weight(std::vector<Dim> dims, int copies = 1);
NamedOp einsum(std::string name, NamedTensor a, NamedTensor b, NamedTensor out);
NamedOp elementwise(std::string name, NamedTensor a, double ops, NamedTensor bias = {});
NamedOp reduction(std::string name, NamedTensor a, std::string reduce_dim, NamedTensor params = {});
/// A ReLU of `a` alone (one operation per element; its gradient reads its output).
NamedOp relu(std::string name, NamedTensor a);
/// Dropout of `a` (kept: it stands for the mask, the same shape): a random number, a compare, a
/// select and a scale per element forward; the gradient multiplies by the mask.
NamedOp dropout(std::string name, NamedTensor a);
NamedOp gather(std::string name, NamedTensor ids, NamedTensor table, NamedTensor out);
/// Tokens routed to expert slots, or back (a mixture of experts' dispatch and combine).
NamedOp dispatch(std::string name, NamedTensor a, NamedTensor out);
/// An activation [batch, height, width, channels].
NamedTensor image(std::int64_t batch, std::int64_t size, std::int64_t channels, bool keep = false);
/// Image ops over [batch, height, width, channels] (height and width may be split: spatial
/// partitioning).
NamedOp conv(std::string name, std::int64_t batch, std::int64_t size, std::int64_t in, std::int64_t out,
             int window, int stride);
/// A `kh` x `kw` convolution (valid: unpadded).
NamedOp conv(std::string name, std::int64_t batch, std::int64_t size, std::int64_t in, std::int64_t out,
             int kh, int kw, int stride, bool valid = false);
NamedOp batch_norm(std::string name, std::int64_t batch, std::int64_t size, std::int64_t channels);
NamedOp pool(std::string name, std::int64_t batch, std::int64_t size, std::int64_t channels, int window,
             int stride);

/// A dense layer (with bias; ReLU, or softmax cross-entropy when `classifier`) at position
/// `index` of a stack: activations alternate between the names d_model and d_ff (d_model
/// first), the classifier's output is vocab. Without `bias` or `relu`, those ops are left out.
std::function<std::vector<NamedOp>(std::int64_t)> dense_named_ops(std::int64_t in, std::int64_t out,
                                                                  int index, bool classifier,
                                                                  bool bias = true, bool relu = true);

}  // namespace tpusim
