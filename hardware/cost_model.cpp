#include "hardware/cost_model.hpp"

#include <algorithm>
#include <cmath>

#include "hardware/errors.hpp"

namespace tpusim {

Op dense_op(std::string name, std::int64_t m, std::int64_t k, std::int64_t n, double activation_bytes,
            double weight_bytes) {
  Op op;
  op.kind = OpKind::MatMul;
  op.name = std::move(name);
  op.m = m;
  op.k = k;
  op.n = n;
  op.bytes = double(m) * double(k) * activation_bytes + double(k) * double(n) * weight_bytes +
             double(m) * double(n) * activation_bytes;
  op.quantizable = true;
  op.operands = {MatmulOperand{double(m) * double(k), activation_bytes},
                 MatmulOperand{double(k) * double(n), weight_bytes}};
  return op;
}

Op batched_matmul_op(std::string name, std::int64_t batch, std::int64_t m, std::int64_t k, std::int64_t n,
                     double activation_bytes) {
  Op op;
  op.kind = OpKind::MatMul;
  op.name = std::move(name);
  op.batch = batch;
  op.m = m;
  op.k = k;
  op.n = n;
  op.bytes = double(batch) * (double(m) * k + double(k) * n + double(m) * n) * activation_bytes;
  return op;
}

Op conv_op(std::string name, const ConvShape& c, double act, double weight_bytes) {
  Op op;
  op.kind = OpKind::MatMul;
  op.name = std::move(name);
  // Output pixels over the batch: checked, as an absurd batch x image overflows 64-bit counts.
  if (__builtin_mul_overflow(c.batch, c.out_h(), &op.m) || __builtin_mul_overflow(op.m, c.out_w(), &op.m) ||
      op.m > (std::int64_t(1) << 53))
    throw ConfigError("study", "batch", std::to_string(c.batch) + " examples on a core",
                      "a batch whose convolution outputs (examples x output height x width) stay below 2^53 "
                      "pixels (here " +
                          std::to_string(c.out_h()) + " x " + std::to_string(c.out_w()) + " per example)");
  op.k = c.kernel_h * c.kernel_w * c.in_channels;
  op.n = c.out_channels;
  op.bytes = double(c.batch) * c.in_h * c.in_w * c.in_channels * act + double(c.params()) * weight_bytes +
             double(op.m) * c.out_channels * act;
  op.quantizable = true;
  op.operands = {MatmulOperand{double(c.batch) * c.in_h * c.in_w * c.in_channels, act},
                 MatmulOperand{double(c.params()), weight_bytes}};
  return op;
}

Op conv_input_grad_op(std::string name, const ConvShape& c, double act, double weight_bytes) {
  Op op = conv_op(std::move(name), c, act, weight_bytes);
  // dX = dY (pixels x out) . W^T (out x kernel*in), scattered back: same MACs, same tensors.
  std::swap(op.k, op.n);
  op.operands[0] = MatmulOperand{double(op.m) * double(c.out_channels), act};
  return op;
}

Op conv_weight_grad_op(std::string name, const ConvShape& c, double act, double weight_bytes) {
  Op op = conv_op(std::move(name), c, act, weight_bytes);
  // dW = X^T (kernel*in x pixels) . dY (pixels x out).
  const std::int64_t pixels = op.m;
  op.m = op.k;
  op.k = pixels;
  op.weight_gradient = true;
  op.operands[1] = MatmulOperand{double(pixels) * double(c.out_channels), act};
  return op;
}

Op vector_op(std::string name, double elements, double ops_per_element, double bytes_per_element,
             bool fusible) {
  Op op;
  op.kind = OpKind::Vector;
  op.name = std::move(name);
  op.elements = elements;
  op.ops_per_element = ops_per_element;
  op.bytes = 2.0 * elements * bytes_per_element;  // read once, write once
  op.fusible = fusible;
  return op;
}

Op multipass_op(std::string name, double elements, double bytes_per_element, MultiPass pattern) {
  Op op;
  op.kind = OpKind::Vector;
  op.name = std::move(name);
  op.elements = elements;
  op.bytes = elements * bytes_per_element;
  op.multipass = pattern;
  return op;
}

Op memory_op(std::string name, double bytes) {
  Op op;
  op.kind = OpKind::Vector;
  op.name = std::move(name);
  op.bytes = bytes;
  return op;
}

double CostModel::grid_steps(const Op& op) const {
  if (op.m <= 0 || op.k <= 0 || op.n <= 0 || op.batch <= 0) return 0;  // an empty product: no grid
  if (op.kernel_block > 0) {  // a fused kernel's grid: a step per block of its product's plane
    const double b = double(op.kernel_block);
    return op.kernel_steps ? double(op.batch) * std::ceil(double(op.m) / b) * std::ceil(double(op.n) / b) *
                                 op.computed_fraction
                           : 0.0;
  }
  const double row_pad = core_.matmul_row_padding, depth_pad = core_.mxu_rows;
  const double m = double(pad(op.m, core_.matmul_row_padding)), k = double(pad(op.k, core_.mxu_rows)),
               n = double(pad(op.n, core_.mxu_cols));
  const double R = core_.matmul_tile_rows, D = core_.matmul_tile_depth, C = core_.matmul_tile_cols;
  // The full tile's working set (its operand tiles and result tile, in elements). A dimension
  // smaller than the tile is taken whole; the room it leaves goes to the rows, then the depth.
  const double budget = R * D + D * C + R * C, cols = std::min(n, C);
  auto grow = [](double whole, double tile, double room, double step) {
    return std::min(whole, std::max(std::min(whole, tile), std::floor(room / step) * step));
  };
  const double rows = grow(m, R, (budget - std::min(k, D) * cols) / (std::min(k, D) + cols), row_pad);
  const double depth = grow(k, D, (budget - rows * cols) / (rows + cols), depth_pad);
  return double(op.batch) * std::ceil(m / rows) * std::ceil(k / depth) * std::ceil(n / cols) *
         op.computed_fraction;
}

std::optional<CostModel::Quantized> CostModel::quantized(const Op& op) const {
  const MatmulPrecision p = core_.matmul_precision;
  if (p == MatmulPrecision::Bf16 || op.kind != OpKind::MatMul || !op.quantizable) return std::nullopt;
  Quantized q{{}, op};
  q.matmul.precision = p;
  const char* side[] = {"_quantize_a", "_quantize_b"};
  for (std::size_t i = 0; i < 2; ++i) {
    const MatmulOperand& x = op.operands[i];
    if (x.elements <= 0 || x.bytes_per_element <= 1) continue;
    Op pass = vector_op(op.name + side[i], x.elements, core_.quantize_vpu_ops, x.bytes_per_element, false);
    pass.bytes = x.elements * (x.bytes_per_element + 1.0);  // read as stored, written at one byte
    q.quantize.push_back(std::move(pass));
    q.matmul.bytes -= x.elements * x.passes * (x.bytes_per_element - 1.0);
  }
  return q;
}

OpCost CostModel::cost(const Op& op) const {
  OpCost c;
  c.model_flops = op.model_flops();
  if (op.kind == OpKind::MatMul) {
    const double padded = 2.0 * double(op.batch) * double(pad(op.m, core_.matmul_row_padding)) *
                          double(pad(op.k, core_.mxu_rows)) * double(pad(op.n, core_.mxu_cols)) *
                          op.computed_fraction;
    c.hardware_flops = padded;
    c.grid_steps = grid_steps(op);
    c.grid_overhead_s =
        c.grid_steps * core_.matmul_grid_step_overhead_cycles / core_.clock_hz / double(core_.tensor_cores);
    const double ratio = core_.peak_ratio(op.precision).value_or(1.0);
    c.mxu_s = padded / (core_.peak_matmul_flops_per_s() * ratio) + c.grid_overhead_s;
    if (ratio != 1.0) c.precision_saved_s = padded / core_.peak_matmul_flops_per_s() * (1.0 - 1.0 / ratio);
  } else if (op.multipass) {
    c.vpu_s = op.elements * core_.multipass(*op.multipass).vpu_ops_per_element * op.multipass_vpu_share /
              core_.vector_ops_per_s();
  } else {
    const double ops = op.ops_per_element + op.random_numbers_per_element * core_.random_number_vpu_ops;
    c.vpu_s = op.elements * ops / core_.vector_ops_per_s();
  }
  if (op.fusible && core_.fuse_elementwise) {
    // Folded into the producer's pass over the data: its VPU work overlaps the producer's
    // MXU or HBM time, so only the VPU time can show (no HBM pass, no launch of its own).
    c.seconds = c.vpu_s;
    c.bound = "fused";
    return c;
  }
  // A multi-pass op's kernels run one after the other, each a pass bound by HBM or the VPU; the
  // vector work is spread over them in proportion to their passes.
  const MultiPassKernels* m = op.multipass ? &core_.multipass(*op.multipass) : nullptr;
  const double passes = m ? m->tensor_passes() : 1.0;
  c.hbm_s = op.bytes * passes / core_.sustained_hbm_bytes_per_s();
  const double compute = std::max(c.mxu_s, c.vpu_s), busy = std::max(compute, c.hbm_s);
  c.grid_added_s = std::max(0.0, busy - std::max({c.mxu_s - c.grid_overhead_s, c.vpu_s, c.hbm_s}));
  c.seconds = busy + core_.op_overhead_s * (m ? double(m->kernels.size()) : 1.0);
  if (c.mxu_s >= std::max(c.vpu_s, c.hbm_s) && c.mxu_s > 0) {
    c.bound = "mxu";
  } else if (c.vpu_s >= c.hbm_s && c.vpu_s > 0) {
    c.bound = "vpu";
  } else if (c.hbm_s > 0) {
    c.bound = "hbm";
  }
  return c;
}

}  // namespace tpusim
