#include "models/named_op_function.hpp"

#include <cmath>
#include <map>

#include "models/kernels/kernels.hpp"
#include "models/named_math.hpp"

namespace tpusim {

namespace {

using kernels::I;
using M = NamedOp::Math;
using K = NamedOp::Kind;

named::Names names_of(const NamedTensor& t) {
  named::Names n;
  for (const auto& d : t.dims) n.push_back(d.name);
  return n;
}

/// Rows of `cols` elements: a tensor seen as a matrix over its last dimension.
std::pair<I, I> rows_cols(const NamedTensor& t) {
  const I cols = t.dims.back().size;
  return {I(t.elements()) / cols, cols};
}

/// A layer's ops for a batch, with where each op's operands come from (-1: the layer's input)
/// and which parameters hold its weight's copies.
struct Program {
  std::vector<NamedOp> ops;
  /// Producing op of operand a, b and the residual's skip: -1 the layer's input, -2 none (or a
  /// weight), -3 an id no earlier op of the layer produces (no host math then).
  std::vector<int> a, b, skip;
  std::vector<int> param;  ///< the first parameter of its weight (-1: none)
  std::vector<int> extra;  ///< where its extra saved tensors start (layer norm: mean, rstd; xent: probs)
  int saved = 0;           ///< saved tensors in all: the input, every output, the extras

  explicit Program(std::vector<NamedOp> named) : ops(std::move(named)) {
    std::map<std::string, int> produced{{"in", -1}};
    int params = 0;
    const int n = int(ops.size());
    saved = 1 + n;
    for (int i = 0; i < n; ++i) {
      const NamedOp& op = ops[std::size_t(i)];
      auto source = [&](const std::string& id) {
        if (id.empty()) return i - 1;
        auto it = produced.find(id);
        return it == produced.end() ? -3 : it->second;
      };
      a.push_back(source(op.a.id));
      b.push_back(op.b.dims.empty() || op.b.weight ? -2 : source(op.b.id));
      skip.push_back(op.skip.empty() ? -2 : source(op.skip));
      param.push_back(op.b.weight ? params : -1);
      if (op.b.weight) params += op.b.copies;
      extra.push_back(saved);
      if (op.math == M::LayerNorm) saved += 2;
      if (op.math == M::SoftmaxXent) saved += 1;
      if (!op.out.id.empty()) produced[op.out.id] = i;
    }
  }
};

}  // namespace

std::string missing_host_math(const NamedOp& op) {
  if (op.a.weight) return "a weight as first operand";
  if (op.b.tied) return "a weight of another layer (tied embeddings)";
  const bool last_dim = !op.a.dims.empty() && op.reduce_dim == op.a.dims.back().name;
  switch (op.kind) {
    case K::Einsum:
      return op.b.dims.empty() ? "an einsum without a second operand" : "";
    case K::Elementwise:
      if ((op.math == M::Bias || op.math == M::BiasRelu || op.math == M::BiasGelu) && op.b.weight) return "";
      if (op.math == M::Residual && !op.skip.empty()) return "";
      return "an element-wise op other than a bias (+ ReLU or GELU) or a residual add (dropout draws masks)";
    case K::Reduction:
      if (last_dim && ((op.math == M::LayerNorm && op.b.weight && op.b.copies == 2) ||
                       ((op.math == M::CausalSoftmax || op.math == M::SoftmaxXent) && op.b.dims.empty())))
        return "";
      return "a reduction other than layer norm, causal softmax or softmax cross-entropy over the last "
             "dimension";
    case K::Gather:
      return op.b.weight && op.b.dims.size() == 2 ? "" : "a lookup other than in a table [rows, width]";
    default:
      return "no host math for this kind of op (convolutions, batch norms, pools)";
  }
}

namespace {

/// Every op has host math, reads what an earlier op of the layer produced, a lookup comes first
/// and the loss last.
bool supported(const Program& p) {
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const NamedOp& op = p.ops[i];
    if (p.a[i] == -3 || p.b[i] == -3 || p.skip[i] == -3 || !missing_host_math(op).empty()) return false;
    if (op.kind == K::Gather && i != 0) return false;
    if (op.math == M::SoftmaxXent && i + 1 != p.ops.size()) return false;
  }
  return !p.ops.empty();
}

/// Xavier-uniform for a matrix (an einsum's weight: fan in over the dimensions it contracts with
/// its other operand), zeros for a bias and a norm's shift, ones for a norm's scale.
Tensor initial(const NamedOp& op, int copy, std::uint64_t seed, int index) {
  Tensor t(std::size_t(op.b.elements() / op.b.copies), 0.0f);
  if (op.math == M::LayerNorm) {
    if (copy == 0) std::fill(t.begin(), t.end(), 1.0f);
    return t;
  }
  if (op.kind == K::Elementwise) return t;
  double fan_in = 1, fan_out = 1;
  for (std::size_t j = 0; j < op.b.dims.size(); ++j) {
    const bool contracted = op.kind == K::Gather ? j == 0 : op.a.has(op.b.dims[j].name);
    (contracted ? fan_in : fan_out) *= double(op.b.dims[j].size);
  }
  const float bound = float(std::sqrt(6.0 / (fan_in + fan_out)));
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = bound * unit(mix(seed, std::uint64_t(index), i));
  return t;
}

class NamedOpFunction : public LayerFunction {
 public:
  NamedOpFunction(NamedOpsOf ops, std::shared_ptr<const DataSource> data, bool first)
      : ops_(std::move(ops)), data_(std::move(data)), first_(first) {}

