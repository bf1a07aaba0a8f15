// Reductions normalizing over one dimension: layer norm, a (causal) softmax, softmax
// cross-entropy (the loss). They run as the core's multi-pass kernels (statistics, then the
// normalization); a layout splitting the reduced dimension all-reduces the statistics.
#include <cmath>

#include "models/kernels/kernels.hpp"
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

using M = NamedOp::Math;
using kernels::I;

/// Rows of `cols` elements: a tensor seen as a matrix over its last dimension.
std::pair<I, I> rows_cols(const NamedTensor& t) {
  const I cols = t.dims.back().size;
  return {I(t.elements()) / cols, cols};
}

/// The loss is averaged over every row of the global batch.
double xent_scale(I rows, const Batch& batch) {
  return double(batch.count) / (double(rows) * double(batch.global));
}

class Reduction : public NamedOpKind {
 public:
  Op forward(const NamedOp& op, const Sharding& s, double act) const override {
    return on_chip(norm_or_softmax(op, s, act, false), op);
  }
  Op input_gradient(const NamedOp& op, const Sharding& s, double act) const override {
    return on_chip(norm_or_softmax(op, s, act, true), op);
  }
  /// Flash attention's softmax, fused into the kernel of its scores: its vector work rides in
  /// the kernel (no HBM pass of its own); it keeps each row's log-sum-exp (fp32) for the
  /// backward, which computes the probabilities again.
  static Op on_chip(Op op, const NamedOp& named) {
    if (!named.a.on_chip) return op;
    op.bytes = 0;
    op.fusible = true;
    return op;
  }
  double kept_extra_bytes(const NamedOp& op, const Sharding& s) const override {
    return op.a.on_chip ? 4.0 * s.shard_elements(op.a) / double(s.local(op.a.dims.back())) : 0.0;
  }
  std::vector<Op> recomputed_in_backward(const NamedOp& op, const Sharding& s, double act) const override {
    return op.a.on_chip ? recomputed(forward(op, s, act)) : std::vector<Op>{};
  }
  std::optional<MultiPass> multipass(const NamedOp& op, bool backward) const override {
    if (op.math == M::LayerNorm)
      return backward ? MultiPass::NormalizationBackward : MultiPass::NormalizationForward;
    if (op.math == M::SoftmaxXent && backward) return std::nullopt;
    return backward ? MultiPass::SoftmaxBackward : MultiPass::SoftmaxForward;
  }
  bool is_loss(const NamedOp& op) const override { return op.math == M::SoftmaxXent; }
  double operand_gradients(const NamedOp&, const Sharding&, bool) const override { return 0; }

  double lower_forward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    m.compute(forward(op, s, act));
    if (s.statistics_bytes(op) > 0) m.combine_statistics(op);
    return 0;
  }
  void lower_backward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    m.compute(input_gradient(op, s, act));
    // Softmax cross-entropy's gradient needs only the forward's statistics; a normalization's
    // needs its gradient's row sums.
    if (s.statistics_bytes(op) > 0 && !is_loss(op)) m.combine_statistics(op);
    if (!op.b.dims.empty()) m.weight_gradient(op, {&op.a});
  }

  std::string missing_host_math(const NamedOp& op) const override {
    const bool last_dim = !op.a.dims.empty() && op.reduce_dim == op.a.dims.back().name;
    if (last_dim && ((op.math == M::LayerNorm && op.b.weight && op.b.copies == 2) ||
                     ((op.math == M::CausalSoftmax || op.math == M::SoftmaxXent) && op.b.dims.empty())))
      return "";
    return "a reduction other than layer norm, causal softmax or softmax cross-entropy over the last "
           "dimension";
  }
  Tensor initial_weight(const NamedOp& op, int copy, std::uint64_t, int) const override {
    // A layer norm's scale (ones), then its shift (zeros).
    return Tensor(std::size_t(op.b.elements() / op.b.copies), copy == 0 ? 1.0f : 0.0f);
  }
  int saved_extras(const NamedOp& op) const override {
    return op.math == M::LayerNorm ? 2 : op.math == M::SoftmaxXent ? 1 : 0;
  }
  Tensor host_forward(const NamedOp& op, HostForward& f) const override {
    const auto [rows, cols] = rows_cols(op.a);
    Tensor y(f.a.size());
    if (op.math == M::LayerNorm) {
      f.extras[0].resize(std::size_t(rows));
      f.extras[1].resize(std::size_t(rows));
      kernels::layernorm_forward(f.a.data(), f.weights[0].data(), f.weights[1].data(), y.data(),
                                 f.extras[0].data(), f.extras[1].data(), rows, cols);
    } else if (op.math == M::CausalSoftmax) {
      kernels::softmax_forward(f.a.data(), y.data(), rows, cols, op.scale,
                               op.a.dims[op.a.dims.size() - 2].size, 0);
    } else {  // softmax cross-entropy: the loss, averaged over every row of the global batch
      f.saved.targets = f.data.targets(f.batch);
      f.extras[0].resize(f.a.size());
      f.loss += kernels::softmax_xent_forward(f.a.data(), f.saved.targets.data(), f.extras[0].data(), rows,
                                              cols, xent_scale(rows, f.batch));
      y.clear();
    }
    return y;
  }
  void host_backward(const NamedOp& op, HostBackward& g) const override {
    const auto [rows, cols] = rows_cols(op.a);
    if (op.math == M::SoftmaxXent) {
      g.dy.resize(g.a.size());
      kernels::softmax_xent_backward(g.extras[0].data(), g.saved.targets.data(), g.dy.data(), rows, cols,
                                     xent_scale(rows, g.batch));
      g.da = g.dy;
      return;
    }
    g.da.assign(g.a.size(), 0.0f);
    if (op.math == M::LayerNorm)
      kernels::layernorm_backward(g.a.data(), g.weights[0].data(), g.extras[0].data(), g.extras[1].data(),
                                  g.dy.data(), g.da.data(), g.weight_grads[0].data(),
                                  g.weight_grads[1].data(), rows, cols);
    else
      kernels::softmax_backward(g.y.data(), g.dy.data(), g.da.data(), rows, cols, op.scale);
  }
};

}  // namespace

std::unique_ptr<const NamedOpKind> make_reduction_kind() { return std::make_unique<Reduction>(); }

}  // namespace tpusim
