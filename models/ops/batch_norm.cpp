// Batch normalization: per-channel statistics over the batch and the image of a [batch, height,
// width, channels] activation (b: scale and shift), as the core's normalization kernels. A split
// image, and cross-replica batch norm over a group of replicas, all-reduce the statistics.
#include "models/kernels/kernels.hpp"
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

class BatchNorm : public NamedOpKind {
 public:
  Op forward(const NamedOp& op, const Sharding& s, double act) const override {
    return norm_or_softmax(op, s, act, false);
  }
  Op input_gradient(const NamedOp& op, const Sharding& s, double act) const override {
    return norm_or_softmax(op, s, act, true);
  }
  std::optional<MultiPass> multipass(const NamedOp&, bool backward) const override {
    return backward ? MultiPass::NormalizationBackward : MultiPass::NormalizationForward;
  }
  std::int64_t replica_statistics_channels(const NamedOp& op) const override {
    return op.b.dims.front().size;
  }
  double operand_gradients(const NamedOp&, const Sharding&, bool) const override { return 0; }

  double lower_forward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    m.compute(forward(op, s, act));
    m.batch_norm_statistics(op);
    return 0;
  }
  void lower_backward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    m.compute(input_gradient(op, s, act));
    m.batch_norm_statistics(op);
    m.weight_gradient(op, {&op.a});
  }

  /// Statistics over each layer call's examples: a replica's, or a micro-batch's (functional
  /// mode's reference computes them over the same groups; cross-replica groups are refused there).
  std::string missing_host_math(const NamedOp&) const override { return ""; }
  Tensor initial_weight(const NamedOp& op, int copy, std::uint64_t, int) const override {
    return Tensor(std::size_t(op.b.elements() / op.b.copies), copy == 0 ? 1.0f : 0.0f);  // scale, shift
  }
  int saved_extras(const NamedOp&) const override { return 2; }  // mean and rstd per channel
  Tensor host_forward(const NamedOp& op, HostForward& f) const override {
    const auto [rows, channels] = shape(op);
    Tensor y(f.a.size());
    f.extras[0].resize(std::size_t(channels));
    f.extras[1].resize(std::size_t(channels));
    kernels::batchnorm_forward(f.a.data(), f.weights[0].data(), f.weights[1].data(), y.data(),
                               f.extras[0].data(), f.extras[1].data(), rows, channels);
    return y;
  }
  void host_backward(const NamedOp& op, HostBackward& g) const override {
    const auto [rows, channels] = shape(op);
    g.da.assign(g.a.size(), 0.0f);
    kernels::batchnorm_backward(g.a.data(), g.weights[0].data(), g.extras[0].data(), g.extras[1].data(),
                                g.dy.data(), g.da.data(), g.weight_grads[0].data(), g.weight_grads[1].data(),
                                rows, channels);
  }

 private:
  /// Rows (every example's every pixel) of channels.
  static std::pair<kernels::I, kernels::I> shape(const NamedOp& op) {
    const kernels::I channels = op.a.dims.back().size;
    return {kernels::I(op.a.elements()) / channels, channels};
  }
};

}  // namespace

std::unique_ptr<const NamedOpKind> make_batch_norm_kind() { return std::make_unique<BatchNorm>(); }

}  // namespace tpusim