  std::vector<Tensor> init(std::uint64_t seed) const override {
    const Program p(ops_(1));
    std::vector<Tensor> params;
    for (const auto& op : p.ops)
      for (int c = 0; op.b.weight && c < op.b.copies; ++c)
        params.push_back(initial(op, c, seed, int(params.size())));
    return params;
  }
  Tensor input(const Batch& b) const override { return first_ ? data_->features(b) : Tensor{}; }
  std::vector<std::int32_t> tokens(const Batch& b) const override {
    return first_ ? data_->tokens(b) : std::vector<std::int32_t>{};
  }
  std::vector<std::int32_t> targets(const Batch& b) const override { return data_->targets(b); }

  Tensor forward(const std::vector<Tensor>& params, Tensor in, const Batch& batch, Saved& saved,
                 double& loss) const override {
    const Program p(ops_(batch.count));
    saved.tensors.assign(std::size_t(p.saved), Tensor{});
    saved.tensors[0] = first_ && p.ops.front().kind != K::Gather ? data_->features(batch) : std::move(in);
    for (std::size_t i = 0; i < p.ops.size(); ++i) forward_op(p, int(i), params, batch, saved, loss);
    return p.ops.back().math == M::SoftmaxXent ? Tensor{} : saved.tensors[p.ops.size()];
  }

  Tensor backward(const std::vector<Tensor>& params, const Tensor& dout, const Batch& batch,
                  const Saved& saved, std::vector<Tensor>& grads) const override {
    const Program p(ops_(batch.count));
    std::vector<Tensor> d(p.ops.size() + 1);  // d[0]: the layer input's gradient; d[1 + i]: op i's output's
    if (p.ops.back().math != M::SoftmaxXent) d[p.ops.size()] = dout;
    for (std::size_t i = p.ops.size(); i-- > 0;) backward_op(p, int(i), params, batch, saved, grads, d);
    return first_ ? Tensor{} : std::move(d[0]);
  }

 private:
  static const Tensor& value(const Saved& s, int producer) { return s.tensors[std::size_t(producer + 1)]; }
  static void accumulate(std::vector<Tensor>& d, int producer, const Tensor& g) {
    Tensor& into = d[std::size_t(producer + 1)];
    if (into.empty())
      into = g;
    else
      named::add_into(into, g);
  }

