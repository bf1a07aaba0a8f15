// ResNet-50 v1.5 (the MLPerf model): a 7x7 stem with max pooling, 16 bottleneck blocks in four
// stages (3, 4, 6, 3) with the stride on the 3x3 convolution, projection shortcuts at the first
// block of each stage, then global pooling and a 1000-way classifier. One layer per block.
#include "models/conv_nets.hpp"
#include "models/named_op_function.hpp"

namespace tpusim {

namespace {

Layer stem(std::int64_t image, double act) {
  Layer l;
  l.name = "stem";
  conv_bn_weights(l, 7, 7, 3, 64);
  l.named_ops = [image](std::int64_t b) { return resnet_stem(b, image); };
  derive_work(l, act, true, [image, act](std::int64_t b) {
    return LayerBoundary{{FeatureMap{image, 3}.boundary(b, act)},
                         {resnet_stem_output(image).boundary(b, act)}};
  });
  return l;
}

Layer bottleneck(const std::string& name, const FeatureMap& in, std::int64_t width, std::int64_t stride,
                 double act) {
  Layer l;
  l.name = name;
  const std::int64_t out_channels = 4 * width;
  const bool projection = stride != 1 || in.channels != out_channels;
  conv_bn_weights(l, 1, 1, in.channels, width);
  conv_bn_weights(l, 3, 3, width, width);
  conv_bn_weights(l, 1, 1, width, out_channels);
  if (projection) conv_bn_weights(l, 1, 1, in.channels, out_channels);
  l.named_ops = [in, width, stride, out_channels, projection](std::int64_t b) {
    const std::int64_t out = (in.size + stride - 1) / stride;
    std::vector<NamedOp> ops = {conv("conv1", b, in.size, in.channels, width, 1, 1),
                                batch_norm("bn1", b, in.size, width),
                                tpusim::relu("relu1", tpusim::image(b, in.size, width)),
                                conv("conv2", b, in.size, width, width, 3, int(stride)),
                                batch_norm("bn2", b, out, width),
                                tpusim::relu("relu2", tpusim::image(b, out, width)),
                                conv("conv3", b, out, width, out_channels, 1, 1),
                                batch_norm("bn3", b, out, out_channels)};
    ops.front().a.keep = true;   // the block input (a materialized residual sum), read by conv1's dW
    ops.back().out.id = "main";  // the main branch's output, which the residual sum adds
    if (projection) {
      ops.push_back(conv("shortcut", b, in.size, in.channels, out_channels, 1, int(stride)));
      ops.back().a.id = "in";  // the block's input (kept once, by conv1)
      ops.push_back(batch_norm("shortcut_bn", b, out, out_channels));
    }
    // The sum of the main branch and the shortcut (the projection, or the block's input), then
    // ReLU. Its gradient needs the block's output, which the next layer keeps as its input.
    ops.push_back(elementwise("residual_relu", tpusim::image(b, out, out_channels), 2));
    ops.back().math = NamedOp::Math::ResidualRelu;
    ops.back().skip = projection ? "main" : "in";
    return ops;
  };
  derive_work(l, act, false, [in, stride, out_channels, act](std::int64_t b) {
    const FeatureMap out{(in.size + stride - 1) / stride, out_channels};
    return LayerBoundary{{in.boundary(b, act)}, {out.boundary(b, act)}};
  });
  return l;
}

}  // namespace

Model build_resnet50(Fields& f, Problems& problems) {
  const auto [image, classes] = read_image_input(f);
  Model m;
  m.activation_bytes = read_activation_bytes(f);
  if (!problems.empty()) return m;
  m.name = "resnet50 " + std::to_string(image) + "px";
  m.layers.push_back(stem(image, m.activation_bytes));
  FeatureMap x = resnet_stem_output(image);  // after the stride-2 conv and the stride-2 max pool
  const std::int64_t blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const std::int64_t width = 64 << stage;
    for (std::int64_t i = 0; i < blocks[stage]; ++i) {
      const std::int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      m.add(bottleneck("stage" + std::to_string(stage + 1) + "_block" + std::to_string(i + 1), x, width,
                       stride, m.activation_bytes),
            "bottleneck " + x.text() + " " + std::to_string(width) + " " + std::to_string(stride));
      x = FeatureMap{(x.size + stride - 1) / stride, 4 * width};
    }
  }
  m.layers.push_back(classifier_head(x, classes, m.activation_bytes));
  // Functional mode: images and the classes a fixed random linear teacher gives them.
  attach_functions(m, mlp_data(image * image * 3, classes));
  return m;
}

}  // namespace tpusim
