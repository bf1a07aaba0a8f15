// Reductions normalizing over one dimension: layer norm, a (causal) softmax, softmax
// cross-entropy (the loss). They run as the core's multi-pass kernels (statistics, then the
// normalization); a layout splitting the reduced dimension all-reduces the statistics.
#include <cmath>

#include "models/kernels/kernels.hpp"
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

using M = NamedOp::Math;

/// A normalization over the last dimension: a layer norm, or an RMSNorm (its kernels, no mean or shift).
bool normalization(const NamedOp& op) { return op.math == M::LayerNorm || op.math == M::RmsNorm; }
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

// --- On a mesh's shards ---------------------------------------------------------------------------
// Per row, statistics over the core's part of the row; where the layout splits what a row
// normalizes, they are combined over the group (shard_combine) before the row is finished.

/// A core's piece of the op's input as rows (its local last dimension) and the piece's box.
struct PieceRows {
  ShardHost::Box box;
  I rows, cols;
};
PieceRows piece_rows(const NamedOp& op, const ShardHost& h) {
  ShardHost::Box b = h.box(op.a);
  const I cols = b.local.back();
  const I rows = b.elements() / cols;
  return {std::move(b), rows, cols};
}

void causal_softmax_step(const NamedOp& op, ShardStep step, ShardHost& h) {
  // Rows: [..., query position, positions attended to]; the query's position in the sequence.
  const auto [in, rows, cols] = piece_rows(op, h);
  const Tensor& x = h.operand(0);
  Tensor y(x.size());
  if (step == ShardStep::Forward) {
    kernels::softmax_forward(x.data(), y.data(), rows, cols, op.scale, in.local[in.local.size() - 2],
                             in.offset[in.offset.size() - 2]);
    h.output() = std::move(y);
  } else {
    kernels::softmax_backward(h.output().data(), h.output_gradient().data(), y.data(), rows, cols, op.scale);
    h.add_gradient(0, std::move(y), ShardHost::Part::Whole);
  }
}

/// A layer norm's shift (none for an RMSNorm), as held (`gradient`: its gradient).
float* shift(const NamedOp& op, ShardHost& h, bool gradient) {
  return op.math == NamedOp::Math::RmsNorm ? nullptr : h.weight(1, gradient)->data();
}

void finish_layer_norm(const NamedOp& op, ShardHost& h) {
  const auto [in, rows, cols] = piece_rows(op, h);
  const Tensor& x = h.operand(0);
  auto& stats = h.statistics(0);
  kernels::layernorm_statistics(stats.data(), rows, double(in.whole.back()), 1e-5f,  // the layer functions'
                                op.math != NamedOp::Math::RmsNorm);
  Tensor y(x.size());
  kernels::layernorm_apply(x.data(), h.weight(0, false)->data(), shift(op, h, false), stats.data(), y.data(),
                           rows, cols);
  h.output() = std::move(y);
}

void finish_layer_norm_gradient(const NamedOp& op, ShardHost& h) {
  const auto [in, rows, cols] = piece_rows(op, h);
  const Tensor& x = h.operand(0);
  Tensor dx(x.size());
  kernels::layernorm_gradient_apply(x.data(), h.weight(0, false)->data(), h.statistics(0).data(),
                                    h.output_gradient().data(), h.statistics(1).data(), dx.data(), rows, cols,
                                    double(in.whole.back()), op.math != NamedOp::Math::RmsNorm);
  h.add_gradient(0, std::move(dx), ShardHost::Part::Whole);
}

void layer_norm_step(const NamedOp& op, ShardStep step, ShardHost& h) {
  const auto [in, rows, cols] = piece_rows(op, h);
  const Tensor& x = h.operand(0);
  std::vector<double> sums(std::size_t(2 * rows));
  const bool whole = !h.split(op.reduce_dim);
  if (step == ShardStep::Forward) {
    kernels::layernorm_sums(x.data(), sums.data(), rows, cols);
    h.statistics(0) = std::move(sums);
    if (whole) finish_layer_norm(op, h);
  } else {
    kernels::layernorm_gradient_sums(x.data(), h.weight(0, false)->data(), h.statistics(0).data(),
                                     h.output_gradient().data(), h.weight(0, true)->data(),
                                     shift(op, h, true), sums.data(), rows, cols);
    h.statistics(1) = std::move(sums);
    if (whole) finish_layer_norm_gradient(op, h);
  }
}

/// The rows' log-sum-exp; this core's share of the loss: each row's log-sum-exp once per piece of
/// rows, each target logit once, on the core holding it.
void finish_softmax_xent(const NamedOp& op, ShardHost& h) {
  const auto [in, rows, cols] = piece_rows(op, h);
  const Tensor& x = h.operand(0);
  const auto& t = h.ids();
  auto& s = h.statistics(0);
  std::vector<double> lse = kernels::softmax_log_sum_exp(s.data(), rows);
  std::vector<std::string> row_dims;
  for (const auto& d : op.a.dims) row_dims.push_back(d.name);
  row_dims.pop_back();
  const bool count_rows = h.first_replica(row_dims);
  row_dims.push_back(op.reduce_dim);
  const bool count_targets = h.first_replica(row_dims);
  double loss = 0, whole_rows = h.micro_batches();
  for (std::size_t d = 0; d + 1 < in.whole.size(); ++d) whole_rows *= double(in.whole[d]);
  for (std::int64_t r = 0; r < rows; ++r) {
    if (count_rows) loss += lse[std::size_t(r)];
    const std::int64_t j = t[std::size_t(r)] - in.offset.back();
    if (count_targets && j >= 0 && j < cols) loss -= double(x[std::size_t(r * cols + j)]);
  }
  s = std::move(lse);
  h.add_loss(loss / whole_rows);
}