  void forward_op(const Program& p, int i, const std::vector<Tensor>& params, const Batch& batch, Saved& s,
                  double& loss) const {
    const NamedOp& op = p.ops[std::size_t(i)];
    const Tensor& x = value(s, p.a[std::size_t(i)]);
    const std::size_t at = std::size_t(i) + 1;
    switch (op.kind) {
      case K::Einsum: {
        const Tensor& w =
            op.b.weight ? params[std::size_t(p.param[std::size_t(i)])] : value(s, p.b[std::size_t(i)]);
        s.tensors[at] = named::einsum(x, names_of(op.a), w, names_of(op.b), names_of(op.out), sizes(op));
        break;
      }
      case K::Elementwise:
        s.tensors[at] =
            elementwise(op, x, op.b.weight ? &params[std::size_t(p.param[std::size_t(i)])] : nullptr,
                        p.skip[std::size_t(i)] >= -1 ? &value(s, p.skip[std::size_t(i)]) : nullptr);
        break;
      case K::Reduction:
        s.tensors[at] = reduction(p, i, x, params, batch, s, loss);
        break;
      case K::Gather: {
        s.ids = data_->tokens(batch);
        const auto width = op.b.dims[1].size;
        s.tensors[at].assign(s.ids.size() * std::size_t(width), 0.0f);
        kernels::embedding_forward(s.ids.data(), params[std::size_t(p.param[std::size_t(i)])].data(),
                                   s.tensors[at].data(), I(s.ids.size()), width);
        break;
      }
      default:
        break;
    }
  }

  static named::Sizes sizes(const NamedOp& op) {
    named::Sizes size;
    for (const NamedTensor* t : {&op.a, &op.b, &op.out})
      for (const auto& dim : t->dims) size[dim.name] = dim.size;
    return size;
  }

  /// A bias over the trailing dimensions (then ReLU or GELU), or a residual add.
  /// x plus a bias over its trailing dimensions.
  static Tensor add_bias(Tensor x, const Tensor& bias) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += bias[i % bias.size()];
    return x;
  }
  static Tensor elementwise(const NamedOp& op, const Tensor& x, const Tensor* bias, const Tensor* skip) {
    Tensor y = bias ? add_bias(x, *bias) : x;
    if (skip) named::add_into(y, *skip);
    if (op.math == M::BiasRelu) kernels::relu_forward(y.data(), y.data(), I(y.size()));
    if (op.math == M::BiasGelu) kernels::gelu_forward(y.data(), y.data(), I(y.size()));
    return y;
  }

  Tensor reduction(const Program& p, int i, const Tensor& x, const std::vector<Tensor>& params,
                   const Batch& batch, Saved& s, double& loss) const {
    const NamedOp& op = p.ops[std::size_t(i)];
    const auto [rows, cols] = rows_cols(op.a);
    Tensor y(x.size());
    const std::size_t extra = std::size_t(p.extra[std::size_t(i)]);
    if (op.math == M::LayerNorm) {
      const std::size_t w = std::size_t(p.param[std::size_t(i)]);
      s.tensors[extra].resize(std::size_t(rows));
      s.tensors[extra + 1].resize(std::size_t(rows));
      kernels::layernorm_forward(x.data(), params[w].data(), params[w + 1].data(), y.data(),
                                 s.tensors[extra].data(), s.tensors[extra + 1].data(), rows, cols);
    } else if (op.math == M::CausalSoftmax) {
      kernels::softmax_forward(x.data(), y.data(), rows, cols, op.scale, op.a.dims[op.a.dims.size() - 2].size,
                               0);
    } else {  // softmax cross-entropy: the loss, averaged over every row of the global batch
      s.targets = data_->targets(batch);
      s.tensors[extra].resize(x.size());
      loss += kernels::softmax_xent_forward(x.data(), s.targets.data(), s.tensors[extra].data(), rows, cols,
                                            xent_scale(rows, batch));
      y.clear();
    }
    return y;
  }

  static double xent_scale(I rows, const Batch& batch) {
    return double(batch.count) / (double(rows) * double(batch.global));
  }

