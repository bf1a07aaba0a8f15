#include "models/named_ops.hpp"

namespace tpusim {

std::vector<NamedTensor> NamedOp::tensors() const {
  std::vector<NamedTensor> t = {a};
  if (!b.dims.empty()) t.push_back(b);
  t.push_back(out);
  return t;
}

NamedTensor act(std::vector<Dim> dims, bool keep) { return NamedTensor{std::move(dims), false, keep, 1}; }
NamedTensor weight(std::vector<Dim> dims, int copies) { return NamedTensor{std::move(dims), true, false, copies}; }

NamedOp einsum(std::string name, NamedTensor a, NamedTensor b, NamedTensor out) {
  NamedOp op;
  op.kind = NamedOp::Kind::Einsum;
  op.name = std::move(name);
  op.a = std::move(a);
  op.b = std::move(b);
  op.out = std::move(out);
  return op;
}

NamedOp elementwise(std::string name, NamedTensor a, double ops, NamedTensor bias) {
  NamedOp op;
  op.kind = NamedOp::Kind::Elementwise;
  op.name = std::move(name);
  op.out = act(a.dims);
  op.a = std::move(a);
  op.b = std::move(bias);
  op.ops = ops;
  return op;
}

NamedOp reduction(std::string name, NamedTensor a, std::string reduce_dim, double ops, NamedTensor params) {
  NamedOp op;
  op.kind = NamedOp::Kind::Reduction;
  op.name = std::move(name);
  op.out = act(a.dims);
  op.a = std::move(a);
  op.b = std::move(params);
  op.reduce_dim = std::move(reduce_dim);
  op.ops = ops;
  return op;
}

NamedOp gather(std::string name, NamedTensor ids, NamedTensor table, NamedTensor out) {
  NamedOp op;
  op.kind = NamedOp::Kind::Gather;
  op.name = std::move(name);
  op.a = std::move(ids);
  op.b = std::move(table);
  op.out = std::move(out);
  return op;
}

const std::vector<std::string>& named_dims() {
  static const std::vector<std::string> dims = {"batch", "seq", "d_model", "d_ff", "heads", "d_kv", "vocab"};
  return dims;
}

std::function<std::vector<NamedOp>(std::int64_t)> dense_named_ops(std::int64_t in, std::int64_t out, int index, bool classifier) {
  const std::string in_name = index % 2 == 0 ? "d_model" : "d_ff";
  const std::string out_name = classifier ? "vocab" : (index % 2 == 0 ? "d_ff" : "d_model");
  return [=](std::int64_t b) {
    const Dim B{"batch", b}, I{in_name, in}, O{out_name, out};
    std::vector<NamedOp> ops = {einsum("matmul", act({B, I}, true), weight({I, O}), act({B, O}))};
    if (classifier) {
      ops.push_back(elementwise("bias", act({B, O}), 1, weight({O})));
      ops.push_back(reduction("softmax_xent", act({B, O}, true), out_name, 5));
    } else {
      ops.push_back(elementwise("bias_relu", act({B, O}, true), 2, weight({O})));
    }
    return ops;
  };
}

}  // namespace tpusim
