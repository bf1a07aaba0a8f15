// Batch normalization: per-channel statistics over the batch and the image of a [batch, height,
// width, channels] activation (b: scale and shift), as the core's normalization kernels. A split
// image, and cross-replica batch norm over a group of replicas, all-reduce the statistics.
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

  /// Per-replica (or per-micro-batch) statistics are another training than one core's whole
  /// batch, so functional mode could not prove a schedule equal to one core with them.
  std::string missing_host_math(const NamedOp&) const override {
    return "a batch norm (its statistics depend on how a schedule splits the batch)";
  }
};

}  // namespace

std::unique_ptr<const NamedOpKind> make_batch_norm_kind() { return std::make_unique<BatchNorm>(); }

}  // namespace tpusim
