// Element-wise work: `ops` vector operations per element, fused into its producer (a bias, with
// ReLU or GELU; a residual add; dropout, whose random mask is a pass of its own, kept for the
// backward).
#include <cmath>

#include "models/kernels/kernels.hpp"
#include "models/named_math.hpp"
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

using M = NamedOp::Math;
using kernels::I;

bool gated(const NamedOp& op) { return op.math == M::GatedSilu || op.math == M::GatedGelu; }

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

/// act(a) * b and its gradients: SiLU (x sigmoid(x)) or GELU of the gate, times the up activation.
Tensor gated_forward(const NamedOp& op, const Tensor& a, const Tensor& b) {
  Tensor y(a.size());
  if (op.math == M::GatedGelu) kernels::gelu_forward(a.data(), y.data(), I(a.size()));
  for (std::size_t i = 0; i < a.size(); ++i)
    y[i] = (op.math == M::GatedSilu ? a[i] * sigmoid(a[i]) : y[i]) * b[i];
  return y;
}

void gated_backward(const NamedOp& op, const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da,
                    Tensor& db) {
  Tensor act(a.size()), slope(a.size(), 1.0f);
  if (op.math == M::GatedGelu) {
    kernels::gelu_forward(a.data(), act.data(), I(a.size()));
    kernels::gelu_backward(a.data(), slope.data(), slope.data(), I(a.size()));  // gelu'(a)
  } else {
    for (std::size_t i = 0; i < a.size(); ++i) {
      const float s = sigmoid(a[i]);
      act[i] = a[i] * s;
      slope[i] = s * (1.0f + a[i] * (1.0f - s));
    }
  }
  da = Tensor(a.size());
  db = Tensor(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    da[i] = dy[i] * b[i] * slope[i];
    db[i] = dy[i] * act[i];
  }
}

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
    if (!op.b.dims.empty() && op.b.weight) m.weight_gradient(op, {&op.a});
  }

  std::string missing_host_math(const NamedOp& op) const override {
    if ((op.math == M::Bias || op.math == M::BiasRelu || op.math == M::BiasGelu) && op.b.weight) return "";
    if (op.math == M::BiasRelu && op.b.dims.empty()) return "";  // a ReLU alone
    if ((op.math == M::Residual || op.math == M::ResidualRelu) && !op.skip.empty()) return "";
    if (gated(op) && !op.b.weight && !op.b.dims.empty()) return "";
    if (op.math == M::Rotary)
      return "rotary positions, which have no host math yet (--set model.positions=none proves the rest)";
    return "an element-wise op other than a bias (+ ReLU or GELU), a ReLU, a residual add (+ ReLU) or a "
           "gated "
           "activation (dropout draws masks)";
  }
  Tensor initial_weight(const NamedOp& op, int, std::uint64_t, int) const override {  // a bias: zeros
    return Tensor(std::size_t(op.b.elements() / op.b.copies), 0.0f);
  }
  Tensor host_forward(const NamedOp& op, HostForward& f) const override {
    if (gated(op)) return gated_forward(op, f.a, *f.b);
    Tensor y = f.weights ? add_bias(f.a, *f.weights) : f.a;
    if (f.skip) named::add_into(y, *f.skip);
    if (op.math == M::BiasRelu || op.math == M::ResidualRelu)
      kernels::relu_forward(y.data(), y.data(), I(y.size()));
    if (op.math == M::BiasGelu) kernels::gelu_forward(y.data(), y.data(), I(y.size()));
    return y;
  }
  void host_backward(const NamedOp& op, HostBackward& g) const override {
    if (gated(op)) return gated_backward(op, g.a, *g.b, g.dy, g.da, g.db);
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

  // On a mesh's shards: any split, each core's pieces through the whole-tensor math, as long as a
  // bias runs over the trailing dimensions (its piece lines up with the activation's).
  std::string missing_shard_math(const NamedOp& op, const ShardSupport& s) const override {
    bool suffix_bias = op.b.dims.size() <= op.a.dims.size();
    for (std::size_t j = 0; suffix_bias && j < op.b.dims.size(); ++j)
      suffix_bias = op.b.dims[j].name == op.a.dims[op.a.dims.size() - op.b.dims.size() + j].name;
    if ((!gated(op) && !suffix_bias) ||
        ((op.math == M::Residual || op.math == M::ResidualRelu) && !s.residual))
      return "a bias over other than the trailing dimensions, or a residual of nothing";
    return "";
  }
};

}  // namespace

std::unique_ptr<const NamedOpKind> make_elementwise_kind() { return std::make_unique<Elementwise>(); }

}  // namespace tpusim