  void backward_op(const Program& p, int i, const std::vector<Tensor>& params, const Batch& batch,
                   const Saved& s, std::vector<Tensor>& grads, std::vector<Tensor>& d) const {
    const NamedOp& op = p.ops[std::size_t(i)];
    const int a = p.a[std::size_t(i)], w = p.param[std::size_t(i)];
    const Tensor& x = value(s, a);
    const auto [rows, cols] = op.a.dims.empty() ? std::pair<I, I>{0, 0} : rows_cols(op.a);
    Tensor& dy = d[std::size_t(i) + 1];
    const std::size_t extra = std::size_t(p.extra[std::size_t(i)]);
    if (op.math == M::SoftmaxXent) {
      dy.resize(x.size());
      kernels::softmax_xent_backward(s.tensors[extra].data(), s.targets.data(), dy.data(), rows, cols,
                                     xent_scale(rows, batch));
      accumulate(d, a, dy);
      return;
    }
    if (dy.empty()) return;  // nothing read its output
    switch (op.kind) {
      case K::Einsum: {
        const auto an = names_of(op.a), bn = names_of(op.b), on = names_of(op.out);
        const Tensor& y = op.b.weight ? params[std::size_t(w)] : value(s, p.b[std::size_t(i)]);
        accumulate(d, a, named::einsum(dy, on, y, bn, an, sizes(op)));
        Tensor db = named::einsum(x, an, dy, on, bn, sizes(op));
        if (op.b.weight)
          named::add_into(grads[std::size_t(w)], db);
        else
          accumulate(d, p.b[std::size_t(i)], db);
        break;
      }
      case K::Elementwise:
        backward_elementwise(p, i, params, s, grads, d);
        break;
      case K::Reduction: {
        Tensor dx(x.size());
        if (op.math == M::LayerNorm)
          kernels::layernorm_backward(x.data(), params[std::size_t(w)].data(), s.tensors[extra].data(),
                                      s.tensors[extra + 1].data(), dy.data(), dx.data(),
                                      grads[std::size_t(w)].data(), grads[std::size_t(w) + 1].data(), rows,
                                      cols);
        else
          kernels::softmax_backward(value(s, i).data(), dy.data(), dx.data(), rows, cols, op.scale);
        accumulate(d, a, dx);
        break;
      }
      case K::Gather:
        kernels::embedding_backward(s.ids.data(), dy.data(), grads[std::size_t(w)].data(), I(s.ids.size()),
                                    op.b.dims[1].size);
        break;
      default:
        break;
    }
  }

  static void backward_elementwise(const Program& p, int i, const std::vector<Tensor>& params, const Saved& s,
                                   std::vector<Tensor>& grads, std::vector<Tensor>& d) {
    const NamedOp& op = p.ops[std::size_t(i)];
    const int w = p.param[std::size_t(i)];
    Tensor dz = d[std::size_t(i) + 1];
    if (op.math == M::BiasRelu)
      kernels::relu_backward(value(s, i).data(), dz.data(), dz.data(), I(dz.size()));
    if (op.math == M::BiasGelu) {  // its input: the kept operand plus the bias
      const Tensor pre = add_bias(value(s, p.a[std::size_t(i)]), params[std::size_t(w)]);
      kernels::gelu_backward(pre.data(), dz.data(), dz.data(), I(dz.size()));
    }
    if (w >= 0) {
      Tensor& db = grads[std::size_t(w)];
      for (std::size_t j = 0; j < dz.size(); ++j) db[j % db.size()] += dz[j];
    }
    if (p.skip[std::size_t(i)] >= -1) accumulate(d, p.skip[std::size_t(i)], dz);
    accumulate(d, p.a[std::size_t(i)], dz);
  }

  NamedOpsOf ops_;
  std::shared_ptr<const DataSource> data_;
  bool first_;
};

}  // namespace

bool has_host_math(const std::vector<NamedOp>& ops) { return supported(Program(ops)); }

std::shared_ptr<const LayerFunction> named_op_function(NamedOpsOf ops, std::shared_ptr<const DataSource> data,
                                                       bool first) {
  return std::make_shared<NamedOpFunction>(std::move(ops), std::move(data), first);
}

void attach_functions(Model& model, const std::shared_ptr<const DataSource>& data) {
  for (const auto& layer : model.layers)
    if (!layer.named_ops || !has_host_math(layer.named_ops(1))) return;
  for (std::size_t l = 0; l < model.layers.size(); ++l)
    model.layers[l].function = named_op_function(model.layers[l].named_ops, data, l == 0);
}

}  // namespace tpusim
