// Shared pieces of the convolutional models: a ReLU-conv-BN unit as named ops, the ResNet
// stem, and the input/head layers of an image classifier.
#pragma once

#include "models/model.hpp"
#include "models/op_lowering.hpp"

namespace tpusim {

/// A feature map: batch-independent shape (the batch is applied when lowering).
struct FeatureMap {
  std::int64_t size = 0;  ///< height = width
  std::int64_t channels = 0;
  double elements(std::int64_t batch) const { return double(batch) * size * size * channels; }
  std::string text() const {
    return std::to_string(size) + "x" + std::to_string(size) + "x" + std::to_string(channels);
  }
  /// The map for `batch` examples as a layer's boundary tensor, at `act` bytes per element.
  BoundaryTensor boundary(std::int64_t batch, double act) const {
    return {image(batch, size, channels), act};
  }
};

/// Appends ReLU (optional) -> conv kh x kw (stride) -> batch norm on `in` for `batch` examples
/// to `ops`; returns the output map. The batch norm keeps its input (the convolution's output).
/// The convolution's own input is an element-wise result (a ReLU's, a sum's) that XLA fuses
/// into it and its backward recomputes, unless `keep_input`: a materialized tensor (the layer's
/// input), kept for its weight gradient (flag it on one reader only: it is kept once).
FeatureMap conv_bn(std::vector<NamedOp>& ops, const std::string& name, std::int64_t batch,
                   const FeatureMap& in, int kh, int kw, int stride, std::int64_t out_channels,
                   bool relu = true, bool keep_input = false);

/// The ResNet stem on an `image` x `image` x 3 input: 7x7 stride-2 conv to 64 (keeps the image
/// for its weight gradient), BN, ReLU, 3x3 stride-2 max pool. With `space_to_depth` (MLPerf's
/// conv0_space_to_depth) the image is reshaped 2x2 into 12 channels and the convolution runs as
/// a 4x4 stride-1 one over it (same parameters, another MXU shape).
std::vector<NamedOp> resnet_stem(std::int64_t batch, std::int64_t image, bool space_to_depth = false);
/// Its output: a quarter of the image, 64 channels.
FeatureMap resnet_stem_output(std::int64_t image);

/// Weight shapes of a conv (kh x kw x in x out) followed by batch norm (scale and shift).
void conv_bn_weights(Layer& layer, std::int64_t kh, std::int64_t kw, std::int64_t in, std::int64_t out);

/// The optional "image_size" (224) and "classes" (1000) of an image classifier.
std::pair<std::int64_t, std::int64_t> read_image_input(Fields& fields);

/// Global average pooling, a fully connected classifier with bias, softmax cross-entropy.
Layer classifier_head(const FeatureMap& in, std::int64_t classes, double act);

}  // namespace tpusim
