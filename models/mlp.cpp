// A multi-layer perceptron: `layers` hidden dense layers of `width` (bias + ReLU), then a
// classifier to `classes` with softmax cross-entropy. The simplest model with identical layers,
// used for schedule oracles.
#include "models/model.hpp"

namespace tpusim {

namespace {

Layer dense_layer(const std::string& name, std::int64_t in, std::int64_t out, double act, bool classifier) {
  Layer layer;
  layer.name = name;
  layer.weights = {{in, out}, {out}};
  layer.work = [in, out, act, classifier](std::int64_t b) {
    LayerWork w;
    constexpr double kWeightBytes = 4.0;  // fp32 master weights, cast to bf16 on the fly
    w.forward.push_back(dense_op("matmul", b, in, out, act, kWeightBytes));
    w.forward.push_back(vector_op("bias", double(b) * out, 1, act, true));
    if (classifier) {
      w.forward.push_back(vector_op("softmax_xent", double(b) * out, 5, act, false));
    } else {
      w.forward.push_back(vector_op("relu", double(b) * out, 1, act, true));
    }
    // Backward: the activation derivative, then dX = dY.W^T and dW = X^T.dY.
    w.backward.push_back(vector_op(classifier ? "softmax_xent_grad" : "relu_grad", double(b) * out, 2, act, !classifier));
    w.backward.push_back(dense_op("matmul_dx", b, out, in, act, kWeightBytes));
    w.backward.push_back(dense_op("matmul_dw", in, b, out, act, kWeightBytes));
    w.backward.push_back(vector_op("bias_grad", double(b) * out, 1, act, true));
    w.output_bytes = double(b) * out * act;
    w.stash_bytes = double(b) * (in + out) * act;  // the input (for dW) and the pre-activation
    w.workspace_bytes = double(b) * out * act;
    return w;
  };
  return layer;
}

}  // namespace

Model build_mlp(Fields& f, Problems& problems) {
  Model m;
  const auto layers = f.integer("layers", 1, 100000);
  const auto width = f.integer("width", 1, 1 << 20);
  const auto input = f.integer("input", 1, 1 << 24);
  const auto classes = f.integer("classes", 1, 1 << 24);
  m.activation_bytes = read_activation_bytes(f);
  if (!problems.empty()) return m;
  m.name = "mlp " + std::to_string(layers) + "x" + std::to_string(width);
  for (std::int64_t i = 0; i < layers; ++i) {
    m.layers.push_back(dense_layer("dense" + std::to_string(i), i == 0 ? input : width, width, m.activation_bytes, false));
  }
  m.layers.push_back(dense_layer("classifier", width, classes, m.activation_bytes, true));
  return m;
}

}  // namespace tpusim
