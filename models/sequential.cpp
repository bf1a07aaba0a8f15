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
    return LayerBoundary{{features(b, in, act)}, {classifier ? losses(b) : features(b, out, act)}};
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
    return LayerBoundary{{in.boundary(b, act)}, {out.boundary(b, act)}};
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
    return LayerBoundary{{in.boundary(b, act)}, {features(b, in.channels, act)}};
  });
  return l;
}

/// Reads the list of layers one entry at a time, checking that each reads what the one before
/// produces; one method per kind of entry.
class SequentialBuilder {
 public:
  SequentialBuilder(Model& m, Problems& problems) : m_(m), problems_(problems), act_(m.activation_bytes) {}

  /// Entry `i` (fields `e`), repeated `count` times.
  void add(const std::string& kind, Fields& e, std::size_t i, std::int64_t count) {
    classes_ = 0;  // only a classifier that ends the model scores
    const std::size_t before = m_.layers.size();
    const std::string suffix = std::to_string(i);
    if (kind == "dense" || kind == "classifier") dense(kind, e, suffix, count);
    if (kind == "conv2d") conv2d(e, suffix, count);
    if (kind == "global_pool") global_pool(e, suffix, count);
    if (kind == "transformer_block") transformer(e, suffix, count);
    if (!problems_.empty()) m_.layers.resize(before);
  }
  /// Functional mode, where every layer has host math and a classifier ends the model: features
  /// and the classes a fixed random linear teacher gives them, as for the mlp.
  void attach_functions_if_scored() {
    if (problems_.empty() && classes_ > 0 && !m_.layers.empty())
      attach_functions(m_, mlp_data(features_, classes_));
  }

