// AmoebaNet-D(L, D), the GPipe paper's image model, built from its real cell graph
// (shared/MODELS.md): a 3x3 stride-2 stem conv of width c = D/4, two reduction cells, then three
// stacks of L/3 normal cells separated by reduction cells; every reduction cell doubles the
// width (2c, 4c | normal 4c = D, reduction 8c, normal 8c, reduction 16c, normal 16c), then global
// pooling and a classifier. One layer per cell, plus the stem and the head.
#include "models/conv_nets.hpp"

namespace tpusim {

namespace {

enum class CellOp { Conv1x1, Conv3x3, Conv1x7_7x1, MaxPool2x2, MaxPool3x3, AvgPool3x3, None };

struct Edge {
  int input;  ///< state index
  CellOp op;
};

// Five new states per cell, each the sum of two edges (MODELS.md, in order).
constexpr Edge kNormal[10] = {{1, CellOp::Conv1x1},     {1, CellOp::MaxPool3x3}, {1, CellOp::None},
                              {0, CellOp::Conv1x7_7x1}, {0, CellOp::Conv1x1},    {0, CellOp::Conv1x7_7x1},
                              {2, CellOp::MaxPool3x3},  {2, CellOp::None},       {1, CellOp::AvgPool3x3},
                              {5, CellOp::Conv1x1}};
constexpr int kNormalOutputs[] = {0, 3, 4, 6};
constexpr Edge kReduction[10] = {{0, CellOp::MaxPool2x2}, {0, CellOp::MaxPool3x3},  {2, CellOp::None},
                                 {1, CellOp::Conv3x3},    {2, CellOp::Conv1x7_7x1}, {2, CellOp::MaxPool3x3},
                                 {3, CellOp::None},       {1, CellOp::MaxPool2x2},  {2, CellOp::AvgPool3x3},
                                 {3, CellOp::Conv1x1}};
constexpr int kReductionOutputs[] = {4, 5, 6};

/// Factorized reduce: two stride-2 1x1 convs from `in` channels to halves of `w`, then BN.
void factorized_reduce_weights(Layer& l, std::int64_t in, std::int64_t w) {
  l.weights.push_back({1, 1, in, w / 2});
  l.weights.push_back({1, 1, in, w - w / 2});
  l.weights.push_back({w});
  l.weights.push_back({w});
}

/// Weights of one edge operation at cell width w (q = w/4 inside the bottlenecked convs).
void edge_weights(Layer& l, CellOp op, std::int64_t w, bool strided) {
  const std::int64_t q = w / 4;
  switch (op) {
    case CellOp::Conv1x1:
      conv_bn_weights(l, 1, 1, w, w);
      break;
    case CellOp::Conv3x3:
      conv_bn_weights(l, 1, 1, w, q);
      conv_bn_weights(l, 3, 3, q, q);
      conv_bn_weights(l, 1, 1, q, w);
      break;
    case CellOp::Conv1x7_7x1:
      conv_bn_weights(l, 1, 1, w, q);
      conv_bn_weights(l, 1, 7, q, q);
      conv_bn_weights(l, 7, 1, q, q);
      conv_bn_weights(l, 1, 1, q, w);
      break;
    case CellOp::None:
      if (strided) factorized_reduce_weights(l, w, w);
      break;
    default:
      break;  // pools have no parameters
  }
}

/// Factorized reduce: ReLU, two stride-2 1x1 convs of half the width each, concatenated, BN.
/// Both paths read the ReLU's output, recomputed for their gradients.
FeatureMap factorized_reduce(std::vector<NamedOp>& ops, const std::string& name, std::int64_t b,
                             const FeatureMap& in, std::int64_t width) {
  ops.push_back(relu(name + "_relu", image(b, in.size, in.channels)));
  ops.push_back(conv(name + "_path1", b, in.size, in.channels, width / 2, 1, 2));
  ops.push_back(conv(name + "_path2", b, in.size, in.channels, width - width / 2, 1, 2));
  const FeatureMap out{(in.size + 1) / 2, width};
  ops.push_back(batch_norm(name + "_bn", b, out.size, width));
  return out;
}

/// Appends one edge applied to `in` (width w); returns its output map. Every edge reads its
/// state through a ReLU or a pool, so none keeps the state itself.
FeatureMap edge_ops(std::vector<NamedOp>& ops, const std::string& name, std::int64_t b, CellOp op,
                    const FeatureMap& in, int stride) {
  const std::int64_t w = in.channels, q = w / 4;
  switch (op) {
    case CellOp::Conv1x1:
      return conv_bn(ops, name, b, in, 1, 1, stride, w);
    case CellOp::Conv3x3: {
      // The stride sits on the first convolution of the bottleneck (an assumption: the
      // genotype does not say which of the three convolutions is strided).
      FeatureMap x = conv_bn(ops, name + "_a", b, in, 1, 1, stride, q);
      x = conv_bn(ops, name + "_b", b, x, 3, 3, 1, q);
      return conv_bn(ops, name + "_c", b, x, 1, 1, 1, w);
    }
    case CellOp::Conv1x7_7x1: {
      FeatureMap x = conv_bn(ops, name + "_a", b, in, 1, 1, stride, q);
      x = conv_bn(ops, name + "_b", b, x, 1, 7, 1, q);
      x = conv_bn(ops, name + "_c", b, x, 7, 1, 1, q);
      return conv_bn(ops, name + "_d", b, x, 1, 1, 1, w);
    }
    case CellOp::MaxPool2x2:
    case CellOp::MaxPool3x3:
    case CellOp::AvgPool3x3:
      ops.push_back(pool(name, b, in.size, w, op == CellOp::MaxPool2x2 ? 2 : 3, stride));
      ops.back().math = op == CellOp::AvgPool3x3 ? NamedOp::Math::AveragePool : NamedOp::Math::MaxPool;
      return FeatureMap{(in.size + stride - 1) / stride, w};
    case CellOp::None:
      return stride > 1 ? factorized_reduce(ops, name, b, in, w) : in;
  }
  return in;
}

struct CellSpec {
  bool reduction = false;
  std::int64_t width = 0;
  FeatureMap prev, prev_prev;  // the two inputs
  FeatureMap out() const {
    const std::int64_t size = reduction ? (prev.size + 1) / 2 : prev.size;
    return FeatureMap{size, width * (reduction ? 3 : 4)};
  }
};

Layer cell_layer(const std::string& name, const CellSpec& s, double act) {
  Layer l;
  l.name = name;
  const std::int64_t w = s.width;
  // Base: prev always through ReLU-conv1x1-BN; prev_prev by a factorized reduce when the
  // previous cell halved the resolution, a 1x1 conv when its width differs, else as is.
  conv_bn_weights(l, 1, 1, s.prev.channels, w);
  const bool pp_reduce = s.prev_prev.size != s.prev.size;
  const bool pp_conv = !pp_reduce && s.prev_prev.channels != w;
  if (pp_reduce) factorized_reduce_weights(l, s.prev_prev.channels, w);
  if (pp_conv) conv_bn_weights(l, 1, 1, s.prev_prev.channels, w);
  const Edge* edges = s.reduction ? kReduction : kNormal;
  for (int i = 0; i < 10; ++i) edge_weights(l, edges[i].op, w, s.reduction && edges[i].input < 2);

  l.named_ops = [s, pp_reduce, pp_conv, edges](std::int64_t b) {
    std::vector<NamedOp> ops;
    const std::int64_t w = s.width;
    std::vector<FeatureMap> states;
    states.push_back(conv_bn(ops, "base_prev", b, s.prev, 1, 1, 1, w));
    if (pp_reduce)
      states.push_back(factorized_reduce(ops, "base_prev_prev", b, s.prev_prev, w));
    else if (pp_conv)
      states.push_back(conv_bn(ops, "base_prev_prev", b, s.prev_prev, 1, 1, 1, w));
    else
      states.push_back(s.prev_prev);
    for (int k = 0; k < 5; ++k) {
      FeatureMap sum;
      for (int e = 2 * k; e < 2 * k + 2; ++e) {
        const int stride = (s.reduction && edges[e].input < 2) ? 2 : 1;
        sum = edge_ops(ops, "s" + std::to_string(k + 2) + "_op" + std::to_string(e % 2), b, edges[e].op,
                       states[std::size_t(edges[e].input)], stride);
      }
      ops.push_back(elementwise("s" + std::to_string(k + 2) + "_add", image(b, sum.size, sum.channels), 1));
      states.push_back(sum);
    }
    return ops;
  };
  derive_work(l, act, false, [s, act](std::int64_t b) {
    // The next cell reads this cell's output and its prev: both cross a stage boundary.
    return LayerBoundary{{s.prev.boundary(b, act), s.prev_prev.boundary(b, act)},
                         {s.out().boundary(b, act), s.prev.boundary(b, act)}};
  });
  return l;
}

Layer stem_layer(std::int64_t image, std::int64_t c, double act) {
  Layer l;
  l.name = "stem";
  conv_bn_weights(l, 3, 3, 3, c);
  l.named_ops = [image, c](std::int64_t b) {
    std::vector<NamedOp> ops{conv("conv", b, image, 3, c, 3, 2), batch_norm("bn", b, (image + 1) / 2, c)};
    ops.front().a.keep = true;  // the image, which the convolution's weight gradient reads
    return ops;
  };
  derive_work(l, act, true, [image, c, act](std::int64_t b) {
    return LayerBoundary{{FeatureMap{image, 3}.boundary(b, act)},
                         {FeatureMap{(image + 1) / 2, c}.boundary(b, act)}};
  });
  return l;
}

}  // namespace

Model build_amoebanet_d(Fields& f, Problems& problems) {
  const auto L = f.integer("normal_cells", 3, 3000);
  const auto D = f.integer("filters", 8, 1 << 16);
  const auto [image, classes] = read_image_input(f);
  Model m;
  m.activation_bytes = read_activation_bytes(f);
  if (problems.empty() && L % 3 != 0)
    problems.add(f.path_of("normal_cells"), Json(L), "a multiple of 3 (three stacks of L/3 normal cells)");
  if (problems.empty() && D % 8 != 0)
    problems.add(f.path_of("filters"), Json(D), "a multiple of 8 (cells split D/4 into quarters)");
  if (!problems.empty()) return m;
  m.name = "amoebanet_d(" + std::to_string(L) + ", " + std::to_string(D) + ")";
  const std::int64_t c = D / 4;
  m.layers.push_back(stem_layer(image, c, m.activation_bytes));
  FeatureMap prev{(image + 1) / 2, c}, prev_prev = prev;
  auto add_cell = [&](const std::string& name, bool reduction, std::int64_t width) {
    CellSpec s{reduction, width, prev, prev_prev};
    const std::string call = std::string(reduction ? "reduction" : "normal") + " cell " +
                             std::to_string(width) + " " + prev.text() + " " + prev_prev.text();
    m.add(cell_layer(name, s, m.activation_bytes), call);
    prev_prev = prev;
    prev = s.out();
  };
  add_cell("stem_reduction1", true, 2 * c);
  add_cell("stem_reduction2", true, 4 * c);
  for (int stack = 0; stack < 3; ++stack) {
    const std::int64_t width = (4 * c) << stack;
    if (stack > 0) add_cell("reduction" + std::to_string(stack), true, width);
    for (std::int64_t i = 0; i < L / 3; ++i)
      add_cell("normal" + std::to_string(stack + 1) + "_" + std::to_string(i + 1), false, width);
  }
  m.layers.push_back(classifier_head(prev, classes, m.activation_bytes));
  return m;
}

}  // namespace tpusim
