#include "models/named_op_function.hpp"

#include <map>

#include "models/named_math.hpp"
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

/// A layer's ops for a batch, with where each op's operands come from (-1: the layer's input)
/// and which parameters hold its weight's copies.
struct Program {
  std::vector<NamedOp> ops;
  /// Producing op of operand a, b and the residual's skip: -1 the layer's input, -2 none (or a
  /// weight), -3 an id no earlier op of the layer produces (no host math then).
  std::vector<int> a, b, skip;
  std::vector<int> param;  ///< the first parameter of its weight (-1: none)
  std::vector<int> extra;  ///< where its kind's extra saved tensors start (NamedOpKind::saved_extras)
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
      saved += op_kind(op).saved_extras(op);
      if (!op.out.id.empty()) produced[op.out.id] = i;
    }
  }
};

}  // namespace

std::string missing_host_math(const NamedOp& op) {
  if (op.a.weight) return "a weight as first operand";
  if (op.b.tied) return "a weight of another layer (tied embeddings)";
  return op_kind(op).missing_host_math(op);
}

namespace {

/// Every op has host math, reads what an earlier op of the layer produced, a lookup comes first
/// and the loss last.
bool supported(const Program& p) {
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const NamedOp& op = p.ops[i];
    if (p.a[i] == -3 || p.b[i] == -3 || p.skip[i] == -3 || !missing_host_math(op).empty()) return false;
    if (op_kind(op).reads_ids() && i != 0) return false;
    if (op_kind(op).is_loss(op) && i + 1 != p.ops.size()) return false;
  }
  return !p.ops.empty();
}

/// Runs each op's kind's host math over whole tensors, in op order forward and in reverse
/// backward, routing values and gradients between the ops by the Program's sources.
class NamedOpFunction : public LayerFunction {
 public:
  NamedOpFunction(NamedOpsOf ops, std::shared_ptr<const DataSource> data, bool first)
      : ops_(std::move(ops)), data_(std::move(data)), first_(first) {}

  std::vector<Tensor> init(std::uint64_t seed) const override {
    const Program p(ops_(1));
    std::vector<Tensor> params;
    for (const auto& op : p.ops)
      for (int c = 0; op.b.weight && c < op.b.copies; ++c)
        params.push_back(op_kind(op).initial_weight(op, c, seed, int(params.size())));
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
    saved.tensors[0] = first_ && !op_kind(p.ops.front()).reads_ids() ? data_->features(batch) : std::move(in);
    for (std::size_t i = 0; i < p.ops.size(); ++i) forward_op(p, i, params, batch, saved, loss);
    return op_kind(p.ops.back()).is_loss(p.ops.back()) ? Tensor{} : saved.tensors[p.ops.size()];
  }

  Tensor backward(const std::vector<Tensor>& params, const Tensor& dout, const Batch& batch,
                  const Saved& saved, std::vector<Tensor>& grads) const override {
    const Program p(ops_(batch.count));
    std::vector<Tensor> d(p.ops.size() + 1);  // d[0]: the layer input's gradient; d[1 + i]: op i's output's
    if (!op_kind(p.ops.back()).is_loss(p.ops.back())) d[p.ops.size()] = dout;
    for (std::size_t i = p.ops.size(); i-- > 0;) backward_op(p, i, params, batch, saved, grads, d);
    return first_ ? Tensor{} : std::move(d[0]);
  }

 private:
  static const Tensor& value(const Saved& s, int producer) { return s.tensors[std::size_t(producer + 1)]; }
  static void accumulate(std::vector<Tensor>& d, int producer, Tensor g) {
    Tensor& into = d[std::size_t(producer + 1)];
    if (into.empty())
      into = std::move(g);
    else
      named::add_into(into, g);
  }

  void forward_op(const Program& p, std::size_t i, const std::vector<Tensor>& params, const Batch& batch,
                  Saved& s, double& loss) const {
    const NamedOp& op = p.ops[i];
    HostForward f{value(s, p.a[i]),
                  p.b[i] >= -1 ? &value(s, p.b[i]) : nullptr,
                  p.skip[i] >= -1 ? &value(s, p.skip[i]) : nullptr,
                  p.param[i] >= 0 ? &params[std::size_t(p.param[i])] : nullptr,
                  s.tensors.data() + p.extra[i],
                  s,
                  *data_,
                  batch,
                  loss};
    Tensor y = op_kind(op).host_forward(op, f);
    s.tensors[i + 1] = std::move(y);
  }

  static void backward_op(const Program& p, std::size_t i, const std::vector<Tensor>& params,
                          const Batch& batch, const Saved& s, std::vector<Tensor>& grads,
                          std::vector<Tensor>& d) {
    const NamedOp& op = p.ops[i];
    const NamedOpKind& kind = op_kind(op);
    Tensor& dy = d[i + 1];
    if (dy.empty() && !kind.is_loss(op)) return;  // nothing read its output
    HostBackward g{value(s, p.a[i]),
                   p.b[i] >= -1 ? &value(s, p.b[i]) : nullptr,
                   value(s, int(i)),
                   p.param[i] >= 0 ? &params[std::size_t(p.param[i])] : nullptr,
                   s.tensors.data() + p.extra[i],
                   s,
                   batch,
                   dy,
                   p.param[i] >= 0 ? &grads[std::size_t(p.param[i])] : nullptr,
                   {},
                   {},
                   {}};
    kind.host_backward(op, g);
    if (!g.dskip.empty() && p.skip[i] >= -1) accumulate(d, p.skip[i], std::move(g.dskip));
    if (!g.da.empty()) accumulate(d, p.a[i], std::move(g.da));
    if (!g.db.empty()) accumulate(d, p.b[i], std::move(g.db));
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
  for (const auto& layer : model.layers)  // a layer the same as an earlier one: asked there
    if (layer.same_as < 0 && (!layer.named_ops || !has_host_math(layer.named_ops(1)))) return;
  for (std::size_t l = 0; l < model.layers.size(); ++l)
    model.layers[l].function = named_op_function(model.layers[l].named_ops, data, l == 0);
}

}  // namespace tpusim
