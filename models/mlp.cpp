// A multi-layer perceptron: `layers` hidden dense layers of `width` (bias + ReLU), then a
// classifier to `classes` with softmax cross-entropy. The simplest model with identical layers,
// used for schedule oracles.
#include "models/named_op_function.hpp"
#include "models/op_lowering.hpp"

namespace tpusim {

namespace {

Layer dense_layer(const std::string& name, std::int64_t in, std::int64_t out, double act, int index,
                  bool classifier) {
  Layer layer;
  layer.name = name;
  layer.weights = {{in, out}, {out}};
  layer.named_ops = dense_named_ops(in, out, index, classifier);
  derive_work(layer, act, index == 0, [in, out, act, classifier](std::int64_t b) {
    return LayerBoundary{{features(b, in, act)}, {classifier ? losses(b) : features(b, out, act)}};
  });
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
    m.layers.push_back(dense_layer("dense" + std::to_string(i), i == 0 ? input : width, width,
                                   m.activation_bytes, int(i), false));
  }
  m.layers.push_back(dense_layer("classifier", width, classes, m.activation_bytes, int(layers), true));
  attach_functions(m, mlp_data(input, classes));
  return m;
}

}  // namespace tpusim
