// Shared pieces of the convolutional models: a ReLU-conv-BN unit lowered onto a WorkBuilder,
// and the input/head layers of an image classifier.
#pragma once

#include "models/work_builder.hpp"

namespace tpusim {

/// A feature map: batch-independent shape (the batch is applied when lowering).
struct FeatureMap {
  std::int64_t size = 0;  ///< height = width
  std::int64_t channels = 0;
  double elements(std::int64_t batch) const { return double(batch) * size * size * channels; }
};

/// ReLU (optional) -> conv kh x kw (stride) -> batch norm, on `in` for `batch` examples.
/// Returns the output map. Keeps the batch norm's input (the convolution's output); the
/// convolution's own input is kept only without the ReLU and when `input` names it (a
/// materialized tensor, kept once however many convolutions read it); a ReLU'd or unnamed input
/// is an element-wise result its backward recomputes (WorkBuilder::conv).
FeatureMap conv_bn(WorkBuilder& w, const std::string& name, std::int64_t batch, const FeatureMap& in,
                   std::int64_t kh, std::int64_t kw, std::int64_t stride, std::int64_t out_channels,
                   bool relu = true, const std::string& input = "");

/// The ResNet stem on an `image` x `image` x 3 input: 7x7 stride-2 conv to 64 (keeps the image
/// for its weight gradient), BN, ReLU, 3x3 stride-2 max pool; returns the pooled map. With
/// `space_to_depth` (MLPerf's conv0_space_to_depth) the image is reshaped 2x2 into 12 channels
/// and the convolution runs as a 4x4 stride-1 one over it (same parameters, another MXU shape).
FeatureMap resnet_stem(WorkBuilder& w, std::int64_t batch, std::int64_t image, bool space_to_depth = false);

/// Weight shapes of a conv (kh x kw x in x out) followed by batch norm (scale and shift).
void conv_bn_weights(Layer& layer, std::int64_t kh, std::int64_t kw, std::int64_t in, std::int64_t out);

/// The optional "image_size" (224) and "classes" (1000) of an image classifier.
std::pair<std::int64_t, std::int64_t> read_image_input(Fields& fields);

/// Global average pooling, a fully connected classifier with bias, softmax cross-entropy.
Layer classifier_head(const FeatureMap& in, std::int64_t classes, double act);

}  // namespace tpusim
