// The op vocabulary models lower to, and the TPU core cost model that times an op on one
// TensorCore: MXU time with dimensions padded to the systolic array, VPU time for vector
// work, HBM time for the bytes moved; op time = max(compute, memory) + fixed overhead.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hardware/hardware_spec.hpp"

namespace tpusim {

enum class OpKind {
  MatMul,  ///< batch x (m x k) . (k x n) on the MXUs
  Vector,  ///< element-wise or reduction work on the VPU (elements x ops each)
};

/// A matmul operand as the op reads it from HBM: its elements, their bytes as stored, and the
/// times the op reads it.
struct MatmulOperand {
  double elements = 0, bytes_per_element = 0, passes = 1;
};

/// One op of a lowered layer. Sizes are element counts; `bytes` is HBM traffic (read + write).
struct Op {
  OpKind kind = OpKind::Vector;
  std::string name;
  std::int64_t batch = 1;  ///< MatMul: independent products (e.g. attention heads x examples)
  std::int64_t m = 0;      ///< MatMul: streamed (row) dimension
  std::int64_t k = 0;      ///< MatMul: contraction dimension
  std::int64_t n = 0;      ///< MatMul: output (column) dimension
  double elements = 0;     ///< Vector: elements processed
  double ops_per_element = 0;
  double random_numbers_per_element = 0;  ///< Vector: random numbers drawn per element (a dropout mask)
  double bytes = 0;                       ///< HBM bytes moved if the op runs on its own
  bool fusible = false;                   ///< element-wise: fuses into its producer when the core says so
  bool weight_gradient = false;           ///< backward op computing a weight gradient (vs. an input gradient)
  /// Work a backward does again (flash attention's scores): hardware FLOPs, not model FLOPs.
  bool recompute = false;
  /// Vector work run as several fused kernels (a normalization, a softmax): `bytes` is then one
  /// pass over its tensor, and the core's MultiPassKernels give the passes, the kernels (each
  /// paying the per-op overhead) and the vector operations per element.
  std::optional<MultiPass> multipass;
  /// Multi-pass: the share of the core's vector operations per element of its pattern this op
  /// does (an RMSNorm's of a layer norm's), over the same passes.
  double multipass_vpu_share = 1;
  /// MatMul: the share of its products the model counts (a causal attention product: the half
  /// below the diagonal), and the share the MXU runs (flash attention skips the blocks above
  /// the diagonal; standard attention computes every product and masks after).
  double counted_fraction = 1, computed_fraction = 1;
  /// MatMul in a fused kernel (flash attention's Pallas kernels) whose grid steps through blocks
  /// of `kernel_block` rows x `kernel_block` columns of its m x n product (a block of queries by
  /// a block of keys) instead of the core's matmul tiles; 0: an XLA matmul. Only the product
  /// marked `kernel_steps` (the kernel's scores) counts the kernel's grid steps: the kernel's
  /// other products run inside those steps.
  std::int64_t kernel_block = 0;
  bool kernel_steps = false;
  /// MatMul with a weight among its tensors (a layer's dense or convolution product, forward or
  /// backward: AQT quantizes those dot_generals), which runs at the study's matmul precision
  /// with its two operands (`operands`) quantized first; products of two activations
  /// (attention's scores and context) stay bf16.
  bool quantizable = false;
  std::array<MatmulOperand, 2> operands;
  /// The format its operands enter the MXU in (CostModel::quantized sets it).
  MatmulPrecision precision = MatmulPrecision::Bf16;

