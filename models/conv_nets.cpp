#include "models/conv_nets.hpp"

#include "models/op_lowering.hpp"

namespace tpusim {

FeatureMap conv_bn(WorkBuilder& w, const std::string& name, std::int64_t batch, const FeatureMap& in,
                   std::int64_t kh, std::int64_t kw, std::int64_t stride, std::int64_t out_channels,
                   bool relu, const std::string& input) {
  if (relu) w.elementwise(name + "_relu", in.elements(batch), 1, 1);
  ConvShape c;
  c.batch = batch;
  c.in_h = c.in_w = in.size;
  c.in_channels = in.channels;
  c.kernel_h = kh;
  c.kernel_w = kw;
  c.stride = stride;
  c.out_channels = out_channels;
  // Its ReLU is fused into the convolution's operand and recomputed for its gradients.
  w.conv(name, c, true, relu ? "" : input);
  const FeatureMap out{c.out_h(), out_channels};
  w.batch_norm(name + "_bn", out.elements(batch), out_channels);
  return out;
}

FeatureMap resnet_stem(WorkBuilder& w, std::int64_t b, std::int64_t image, bool space_to_depth) {
  const ConvShape c = space_to_depth ? ConvShape{b, image / 2, image / 2, 12, 4, 4, 1, 64}
                                     : ConvShape{b, image, image, 3, 7, 7, 2, 64};
  w.conv("conv1", c, /*input_gradient=*/false, "image");
  const FeatureMap conv{c.out_h(), 64};
  w.batch_norm("bn1", conv.elements(b), 64);
  w.elementwise("relu", conv.elements(b), 1, 1);
  const FeatureMap pooled{(conv.size + 1) / 2, 64};
  w.pool("max_pool", conv.elements(b), pooled.elements(b), 9);
  return pooled;
}

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
    return ops;
  };
  derive_work(l, act, false, [in, act](std::int64_t b) {
    return std::pair{in.elements(b) * act, double(b) * 4};
  });
  return l;
}

}  // namespace tpusim
