// Element-wise work: `ops` vector operations per element, fused into its producer (a bias, with
// ReLU or GELU; a residual add; dropout, whose random mask is a pass of its own, kept for the
// backward).
#include "models/kernels/kernels.hpp"
#include "models/named_math.hpp"
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

using M = NamedOp::Math;
using kernels::I;

/// x plus a bias over its trailing dimensions.
Tensor add_bias(Tensor x, const Tensor& bias) {
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += bias[i % bias.size()];
  return x;
}

class Elementwise : public NamedOpKind {
 public:
  Op forward(const NamedOp& op, const Sharding& s, double act) const override {
    if (op.math == M::Dropout) {
      // Fused with its producer but for the mask it writes for the backward: a pass of its own.
      Op mask = vector_op(op.name, s.local_elements(op.out), op.ops, act, false);
      mask.random_numbers_per_element = 1;
      mask.bytes = s.local_elements(op.out) * act;
      return mask;
    }
    return vector_op(op.name, s.local_elements(op.out), op.ops, act, true);
  }
  Op input_gradient(const NamedOp& op, const Sharding& s, double act) const override {
    const double ops = op.backward_ops > 0 ? op.backward_ops : op.ops;
    if (op.math == M::Dropout) {  // reads the kept mask
      Op mask = vector_op(op.name + "_grad", s.local_elements(op.out), ops, act, false);
      mask.bytes = s.local_elements(op.out) * act;
      return mask;
    }
    return vector_op(op.name + "_grad", s.local_elements(op.out), ops, act, true);
  }
  bool fuses_into_producer() const override { return true; }
  double operand_gradients(const NamedOp&, const Sharding&, bool) const override { return 0; }

  void lower_backward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    m.compute(input_gradient(op, s, act));
    if (!op.b.dims.empty()) m.weight_gradient(op, {&op.a});
  }

  std::string missing_host_math(const NamedOp& op) const override {
    if ((op.math == M::Bias || op.math == M::BiasRelu || op.math == M::BiasGelu) && op.b.weight) return "";
    if (op.math == M::BiasRelu && op.b.dims.empty()) return "";  // a ReLU alone
    if ((op.math == M::Residual || op.math == M::ResidualRelu) && !op.skip.empty()) return "";
    return "an element-wise op other than a bias (+ ReLU or GELU), a ReLU or a residual add (+ ReLU) "
           "(dropout draws masks)";
  }
  Tensor initial_weight(const NamedOp& op, int, std::uint64_t, int) const override {  // a bias: zeros
    return Tensor(std::size_t(op.b.elements() / op.b.copies), 0.0f);
  }
  Tensor host_forward(const NamedOp& op, HostForward& f) const override {
    Tensor y = f.weights ? add_bias(f.a, *f.weights) : f.a;
    if (f.skip) named::add_into(y, *f.skip);
    if (op.math == M::BiasRelu || op.math == M::ResidualRelu)
      kernels::relu_forward(y.data(), y.data(), I(y.size()));
    if (op.math == M::BiasGelu) kernels::gelu_forward(y.data(), y.data(), I(y.size()));
    return y;
  }
  void host_backward(const NamedOp& op, HostBackward& g) const override {
    Tensor dz = g.dy;
    if (op.math == M::BiasRelu || op.math == M::ResidualRelu)
      kernels::relu_backward(g.y.data(), dz.data(), dz.data(), I(dz.size()));
    if (op.math == M::BiasGelu) {  // its input: the kept operand plus the bias
      const Tensor pre = add_bias(g.a, *g.weights);
      kernels::gelu_backward(pre.data(), dz.data(), dz.data(), I(dz.size()));
    }
    if (g.weight_grads) {
      Tensor& db = *g.weight_grads;
      for (std::size_t j = 0; j < dz.size(); ++j) db[j % db.size()] += dz[j];
    }
    if (!op.skip.empty()) g.dskip = dz;
    g.da = std::move(dz);
  }
};

}  // namespace

std::unique_ptr<const NamedOpKind> make_elementwise_kind() { return std::make_unique<Elementwise>(); }

}  // namespace tpusim
