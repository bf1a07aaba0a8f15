#include "models/conv_nets.hpp"

namespace tpusim {

FeatureMap conv_bn(std::vector<NamedOp>& ops, const std::string& name, std::int64_t batch,
                   const FeatureMap& in, int kh, int kw, int stride, std::int64_t out_channels, bool relu,
                   bool keep_input) {
  if (relu) ops.push_back(tpusim::relu(name + "_relu", image(batch, in.size, in.channels)));
  ops.push_back(conv(name, batch, in.size, in.channels, out_channels, kh, kw, stride));
  ops.back().a.keep = keep_input && !relu;
  const FeatureMap out{(in.size + stride - 1) / stride, out_channels};
  ops.push_back(batch_norm(name + "_bn", batch, out.size, out_channels));
  return out;
}

std::vector<NamedOp> resnet_stem(std::int64_t b, std::int64_t image_size, bool space_to_depth) {
  const std::int64_t conv_size = (image_size + 1) / 2;
  std::vector<NamedOp> ops{space_to_depth ? conv("conv1", b, image_size / 2, 12, 64, 4, 1)
                                          : conv("conv1", b, image_size, 3, 64, 7, 2),
                           batch_norm("bn1", b, conv_size, 64), tpusim::relu("relu", image(b, conv_size, 64)),
                           pool("max_pool", b, conv_size, 64, 3, 2)};
  ops.front().a.keep = true;  // the image, which conv1's weight gradient reads
  return ops;
}

FeatureMap resnet_stem_output(std::int64_t image_size) { return {((image_size + 1) / 2 + 1) / 2, 64}; }

void conv_bn_weights(Layer& layer, std::int64_t kh, std::int64_t kw, std::int64_t in, std::int64_t out) {
  layer.weights.push_back({kh, kw, in, out});
  layer.weights.push_back({out});
  layer.weights.push_back({out});
}

std::pair<std::int64_t, std::int64_t> read_image_input(Fields& f) {
  return {f.integer_or("image_size", 224, 32, 4096), f.integer_or("classes", 1000, 1, 1 << 20)};
}

Layer classifier_head(const FeatureMap& in, std::int64_t classes, double act) {
  Layer l;
  l.name = "head";
  l.weights = {{in.channels, classes}, {classes}};
  l.named_ops = [in, classes](std::int64_t b) {
    const Dim B{"batch", b}, C{"channels", in.channels}, V{"vocab", classes};
    std::vector<NamedOp> ops{pool("global_avg_pool", b, in.size, in.channels, int(in.size), 1),
                             einsum("fc", tpusim::act({B, C}, true), weight({C, V}), tpusim::act({B, V})),
                             elementwise("fc_bias", tpusim::act({B, V}), 1, weight({V})),
                             reduction("softmax_xent", tpusim::act({B, V}, true), "vocab")};
    ops.front().a.keep = true;  // the last block's output, which its ReLU's gradient reads
    ops[2].math = NamedOp::Math::Bias;
    ops[3].math = NamedOp::Math::SoftmaxXent;  // its gradient: probabilities minus the targets, one pass
    return ops;
  };
  derive_work(l, act, false, [in, act](std::int64_t b) {
    return LayerBoundary{{in.boundary(b, act)}, {losses(b)}};
  });
  return l;
}

}  // namespace tpusim