  /// The math: 2 x batch x m x k x n for a MatMul (its counted share), 0 for vector work.
  double model_flops() const {
    return kind == OpKind::MatMul && !recompute
               ? 2.0 * double(batch) * double(m) * double(k) * double(n) * counted_fraction
               : 0.0;
  }
};

/// A dense layer's matmul: (m x k) activations times a (k x n) weight shared by all rows.
Op dense_op(std::string name, std::int64_t m, std::int64_t k, std::int64_t n, double activation_bytes,
            double weight_bytes);
/// A batched matmul whose two operands are both activations (attention scores, context).
Op batched_matmul_op(std::string name, std::int64_t batch, std::int64_t m, std::int64_t k, std::int64_t n,
                     double activation_bytes);
/// A 2D convolution as the MXU runs it: a matmul of (batch x out_h x out_w) output pixels by
/// (kernel_h x kernel_w x in_channels) by out_channels. HBM traffic is the real tensors (input,
/// weights, output), not an im2col copy.
struct ConvShape {
  std::int64_t batch = 1, in_h = 1, in_w = 1, in_channels = 1;
  std::int64_t kernel_h = 1, kernel_w = 1, stride = 1, out_channels = 1;
  bool valid = false;  ///< "VALID" padding (no border): the output shrinks by the kernel
  std::int64_t out_h() const { return valid ? (in_h - kernel_h) / stride + 1 : (in_h + stride - 1) / stride; }
  std::int64_t out_w() const { return valid ? (in_w - kernel_w) / stride + 1 : (in_w + stride - 1) / stride; }
  std::int64_t params() const { return kernel_h * kernel_w * in_channels * out_channels; }
};
Op conv_op(std::string name, const ConvShape& c, double activation_bytes, double weight_bytes);
/// The input gradient of a convolution (a transposed convolution: same MACs).
Op conv_input_grad_op(std::string name, const ConvShape& c, double activation_bytes, double weight_bytes);
/// The weight gradient of a convolution: (kernel x in) by pixels by out.
Op conv_weight_grad_op(std::string name, const ConvShape& c, double activation_bytes, double weight_bytes);

/// Element-wise or reduction work: `elements` read and written once at `bytes_per_element`.
Op vector_op(std::string name, double elements, double ops_per_element, double bytes_per_element,
             bool fusible);
/// A normalization or softmax over `elements` at `bytes_per_element`, priced by the core's
/// MultiPassKernels for `pattern`.
Op multipass_op(std::string name, double elements, double bytes_per_element, MultiPass pattern);
/// Pure data movement (gather, copy): `bytes` of HBM traffic, no compute to speak of.
Op memory_op(std::string name, double bytes);

/// What an op costs on one core.
struct OpCost {
  double seconds = 0;  ///< max(mxu, vpu, hbm) + overhead (0 if fused away)
  double mxu_s = 0;    ///< MatMul: padded FLOPs over the peak, plus its grid steps' fixed cost
  double grid_steps = 0, grid_overhead_s = 0;  ///< MatMul: its tiles' grid steps, and their fixed cost
  /// MatMul: what its grid steps' fixed cost adds to `seconds` (0 where HBM or the VPU binds it).
  double grid_added_s = 0;
  /// MatMul in 8 bits: the MXU time its hardware FLOPs would take at the bf16 peak less what they
  /// take at the precision's (the reports' split counts MXU time from the FLOPs).
  double precision_saved_s = 0;
  double vpu_s = 0;
  double hbm_s = 0;
  double model_flops = 0;          ///< the math (unpadded)
  double hardware_flops = 0;       ///< what the MXU really executes (padded)
  const char* bound = "overhead";  ///< "mxu", "vpu", "hbm", "overhead" or "fused"
  /// The part of `seconds` HBM's bandwidth sets (its HBM time when HBM binds it, else 0): what a
  /// chip with slower HBM stretches.
  double hbm_bound_s() const { return bound[0] == 'h' ? hbm_s : 0.0; }
};

/// Times ops on one core of a hardware generation. Behind one interface so the model
/// library can refine it without touching schedules or the engine.
class CostModel {
 public:
  explicit CostModel(const CoreSpec& core) : core_(core) {}
  OpCost cost(const Op& op) const;
  /// A quantizable matmul under the core's matmul precision (other than bf16): each operand
  /// quantized by a vector pass of its own (read as stored, scaled, rounded, written at one
  /// byte; core.quantize_vpu_ops_per_element) and the product of the quantized operands, which
  /// reads them at one byte and runs at the precision's peak. nullopt: the op runs as it is.
  struct Quantized {
    std::vector<Op> quantize;
    Op matmul;
  };
  std::optional<Quantized> quantized(const Op& op) const;
  /// The grid steps a matmul runs as: its padded dimensions cut into tiles of at most the core's
  /// matmul_tile_rows x depth x cols, the rows growing where the depth or width is narrower than
  /// the tile so that a tile's operands and result fill the full tile's working set (the same
  /// on-chip memory); times the independent products and the share of them computed.
  double grid_steps(const Op& op) const;
  /// A dimension rounded up to a multiple of `tile`.
  static std::int64_t pad(std::int64_t dim, std::int64_t tile) { return (dim + tile - 1) / tile * tile; }
  const CoreSpec& core() const { return core_; }

 private:
  CoreSpec core_;
};

}  // namespace tpusim
