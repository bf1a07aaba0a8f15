// A model the user lists layer by layer in JSON: "layers": [{"kind": "dense", ...}, ...], each
// entry optionally repeated "count" times. Shapes must chain: a layer's input must be what the
// previous layer produces (checked, with the JSON path of the mismatch).
#include "models/blocks.hpp"
#include "models/conv_nets.hpp"
#include "models/named_op_function.hpp"
#include "models/op_lowering.hpp"

namespace tpusim {

namespace {

/// What one example looks like between layers, to check that layers chain.
struct Shape {
  enum Kind { Unknown, Flat, Image, Sequence } kind = Unknown;
  std::int64_t features = 0;  // Flat: width; Image: size*size*channels; Sequence: seq*d_model
};

Layer dense_layer(const std::string& name, std::int64_t in, std::int64_t out, bool relu, bool bias,
                  bool classifier, int index, bool first, double act) {
  Layer l;
  l.name = name;
  l.weights = {{in, out}};
  if (bias) l.weights.push_back({out});
  l.named_ops = dense_named_ops(in, out, index, classifier, bias, relu);
  derive_work(l, act, first, [=](std::int64_t b) {
    return std::pair{double(b) * in * act, classifier ? double(b) * 4 : double(b) * out * act};
  });
  return l;
}

Layer conv_layer(const std::string& name, const FeatureMap& in, std::int64_t kernel, std::int64_t stride,
                 std::int64_t out_channels, bool batch_norm, bool first, double act) {
  Layer l;
  l.name = name;
  l.weights = {{kernel, kernel, in.channels, out_channels}};
  if (batch_norm) {
    l.weights.push_back({out_channels});
    l.weights.push_back({out_channels});
  }
  const FeatureMap out{(in.size + stride - 1) / stride, out_channels};
  l.named_ops = [=](std::int64_t b) {
    std::vector<NamedOp> ops{conv("conv", b, in.size, in.channels, out_channels, int(kernel), int(stride))};
    ops.front().a.keep = true;  // the layer's input, handed on materialized by the layer before
    if (batch_norm) ops.push_back(tpusim::batch_norm("bn", b, out.size, out_channels));
    ops.push_back(tpusim::relu("relu", image(b, out.size, out_channels)));
    return ops;
  };
  derive_work(l, act, first, [=](std::int64_t b) {
    return std::pair{in.elements(b) * act, out.elements(b) * act};
  });
  return l;
}

/// Global average pooling: an image to one value per channel (what a classifier reads).
Layer global_pool_layer(const std::string& name, const FeatureMap& in, bool first, double act) {
  Layer l;
  l.name = name;
  l.named_ops = [=](std::int64_t b) {
    return std::vector<NamedOp>{pool("global_avg_pool", b, in.size, in.channels, int(in.size), 1)};
  };
  derive_work(l, act, first, [=](std::int64_t b) {
    return std::pair{in.elements(b) * act, double(b) * double(in.channels) * act};
  });
  return l;
}

}  // namespace

Model build_sequential(Fields& f, Problems& problems) {
  Model m;
  m.activation_bytes = read_activation_bytes(f);
  const double act = m.activation_bytes;
  const Json* layers = f.value("layers");
  if (!layers) return m;
  if (!layers->is_array() || layers->empty()) {
    problems.add(f.path_of("layers"), *layers, "a non-empty array of layers");
    return m;
  }
  Shape shape;
  FeatureMap image_in;                     // the last convolution's output map
  std::int64_t features = 0, classes = 0;  // what the first layer reads, what the classifier scores
  int dense_index = 0;  // position among dense layers: names their activations for mesh layouts
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const std::string path = index_path(f.path_of("layers"), i);
    Fields e((*layers)[i], path, problems);
    if (!e.ok()) continue;
    const std::size_t problems_before = problems.size();
    const std::string kind =
        e.string("kind", {"dense", "classifier", "conv2d", "global_pool", "transformer_block"});
    if (problems.size() != problems_before) continue;  // other keys belong to a kind we do not know
    const std::int64_t count = e.integer_or("count", 1, 1, 100000);
    auto expect_input = [&](const char* key, Shape::Kind k, std::int64_t width) {
      if (shape.kind == Shape::Unknown) features = width;
      if (shape.kind != Shape::Unknown && (shape.kind != k || shape.features != width)) {
        problems.add(
            e.path_of(key), Json(width),
            "the previous layer's output (" + std::to_string(shape.features) + " values per example)");
      }
    };
    classes = 0;  // only a classifier that ends the model scores
    const std::size_t before = m.layers.size();
    if (kind == "dense" || kind == "classifier") {
      const auto in = e.integer("in", 1, 1 << 24);
      const auto out = e.integer(kind == "dense" ? "out" : "classes", 1, 1 << 24);
      const bool relu = kind == "dense" && e.string_or("activation", "relu", {"relu", "none"}) == "relu";
      const bool bias = e.boolean_or("bias", true);
      if (kind == "classifier" && count != 1)
        problems.add(e.path_of("count"), Json(count), "1 (a classifier ends the model)");
      expect_input("in", Shape::Flat, in);
      if (kind == "dense" && count > 1 && in != out)
        problems.add(e.path_of("count"), Json(count), "1 unless in == out");
      for (std::int64_t r = 0; r < count && problems.empty(); ++r) {
        m.layers.push_back(dense_layer(kind + std::to_string(i) + (count > 1 ? "_" + std::to_string(r) : ""),
                                       in, out, relu, bias, kind == "classifier", dense_index,
                                       m.layers.empty(), act));
        ++dense_index;
      }
      shape = {Shape::Flat, kind == "classifier" ? 0 : out};
      classes = kind == "classifier" ? out : 0;
    } else if (kind == "conv2d") {
      const auto size = e.integer("size", 1, 1 << 14);
      const auto cin = e.integer("in_channels", 1, 1 << 16);
      const auto cout = e.integer("out_channels", 1, 1 << 16);
      const auto kernel = e.integer("kernel", 1, 64);
      const std::int64_t stride = e.integer_or("stride", 1, 1, 64);
      const bool bn = e.boolean_or("batch_norm", true);
      if (count > 1 && (stride != 1 || cin != cout))
        problems.add(e.path_of("count"), Json(count), "1 unless stride is 1 and in_channels == out_channels");
      expect_input("in_channels", Shape::Image, size * size * cin);
      FeatureMap in{size, cin};
      for (std::int64_t r = 0; r < count && problems.empty(); ++r) {
        m.layers.push_back(conv_layer("conv" + std::to_string(i) + (count > 1 ? "_" + std::to_string(r) : ""),
                                      in, kernel, stride, cout, bn, m.layers.empty(), act));
        in = FeatureMap{(in.size + stride - 1) / stride, cout};
      }
      shape = {Shape::Image, in.size * in.size * cout};
      image_in = in;
    } else if (kind == "global_pool") {
      if (shape.kind != Shape::Image) {
        problems.add(e.path_of("kind"), Json(kind), "a layer after convolutions (an image to pool)");
      } else if (count != 1) {
        problems.add(e.path_of("count"), Json(count), "1 (pooling leaves no image to pool again)");
      } else {
        m.layers.push_back(global_pool_layer("pool" + std::to_string(i), image_in, false, act));
        shape = {Shape::Flat, image_in.channels};
      }
    } else if (kind == "transformer_block") {
      const auto d = e.integer("d_model", 1, 1 << 20);
      const auto ff = e.integer("d_ff", 1, 1 << 24);
      const auto heads = e.integer("heads", 1, 1 << 16);
      const auto seq = e.integer("seq_len", 1, 1 << 20);
      if (problems.empty() && d % heads != 0)
        problems.add(e.path_of("heads"), Json(heads), "a divisor of d_model");
      expect_input("d_model", Shape::Sequence, seq * d);
      for (std::int64_t r = 0; r < count && problems.empty(); ++r)
        m.layers.push_back(
            transformer_block_layer("block" + std::to_string(i) + (count > 1 ? "_" + std::to_string(r) : ""),
                                    d, ff, heads, d / heads, seq, true, act));
      shape = {Shape::Sequence, seq * d};
    }
    e.finish();
    if (!problems.empty()) m.layers.resize(before);
  }
  m.name = "sequential (" + std::to_string(m.layers.size()) + " layers)";
  // Functional mode, where every layer has host math and a classifier ends the model: features
  // and the classes a fixed random linear teacher gives them, as for the mlp.
  if (problems.empty() && classes > 0 && !m.layers.empty()) attach_functions(m, mlp_data(features, classes));
  return m;
}

}  // namespace tpusim
