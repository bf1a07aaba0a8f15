#include "models/named_ops.hpp"

namespace tpusim {

std::vector<NamedTensor> NamedOp::tensors() const {
  std::vector<NamedTensor> t = {a};
  if (!b.dims.empty()) t.push_back(b);
  t.push_back(out);
  return t;
}

NamedTensor act(std::vector<Dim> dims, bool keep) { return NamedTensor{std::move(dims), false, keep, 1}; }
NamedTensor weight(std::vector<Dim> dims, int copies) {
  return NamedTensor{std::move(dims), true, false, copies};
}

NamedOp dispatch(std::string name, NamedTensor a, NamedTensor out) {
  NamedOp op = einsum(std::move(name), std::move(a), NamedTensor{}, std::move(out));
  op.kind = "dispatch";
  return op;
}

NamedOp einsum(std::string name, NamedTensor a, NamedTensor b, NamedTensor out) {
  NamedOp op;
  op.kind = "einsum";
  op.name = std::move(name);
  op.a = std::move(a);
  op.b = std::move(b);
  op.out = std::move(out);
  return op;
}

NamedOp elementwise(std::string name, NamedTensor a, double ops, NamedTensor bias) {
  NamedOp op;
  op.kind = "elementwise";
  op.name = std::move(name);
  op.out = act(a.dims);
  op.a = std::move(a);
  op.b = std::move(bias);
  op.ops = ops;
  return op;
}

NamedOp relu(std::string name, NamedTensor a) {
  NamedOp op = elementwise(std::move(name), std::move(a), 1);
  op.math = NamedOp::Math::BiasRelu;
  return op;
}

NamedOp dropout(std::string name, NamedTensor a) {
  a.keep = true;
  NamedOp op = elementwise(std::move(name), std::move(a), 3);
  op.math = NamedOp::Math::Dropout;
  op.backward_ops = 1;
  return op;
}

NamedOp reduction(std::string name, NamedTensor a, std::string reduce_dim, NamedTensor params) {
  NamedOp op;
  op.kind = "reduction";
  op.name = std::move(name);
  op.out = act(a.dims);
  op.a = std::move(a);
  op.b = std::move(params);
  op.reduce_dim = std::move(reduce_dim);
  return op;
}

NamedOp gather(std::string name, NamedTensor ids, NamedTensor table, NamedTensor out) {
  NamedOp op;
  op.kind = "gather";
  op.name = std::move(name);
  op.a = std::move(ids);
  op.b = std::move(table);
  op.out = std::move(out);
  return op;
}

const std::vector<std::string>& named_dims() {
  static const std::vector<std::string> dims = {"batch", "seq",    "d_model", "d_ff",     "heads",  "d_kv",
                                                "vocab", "height", "width",   "kv_heads", "experts"};
  return dims;
}

NamedTensor image(std::int64_t batch, std::int64_t size, std::int64_t channels, bool keep) {
  return act({{"batch", batch}, {"height", size}, {"width", size}, {"channels", channels}}, keep);
}

NamedOp conv(std::string name, std::int64_t batch, std::int64_t size, std::int64_t in, std::int64_t out,
             int window, int stride) {
  return conv(std::move(name), batch, size, in, out, window, window, stride);
}

NamedOp conv(std::string name, std::int64_t batch, std::int64_t size, std::int64_t in, std::int64_t out,
             int kh, int kw, int stride, bool valid) {
  NamedOp op;
  op.kind = "conv";
  op.name = std::move(name);
  op.a = image(batch, size, in, false);  // an element-wise result unless the model says it is kept
  op.b = weight({{"kernel", std::int64_t(kh) * kw * in}, {"channels_out", out}});
  const std::int64_t out_size = valid ? (size - std::max(kh, kw)) / stride + 1 : (size + stride - 1) / stride;
  op.out = image(batch, out_size, out, false);
  op.window = kh;
  op.window_w = kw;
  op.stride = stride;
  op.valid = valid;
  return op;
}

NamedOp batch_norm(std::string name, std::int64_t batch, std::int64_t size, std::int64_t channels) {
  NamedOp op;
  op.kind = "batch_norm";
  op.name = std::move(name);
  op.a = image(batch, size, channels, true);
  op.b = weight({{"channels", channels}}, 2);
  op.out = image(batch, size, channels, false);
  return op;
}

NamedOp pool(std::string name, std::int64_t batch, std::int64_t size, std::int64_t channels, int window,
             int stride) {
  NamedOp op;
  op.kind = "pool";
  op.name = std::move(name);
  op.a = image(batch, size, channels, false);  // recomputed for a max pool's gradient
  // A global pool leaves one value per channel: no image dimensions.
  op.out = window >= size ? act({{"batch", batch}, {"channels", channels}})
                          : image(batch, (size + stride - 1) / stride, channels, false);
  op.window = window;
  op.stride = stride;
  op.ops = double(window) * window;
  // A global pool averages (a classifier head); a window picks its maximum.
  op.math = window >= size ? NamedOp::Math::AveragePool : NamedOp::Math::MaxPool;
  return op;
}

std::function<std::vector<NamedOp>(std::int64_t)> dense_named_ops(std::int64_t in, std::int64_t out,
                                                                  int index, bool classifier, bool bias,
                                                                  bool relu) {
  const std::string in_name = index % 2 == 0 ? "d_model" : "d_ff";
  const std::string out_name = classifier ? "vocab" : (index % 2 == 0 ? "d_ff" : "d_model");
  return [=](std::int64_t b) {
    const Dim B{"batch", b}, I{in_name, in}, O{out_name, out};
    std::vector<NamedOp> ops = {einsum("matmul", act({B, I}, true), weight({I, O}), act({B, O}))};
    if (classifier) {
      if (bias) {
        ops.push_back(elementwise("bias", act({B, O}), 1, weight({O})));
        ops.back().math = NamedOp::Math::Bias;
      }
      ops.push_back(reduction("softmax_xent", act({B, O}, true), out_name));
      ops.back().math = NamedOp::Math::SoftmaxXent;
    } else if (relu) {
      // The ReLU's gradient reads its output (kept).
      ops.push_back(elementwise(bias ? "bias_relu" : "relu", act({B, O}, true), bias ? 2 : 1,
                                bias ? weight({O}) : NamedTensor{}));
      ops.back().math = NamedOp::Math::BiasRelu;
    } else if (bias) {
      ops.push_back(elementwise("bias", act({B, O}), 1, weight({O})));
      ops.back().math = NamedOp::Math::Bias;
    }
    return ops;
  };
}

BoundaryTensor boundary_tensor(std::vector<Dim> dims, double bytes_per_element) {
  return {act(std::move(dims)), bytes_per_element};
}

BoundaryTensor features(std::int64_t batch, std::int64_t width, double act) {
  return boundary_tensor({{"batch", batch}, {"d_model", width}}, act);
}

BoundaryTensor losses(std::int64_t batch, std::int64_t per_example) {
  return boundary_tensor({{"batch", batch}, {"seq", per_example}}, 4);
}

}  // namespace tpusim
