// Pooling: a `window` x `window` max or average over [batch, height, width, channels] with
// `stride`; a window covering the whole image is a global pool (partial sums over a split image).
#include "models/kernels/kernels.hpp"
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

bool global(const NamedOp& op) { return op.out.dims.size() < 4; }

class Pool : public NamedOpKind {
 public:
  Op forward(const NamedOp& op, const Sharding& s, double act) const override {
    // `ops` per output over its window (global: one add per input element); it reads its input
    // and writes its output.
    Op pool = global(op) ? vector_op(op.name, s.local_elements(op.a), 1, act, false)
                         : vector_op(op.name, s.local_elements(op.out), op.ops, act, false);
    pool.bytes = (s.local_elements(op.a) + s.local_elements(op.out)) * act;
    return pool;
  }
  Op input_gradient(const NamedOp& op, const Sharding& s, double act) const override {
    // Reads the output gradient, writes the input's; a max pool finds each window's maximum
    // again in its (recomputed) input: one read more.
    Op grad = vector_op(op.name + "_grad", s.local_elements(op.a), 2, act, false);
    const double reads = op.math == NamedOp::Math::MaxPool ? 2 : 1;
    grad.bytes = (s.local_elements(op.a) * reads + s.local_elements(op.out)) * act;
    return grad;
  }
  double operand_gradients(const NamedOp& op, const Sharding& s, bool) const override {
    return s.local_elements(op.a);
  }

  double lower_forward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    if (global(op)) {  // partial sums over the split image
      m.compute(forward(op, s, act));
      m.sum_output("partial sums", m.spatial_mesh(), s.local_elements(op.out) * act);
    } else {
      m.halos(op);
      m.compute(forward(op, s, act));
    }
    return 0;
  }
  void lower_backward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    m.compute(input_gradient(op, s, act));
    if (!global(op)) m.halos(op);
  }

  std::string missing_host_math(const NamedOp& op) const override {
    const kernels::Pool p = host_shape(op);
    if (p.h != p.w || (global(op) && op.math != NamedOp::Math::AveragePool))
      return "a pool other than a square window over a square image (a global one averaging)";
    return "";
  }
  Tensor host_forward(const NamedOp& op, HostForward& f) const override {
    const kernels::Pool p = host_shape(op);
    Tensor y(std::size_t(p.n * p.out_h() * p.out_w() * p.c));
    if (op.math == NamedOp::Math::MaxPool)
      kernels::maxpool_forward(p, f.a.data(), y.data());
    else
      kernels::avgpool_forward(p, f.a.data(), y.data());
    return y;
  }
  void host_backward(const NamedOp& op, HostBackward& g) const override {
    const kernels::Pool p = host_shape(op);
    g.da.assign(g.a.size(), 0.0f);
    if (op.math == NamedOp::Math::MaxPool)
      kernels::maxpool_backward(p, g.a.data(), g.dy.data(), g.da.data());
    else
      kernels::avgpool_backward(p, g.dy.data(), g.da.data());
  }

 private:
  /// The window over [batch, height, width, channels]; a global pool is one window as large as
  /// the image ("SAME" padding of none: one output per channel).
  static kernels::Pool host_shape(const NamedOp& op) {
    const auto& d = op.a.dims;
    const kernels::I h = d[1].size, w = d[2].size;
    return global(op) ? kernels::Pool{d[0].size, h, w, d[3].size, h, h}
                      : kernels::Pool{d[0].size, h, w, d[3].size, op.window, op.stride};
  }
};

}  // namespace

std::unique_ptr<const NamedOpKind> make_pool_kind() { return std::make_unique<Pool>(); }

}  // namespace tpusim
