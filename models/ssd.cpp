// SSD300 on a ResNet-34 backbone, MLPerf's object detector (shared/VALIDATION.md; the MLPerf
// reference model): ResNet-34's stem and its first three stages (3, 4, 6 basic blocks of 64,
// 128, 256 channels) with the third stage's stride set to 1, so the first detection map is
// 38x38x256 for a 300x300 image; five extra blocks (a 1x1 convolution to 256, 256, 128, 128,
// 128 channels, then a 3x3 one to 512, 512, 256, 256, 256: stride 2 for the first three, no
// padding for the last two) give maps of 19, 10, 5, 3 and 1; on each of the six maps a 3x3
// convolution predicts 4 box offsets and a 3x3 convolution the class scores for each of its
// 4, 6, 6, 6, 4, 4 default boxes (8732 per image); softmax cross-entropy over the classes of
// every default box and a smooth-L1 box loss. Every convolution is followed by batch norm
// (the heads instead have biases). One layer per stem, block, extra block and the heads.
#include "models/conv_nets.hpp"

namespace tpusim {

namespace {

constexpr std::int64_t kExtraMid[5] = {256, 256, 128, 128, 128};
constexpr std::int64_t kMapChannels[6] = {256, 512, 512, 256, 256, 256};
constexpr std::int64_t kDefaults[6] = {4, 6, 6, 6, 4, 4};

/// ResNet-34's stem (resnet_stem), with MLPerf's space-to-depth when asked.
Layer stem(std::int64_t image, bool space_to_depth, double act) {
  Layer l;
  l.name = "stem";
  conv_bn_weights(l, 7, 7, 3, 64);
  l.named_ops = [image, space_to_depth](std::int64_t b) { return resnet_stem(b, image, space_to_depth); };
  derive_work(l, act, true, [image, act](std::int64_t b) {
    return LayerBoundary{{FeatureMap{image, 3}.boundary(b, act)},
                         {resnet_stem_output(image).boundary(b, act)}};
  });
  return l;
}

/// A basic block: 3x3 conv (stride) - BN - ReLU - 3x3 conv - BN, plus the input (through a 1x1
/// strided conv and BN when the shape changes), ReLU.
Layer basic_block(const std::string& name, const FeatureMap& in, std::int64_t width, std::int64_t stride,
                  double act) {
  Layer l;
  l.name = name;
  const bool projection = stride != 1 || in.channels != width;
  conv_bn_weights(l, 3, 3, in.channels, width);
  conv_bn_weights(l, 3, 3, width, width);
  if (projection) conv_bn_weights(l, 1, 1, in.channels, width);
  l.named_ops = [in, width, stride, projection](std::int64_t b) {
    std::vector<NamedOp> ops;
    // conv1 and the shortcut read the block's input (materialized), kept once.
    FeatureMap x = conv_bn(ops, "conv1", b, in, 3, 3, int(stride), width, false, true);
    x = conv_bn(ops, "conv2", b, x, 3, 3, 1, width);
    if (projection) conv_bn(ops, "shortcut", b, in, 1, 1, int(stride), width, false);
    ops.push_back(elementwise("residual_relu", image(b, x.size, width), 2));
    return ops;
  };
  derive_work(l, act, false, [in, width, stride, act](std::int64_t b) {
    const FeatureMap out{(in.size + stride - 1) / stride, width};
    return LayerBoundary{{in.boundary(b, act)}, {out.boundary(b, act)}};
  });
  return l;
}

/// Extra block i: 1x1 conv to kExtraMid[i] - BN - ReLU - 3x3 conv to the next map (stride 2,
/// or no padding for the last two) - BN - ReLU. The `carried` detection maps before `in` pass
/// through it to the heads.
Layer extra_block(int i, const FeatureMap& in, const std::vector<FeatureMap>& carried, double act) {
  Layer l;
  l.name = "extra" + std::to_string(i + 1);
  const std::int64_t mid = kExtraMid[i], out = kMapChannels[i + 1];
  conv_bn_weights(l, 1, 1, in.channels, mid);
  conv_bn_weights(l, 3, 3, mid, out);
  const int stride = i < 3 ? 2 : 1;
  const bool valid = i >= 3;
  const std::int64_t out_size = valid ? in.size - 2 : (in.size + 1) / 2;
  l.named_ops = [in, mid, out, stride, valid](std::int64_t b) {
    std::vector<NamedOp> ops;
    const FeatureMap x = conv_bn(ops, "conv1x1", b, in, 1, 1, 1, mid, false, true);
    ops.push_back(tpusim::relu("relu1", image(b, x.size, mid)));
    ops.push_back(conv("conv3x3", b, x.size, mid, out, 3, 3, stride, valid));
    const std::int64_t size = ops.back().out.dims[1].size;
    ops.push_back(batch_norm("bn2", b, size, out));
    ops.push_back(tpusim::relu("relu2", image(b, size, out)));
    return ops;
  };
  derive_work(l, act, false, [in, out, out_size, carried, act](std::int64_t b) {
    // It hands on its own map and the earlier ones, all read by the heads.
    LayerBoundary boundary{{in.boundary(b, act)},
                           {FeatureMap{out_size, out}.boundary(b, act), in.boundary(b, act)}};
    for (const auto& map : carried) {
      boundary.in.push_back(map.boundary(b, act));
      boundary.out.push_back(map.boundary(b, act));
    }
    return boundary;
  });
  return l;
}

/// The heads on the six maps and the losses over every default box.
Layer heads(const std::vector<FeatureMap>& maps, std::int64_t classes, double act) {
  Layer l;
  l.name = "heads";
  std::int64_t boxes = 0;
  for (std::size_t m = 0; m < maps.size(); ++m) {
    for (std::int64_t per : {4 * kDefaults[m], classes * kDefaults[m]}) {
      l.weights.push_back({3, 3, maps[m].channels, per});
      l.weights.push_back({per});
    }
    boxes += maps[m].size * maps[m].size * kDefaults[m];
  }
  l.named_ops = [maps, classes, boxes](std::int64_t b) {
    std::vector<NamedOp> ops;
    for (std::size_t m = 0; m < maps.size(); ++m) {
      const std::string map = "map" + std::to_string(m);
      for (const auto& [what, per] :
           {std::pair{"box", 4 * kDefaults[m]}, {"class", classes * kDefaults[m]}}) {
        ops.push_back(conv(map + "_" + what, b, maps[m].size, maps[m].channels, per, 3, 3, 1));
        ops.back().a.id = map;
        // The last map is kept here (once); each earlier one is kept by the extra block reading it.
        ops.back().a.keep = m + 1 == maps.size() && what[0] == 'b';
        ops.push_back(elementwise(map + "_" + what + "_bias", image(b, maps[m].size, per), 1,
                                  weight({{"channels", per}})));
      }
    }
    const Dim B{"batch", b}, boxes_dim{"seq", boxes}, classes_dim{"vocab", classes};
    ops.push_back(reduction("class_loss", tpusim::act({B, boxes_dim, classes_dim}, true), "vocab"));
    ops.back().math = NamedOp::Math::SoftmaxXent;
    // Smooth L1 over the matched boxes' offsets: a few element-wise operations per value.
    ops.push_back(elementwise("box_loss", tpusim::act({B, boxes_dim, {"d_kv", 4}}), 4));
    return ops;
  };
  derive_work(l, act, false, [maps, act](std::int64_t b) {
    LayerBoundary boundary{{}, {losses(b)}};
    for (const auto& map : maps) boundary.in.push_back(map.boundary(b, act));
    return boundary;
  });
  return l;
}

}  // namespace

Model build_ssd_resnet34(Fields& f, Problems& problems) {
  const auto image = f.integer_or("image_size", 300, 64, 4096);
  const auto classes = f.integer_or("classes", 81, 2, 1 << 16);
  const bool space_to_depth = f.boolean_or("space_to_depth", false);
  Model m;
  m.activation_bytes = read_activation_bytes(f);
  if (problems.empty() && space_to_depth && image % 2 != 0)
    problems.add(f.path_of("image_size"), Json(image), "an even size (space-to-depth reshapes 2x2 blocks)");
  // The maps: 1/8 of the image, halved three times, then shrunk by 2 twice (unpadded 3x3).
  std::int64_t last = (((image + 1) / 2 + 1) / 2 + 1) / 2;
  for (int i = 0; i < 3; ++i) last = (last + 1) / 2;
  if (problems.empty() && last - 4 < 1)
    problems.add(f.path_of("image_size"), Json(image),
                 "at least 257 (the sixth detection map must be 1x1 or larger)");
  if (!problems.empty()) return m;
  m.name = "ssd_resnet34 " + std::to_string(image) + "px";
  const double act = m.activation_bytes;
  m.layers.push_back(stem(image, space_to_depth, act));
  FeatureMap x{((image + 1) / 2 + 1) / 2, 64};
  const std::int64_t blocks[] = {3, 4, 6}, widths[] = {64, 128, 256}, strides[] = {1, 2, 1};
  for (int stage = 0; stage < 3; ++stage)
    for (std::int64_t i = 0; i < blocks[stage]; ++i) {
      const std::int64_t stride = i == 0 ? strides[stage] : 1;
      m.add(basic_block("stage" + std::to_string(stage + 1) + "_block" + std::to_string(i + 1), x,
                        widths[stage], stride, act),
            "basic_block " + x.text() + " " + std::to_string(widths[stage]) + " " + std::to_string(stride));
      x = FeatureMap{(x.size + stride - 1) / stride, widths[stage]};
    }
  std::vector<FeatureMap> maps = {x};
  for (int i = 0; i < 5; ++i) {
    m.layers.push_back(extra_block(i, maps.back(), {maps.begin(), maps.end() - 1}, act));
    const std::int64_t size = i < 3 ? (maps.back().size + 1) / 2 : maps.back().size - 2;
    maps.push_back(FeatureMap{size, kMapChannels[i + 1]});
  }
  m.layers.push_back(heads(maps, classes, act));
  return m;
}

}  // namespace tpusim