 private:
  /// The builder call that makes a layer, every argument but its name (Model::add): layers made
  /// by equal calls are one computation, lowered and checked once.
  static std::string call_key(const std::string& factory, std::initializer_list<std::int64_t> args) {
    std::string key = factory;
    for (std::int64_t a : args) key += " " + std::to_string(a);
    return key;
  }
  static std::string name(const std::string& base, std::int64_t r, std::int64_t count) {
    return base + (count > 1 ? "_" + std::to_string(r) : "");
  }
  void expect_input(Fields& e, const char* key, Shape::Kind k, std::int64_t width) {
    if (shape_.kind == Shape::Unknown) features_ = width;
    if (shape_.kind != Shape::Unknown && (shape_.kind != k || shape_.features != width))
      problems_.add(
          e.path_of(key), Json(width),
          "the previous layer's output (" + std::to_string(shape_.features) + " values per example)");
  }
  void dense(const std::string& kind, Fields& e, const std::string& suffix, std::int64_t count) {
    const bool classifier = kind == "classifier";
    const auto in = e.integer("in", 1, 1 << 24);
    const auto out = e.integer(classifier ? "classes" : "out", 1, 1 << 24);
    const bool relu = !classifier && e.string_or("activation", "relu", {"relu", "none"}) == "relu";
    const bool bias = e.boolean_or("bias", true);
    if (classifier && count != 1)
      problems_.add(e.path_of("count"), Json(count), "1 (a classifier ends the model)");
    expect_input(e, "in", Shape::Flat, in);
    if (!classifier && count > 1 && in != out)
      problems_.add(e.path_of("count"), Json(count), "1 unless in == out");
    for (std::int64_t r = 0; r < count && problems_.empty(); ++r) {
      const bool first = m_.layers.empty();
      const std::string call = call_key("dense", {in, out, dense_index_ % 2, relu, bias, classifier, first});
      m_.add(dense_layer(name(kind + suffix, r, count), in, out, relu, bias, classifier, dense_index_++,
                         first, act_),
             call);
    }
    shape_ = {Shape::Flat, classifier ? 0 : out};
    classes_ = classifier ? out : 0;
  }
  void conv2d(Fields& e, const std::string& suffix, std::int64_t count) {
    const auto size = e.integer("size", 1, 1 << 14);
    const auto cin = e.integer("in_channels", 1, 1 << 16);
    const auto cout = e.integer("out_channels", 1, 1 << 16);
    const auto kernel = e.integer("kernel", 1, 64);
    const std::int64_t stride = e.integer_or("stride", 1, 1, 64);
    const bool bn = e.boolean_or("batch_norm", true);
    if (count > 1 && (stride != 1 || cin != cout))
      problems_.add(e.path_of("count"), Json(count), "1 unless stride is 1 and in_channels == out_channels");
    expect_input(e, "in_channels", Shape::Image, size * size * cin);
    FeatureMap in{size, cin};
    for (std::int64_t r = 0; r < count && problems_.empty(); ++r) {
      const bool first = m_.layers.empty();
      m_.add(conv_layer(name("conv" + suffix, r, count), in, kernel, stride, cout, bn, first, act_),
             call_key("conv2d", {in.size, in.channels, kernel, stride, cout, bn, first}));
      in = FeatureMap{(in.size + stride - 1) / stride, cout};
    }
    shape_ = {Shape::Image, in.size * in.size * cout};
    image_ = in;
  }
  void global_pool(Fields& e, const std::string& suffix, std::int64_t count) {
    if (shape_.kind != Shape::Image) {
      problems_.add(e.path_of("kind"), Json("global_pool"), "a layer after convolutions (an image to pool)");
    } else if (count != 1) {
      problems_.add(e.path_of("count"), Json(count), "1 (pooling leaves no image to pool again)");
    } else {
      m_.layers.push_back(global_pool_layer("pool" + suffix, image_, false, act_));
      shape_ = {Shape::Flat, image_.channels};
    }
  }
  void transformer(Fields& e, const std::string& suffix, std::int64_t count) {
    const auto d = e.integer("d_model", 1, 1 << 20);
    const auto ff = e.integer("d_ff", 1, 1 << 24);
    const auto heads = e.integer("heads", 1, 1 << 16);
    const auto seq = e.integer("seq_len", 1, 1 << 20);
    if (problems_.empty() && d % heads != 0)
      problems_.add(e.path_of("heads"), Json(heads), "a divisor of d_model");
    expect_input(e, "d_model", Shape::Sequence, seq * d);
    for (std::int64_t r = 0; r < count && problems_.empty(); ++r)
      m_.add(
          transformer_block_layer(name("block" + suffix, r, count), d, ff, heads, d / heads, seq, true, act_),
          call_key("transformer_block", {d, ff, heads, seq}));
    shape_ = {Shape::Sequence, seq * d};
  }

  Model& m_;
  Problems& problems_;
  double act_;
  Shape shape_;
  FeatureMap image_;                         ///< the last convolution's output map
  std::int64_t features_ = 0, classes_ = 0;  ///< what the first layer reads, what the classifier scores
  int dense_index_ = 0;  ///< position among dense layers: names their activations for mesh layouts
};

}  // namespace

Model build_sequential(Fields& f, Problems& problems) {
  Model m;
  m.activation_bytes = read_activation_bytes(f);
  const Json* layers = f.value("layers");
  if (!layers) return m;
  if (!layers->is_array() || layers->empty()) {
    problems.add(f.path_of("layers"), *layers, "a non-empty array of layers");
    return m;
  }
  SequentialBuilder builder(m, problems);
  for (std::size_t i = 0; i < layers->size(); ++i) {
    Fields e((*layers)[i], index_path(f.path_of("layers"), i), problems);
    if (!e.ok()) continue;
    const std::size_t problems_before = problems.size();
    const std::string kind =
        e.string("kind", {"dense", "classifier", "conv2d", "global_pool", "transformer_block"});
    if (problems.size() != problems_before) continue;  // other keys belong to a kind we do not know
    builder.add(kind, e, i, e.integer_or("count", 1, 1, 100000));
    e.finish();
  }
  m.name = "sequential (" + std::to_string(m.layers.size()) + " layers)";
  builder.attach_functions_if_scored();
  return m;
}

}  // namespace tpusim