void softmax_xent_step(const NamedOp& op, ShardStep step, ShardHost& h) {
  const auto [in, rows, cols] = piece_rows(op, h);
  const Tensor& x = h.operand(0);
  if (step == ShardStep::Forward) {
    // Per row, (max, sum of exponentials) over this core's part of the row.
    std::vector<double> s(std::size_t(2 * rows));
    kernels::softmax_row_statistics(x.data(), s.data(), rows, cols);
    h.statistics(0) = std::move(s);
    NamedTensor row_dims = op.a;
    row_dims.dims.pop_back();
    h.ids() = h.targets_per_row(row_dims);
    if (!h.split(op.reduce_dim)) finish_softmax_xent(op, h);
    return;
  }
  // d logits = (softmax - one-hot(target)) / rows of the whole batch (every micro-batch's).
  double whole_rows = h.micro_batches();
  for (std::size_t d = 0; d + 1 < in.whole.size(); ++d) whole_rows *= double(in.whole[d]);
  Tensor dx(x.size());
  kernels::softmax_xent_gradient(x.data(), h.statistics(0).data(), h.ids().data(), dx.data(), rows, cols,
                                 in.offset.back(), 1.0 / whole_rows);
  h.add_gradient(0, std::move(dx), ShardHost::Part::Whole);
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
  /// Flash attention's softmax: each of the backward's two kernels computes the probabilities
  /// again (Einsum::recomputed_in_backward).
  std::vector<Op> recomputed_in_backward(const NamedOp& op, const Sharding& s, double act) const override {
    return op.a.on_chip ? recomputed_by_each_backward_kernel(forward(op, s, act)) : std::vector<Op>{};
  }
  std::optional<MultiPass> multipass(const NamedOp& op, bool backward) const override {
    if (normalization(op))
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
                     (op.math == M::RmsNorm && op.b.weight && op.b.copies == 1) ||
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
    return normalization(op) ? 2 : op.math == M::SoftmaxXent ? 1 : 0;
  }
  Tensor host_forward(const NamedOp& op, HostForward& f) const override {
    const auto [rows, cols] = rows_cols(op.a);
    Tensor y(f.a.size());
    if (op.math == M::LayerNorm) {
      f.extras[0].resize(std::size_t(rows));
      f.extras[1].resize(std::size_t(rows));
      kernels::layernorm_forward(f.a.data(), f.weights[0].data(), f.weights[1].data(), y.data(),
                                 f.extras[0].data(), f.extras[1].data(), rows, cols);
    } else if (op.math == M::RmsNorm) {
      f.extras[0].assign(std::size_t(rows), 0.0f);
      f.extras[1].resize(std::size_t(rows));
      kernels::rmsnorm_forward(f.a.data(), f.weights[0].data(), y.data(), f.extras[1].data(), rows, cols);
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
    else if (op.math == M::RmsNorm)
      kernels::rmsnorm_backward(g.a.data(), g.weights[0].data(), g.extras[1].data(), g.dy.data(), g.da.data(),
                                g.weight_grads[0].data(), rows, cols);
    else
      kernels::softmax_backward(g.y.data(), g.dy.data(), g.da.data(), rows, cols, op.scale);
  }

  std::string missing_shard_math(const NamedOp& op, const ShardSupport& s) const override {
    if (op.math == M::CausalSoftmax && (s.split(op.reduce_dim) || op.a.dims.size() < 2))
      return "a causal softmax split along the positions it normalizes";
    return "";
  }
  void shard_step(const NamedOp& op, ShardStep step, bool, ShardHost& h) const override {
    if (op.math == M::CausalSoftmax) return causal_softmax_step(op, step, h);
    if (normalization(op)) return layer_norm_step(op, step, h);
    softmax_xent_step(op, step, h);
  }
  void shard_combine(const NamedOp& op, bool gradient, const std::vector<ShardHost*>& group) const override {
    if (normalization(op)) {  // row sums add up
      const int slot = gradient ? 1 : 0;
      std::vector<std::vector<double>*> s;
      for (ShardHost* h : group) s.push_back(&h->statistics(slot));
      for (std::size_t i = 0; i < s.front()->size(); ++i) {
        double sum = 0;
        for (auto* v : s) sum += (*v)[i];
        for (auto* v : s) (*v)[i] = sum;
      }
      for (ShardHost* h : group) gradient ? finish_layer_norm_gradient(op, *h) : finish_layer_norm(op, *h);
      return;
    }
    // A split softmax's (max, sum of exponentials) pairs combine exactly.
    std::vector<double*> pieces;
    for (ShardHost* h : group) pieces.push_back(h->statistics(0).data());
    kernels::softmax_combine_statistics(pieces, I(group.front()->statistics(0).size() / 2));
    for (ShardHost* h : group) finish_softmax_xent(op, *h);
  }
};

}  // namespace

std::unique_ptr<const NamedOpKind> make_reduction_kind() { return std::make_unique<Reduction>(); }

}  // namespace tpusim
