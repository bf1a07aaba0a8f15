// Convolution: a [batch, height, width, channels] * b [kernel, channels_out] -> out, a `window` x
// `window_w` window with `stride` ("SAME" padding, or "VALID"). On a split image it first reads
// its neighbours' edge rows (halos); its backward is dx (skipped on the model's input) and dw.
#include "models/kernels/kernels.hpp"
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

/// The convolution a core computes for a Conv op (its local image, the op's window).
ConvShape conv_shape(const NamedOp& op, const Sharding& s) {
  ConvShape c;
  for (const auto& d : op.a.dims) {
    if (d.name == "batch") c.batch = s.local(d);
    if (d.name == "height") c.in_h = s.local(d);
    if (d.name == "width") c.in_w = s.local(d);
    if (d.name == "channels") c.in_channels = s.local(d);
  }
  c.kernel_h = op.window;
  c.kernel_w = op.window_w > 0 ? op.window_w : op.window;
  c.valid = op.valid;
  c.stride = op.stride;
  c.out_channels = op.b.dims.back().size;
  return c;
}

/// `hw`, an op over the shape `c`, reading and writing its image and its output (or their
/// gradients) as stored: padded to the layout's lanes (Sharding::lane_padding).
Op stored(Op hw, const ConvShape& c, const NamedOp& op, const Sharding& s, double act) {
  const double in = double(c.batch) * double(c.in_h) * double(c.in_w) * double(c.in_channels) * act;
  const double out = double(c.batch) * double(c.out_h()) * double(c.out_w()) * double(c.out_channels) * act;
  hw.bytes += in * (s.lane_padding(op.a) - 1) + out * (s.lane_padding(op.out) - 1);
  return hw;
}

class Conv : public NamedOpKind {
 public:
  Op forward(const NamedOp& op, const Sharding& s, double act) const override {
    const ConvShape c = conv_shape(op, s);
    return stored(conv_op(op.name, c, act, s.weight_bytes), c, op, s, act);
  }
  Op input_gradient(const NamedOp& op, const Sharding& s, double act) const override {
    const ConvShape c = conv_shape(op, s);
    return stored(conv_input_grad_op(op.name + "_dx", c, act, s.weight_bytes), c, op, s, act);
  }
  std::optional<Op> operand_gradient(const NamedOp& op, const Sharding& s, double act) const override {
    const ConvShape c = conv_shape(op, s);
    return stored(conv_weight_grad_op(op.name + "_dw", c, act, s.weight_bytes), c, op, s, act);
  }
  bool input_gradient_of_model_input() const override { return false; }
  bool is_dot(const NamedOp&) const override { return true; }
  double operand_gradients(const NamedOp& op, const Sharding& s, bool reads_model_input) const override {
    return reads_model_input ? 0.0 : s.local_elements(op.a);
  }

  double lower_forward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    m.halos(op);
    return m.compute(forward(op, s, act));
  }
  void lower_backward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    if (!m.reads_model_input()) {
      m.compute(input_gradient(op, s, act));
      m.halos(op);
    }
    m.compute_weight_gradient(*operand_gradient(op, s, act));
    m.weight_gradient(op, {&op.a, &op.out});
  }

  std::string missing_host_math(const NamedOp& op) const override {
    const ConvShape c = conv_shape(op, Sharding::none());
    if (op.valid || c.kernel_h != c.kernel_w || c.in_h != c.in_w)
      return "a convolution other than a square window with \"SAME\" padding over a square image";
    return "";
  }
  /// Xavier-uniform with the window's inputs (kernel x channels in) as its fan in.
  Tensor initial_weight(const NamedOp& op, int, std::uint64_t seed, int index) const override {
    return xavier(op, double(op.b.dims.front().size), seed, index);
  }
  Tensor host_forward(const NamedOp& op, HostForward& f) const override {
    const kernels::Conv c = host_shape(op);
    Tensor y(std::size_t(c.n * c.out_h() * c.out_w() * c.cout));
    kernels::conv2d_forward(c, f.a.data(), f.weights->data(), y.data());
    return y;
  }
  void host_backward(const NamedOp& op, HostBackward& g) const override {
    g.da.assign(g.a.size(), 0.0f);
    kernels::conv2d_backward(host_shape(op), g.a.data(), g.weights->data(), g.dy.data(), g.da.data(),
                             g.weight_grads->data());
  }

 private:
  static kernels::Conv host_shape(const NamedOp& op) {
    const ConvShape s = conv_shape(op, Sharding::none());
    return {s.batch, s.in_h, s.in_w, s.in_channels, s.kernel_h, s.stride, s.out_channels};
  }
};

}  // namespace

std::unique_ptr<const NamedOpKind> make_conv_kind() { return std::make_unique<Conv>(); }

}  // namespace tpusim
