// Stable Diffusion's denoising UNet (MLPerf Training's image-generation benchmark since v3.0),
// by default the base model of Stable Diffusion v2 (diffusers' UNet2DConditionModel config of
// stabilityai/stable-diffusion-2-base, read there, not in shared/): 64 x 64 x 4 latents; a
// time embedding (320 sinusoidal features -> 1280 -> 1280); four levels of 320, 640, 1280 and
// 1280 channels, each of two ResNet blocks (group norm, SiLU, 3x3 convolution, the time
// embedding's projection added, group norm, SiLU, 3x3 convolution, a 1x1 shortcut where the
// channels change) and, on the first three levels, a transformer block after each (group norm,
// a linear projection in, self-attention, cross-attention to a 77-token text embedding of 1024
// features, a GEGLU feed-forward of 4x the channels, a linear projection out; heads of 64), a
// stride-2 convolution between levels; a middle of ResNet, transformer, ResNet at 8 x 8; the
// up path of three ResNet blocks per level, each reading the previous output and one of the
// down path's outputs (the long skips, concatenated on the channels), transformer blocks on
// the last three levels, nearest-neighbour upsampling and a 3x3 convolution between levels;
// group norm, SiLU and a 3x3 convolution to 4 channels; the loss the squared error against the
// noise. 865,910,724 parameters, as the published base model.
//
// Priced as: a group norm as a normalization over the channels (the same passes); a
// concatenation read by a convolution as two convolutions summed (the same products and bytes);
// the text embedding and timesteps as inputs (the frozen text encoder and VAE are not run), the
// text embedding's gradient computed by the cross-attention's backward all the same.
#include <optional>
#include <vector>

#include "models/model.hpp"
#include "models/op_lowering.hpp"
#include "models/transformer_parts.hpp"

namespace tpusim {

namespace {

struct UnetDims {
  std::int64_t latent = 64, latent_channels = 4, layers_per_block = 2, head_dim = 64;
  std::int64_t context_seq = 77, context_width = 1024;
  std::vector<std::int64_t> channels{320, 640, 1280, 1280};
  std::vector<bool> attention{true, true, true, false};
  bool flash = false;
  std::int64_t flash_block_rows = 128;
  std::int64_t time_dim() const { return 4 * channels.front(); }
};

/// A feature map: its id, size and channels. A layer names its map "x", the skip it reads "skip"
/// and its result "y" (so that repeated blocks are the same computation, named ops and all).
struct Map {
  std::string id;
  std::int64_t size = 0, channels = 0;
};

/// A map as a boundary tensor, and the time embedding [batch, time_dim].
BoundaryTensor map_tensor(std::int64_t b, const Map& m, double act) {
  return boundary_tensor({{"batch", b}, {"height", m.size}, {"width", m.size}, {"channels", m.channels}},
                         act);
}
BoundaryTensor time_tensor(const UnetDims& d, std::int64_t b, double act) {
  return boundary_tensor({{"batch", b}, {"d_model", d.time_dim()}}, act);
}

NamedTensor named_image(std::int64_t b, const Map& m, bool keep) {
  NamedTensor t = image(b, m.size, m.channels, keep);
  t.id = m.id;
  return t;
}

/// Group norm (as a normalization over the channels) and SiLU of `in`, then a 3x3 convolution
/// of `stride` to `out` channels; the result named `result`.
void norm_silu_conv(std::vector<NamedOp>& ops, const std::string& name, std::int64_t b, const Map& in,
                    std::int64_t out, const std::string& result) {
  const Dim C{"channels", in.channels};
  ops.push_back(reduction(name + "_norm", named_image(b, in, true), "channels", weight({C}, 2)));
  ops.back().math = NamedOp::Math::LayerNorm;
  ops.push_back(elementwise(name + "_silu", image(b, in.size, in.channels, true), 4));
  ops.push_back(conv(name + "_conv", b, in.size, in.channels, out, 3, 1));
  ops.back().a.keep = true;
  ops.back().out.id = result;
}

/// Adds `a` and the tensor named `other` (of `a`'s shape) element by element, named `result`.
void add(std::vector<NamedOp>& ops, const std::string& name, NamedTensor a, const std::string& other,
         const std::string& result) {
  ops.push_back(elementwise(name, std::move(a), 1));
  ops.back().math = NamedOp::Math::Residual;
  ops.back().skip = other;
  ops.back().out.id = result;
}

class UnetBuilder {
 public:
  UnetBuilder(const UnetDims& d, double act) : d_(d), act_(act) {}

  Model build() {
    Model m;
    m.activation_bytes = act_;
    m.flash_attention = d_.flash;
    m.name = "unet " + std::to_string(d_.latent) + "x" + std::to_string(d_.latent) + "x" +
             std::to_string(d_.latent_channels) + " channels " + std::to_string(d_.channels.front());
    input_layer(m);
    down_path(m);
    middle(m);
    up_path(m);
    output_layer(m);
    return m;
  }

 private:
  const UnetDims& d_;
  double act_;
  Map x_;                   ///< the feature map the next layer reads
  std::vector<Map> skips_;  ///< the down path's outputs the up path reads, last first

  /// Sets the layer's boundary: it reads `in` (and `skip` when it has one, the time embedding,
  /// and the text embedding where it attends) and hands on `out` and the time embedding.
  void finish(Layer& l, const Map& in, const std::optional<Map>& skip, const Map& out, bool attends) {
    derive_work(l, act_, false, [d = d_, act = act_, in, skip, out, attends](std::int64_t b) {
      LayerBoundary boundary{{map_tensor(b, in, act)}, {map_tensor(b, out, act), time_tensor(d, b, act)}};
      if (skip) boundary.in.push_back(map_tensor(b, *skip, act));
      boundary.in.push_back(time_tensor(d, b, act));
      if (attends)
        boundary.in.push_back(
            boundary_tensor({{"batch", b}, {"seq_k", d.context_seq}, {"d_model", d.context_width}}, act));
      return boundary;
    });
  }

  static void conv_weights(Layer& l, std::int64_t k, std::int64_t in, std::int64_t out) {
    l.weights.push_back({k, k, in, out});
    l.weights.push_back({out});
  }

  /// The first layer: the latents' 3x3 convolution to the first level's channels and the time
  /// embedding's two linear layers (SiLU between them).
  void input_layer(Model& m) {
    Layer l;
    l.name = "conv_in";
    const std::int64_t c0 = d_.channels.front(), t = d_.time_dim();
    conv_weights(l, 3, d_.latent_channels, c0);
    l.weights.push_back({c0, t});
    l.weights.push_back({t});
    l.weights.push_back({t, t});
    l.weights.push_back({t});
    const UnetDims d = d_;
    x_ = {"x", d_.latent, c0};
    l.named_ops = [d](std::int64_t b) {
      const std::int64_t c0 = d.channels.front(), t = d.time_dim();
      const Dim B{"batch", b}, F{"channels", c0}, T{"d_model", t}, T2{"d_ff", t};
      std::vector<NamedOp> ops{conv("conv_in", b, d.latent, d.latent_channels, c0, 3, 1)};
      ops.back().a.keep = true;  // the latents, which its weight gradient reads
      ops.back().out.id = "y";
      ops.push_back(einsum("time_linear_1", act({B, F}, true), weight({F, T}), act({B, T})));
      ops.push_back(elementwise("time_silu", act({B, T}, true), 4));
      ops.push_back(einsum("time_linear_2", act({B, T}, true), weight({T, T2}), act({B, T2})));
      ops.back().out.id = "temb";
      return ops;
    };
    model_input_boundary(l, x_);
    m.add(std::move(l));
    skips_.push_back(x_);
  }

  /// The first layer reads the latents and the timesteps' sinusoidal features.
  void model_input_boundary(Layer& l, const Map& out) {
    derive_work(l, act_, true, [d = d_, act = act_, out](std::int64_t b) {
      return LayerBoundary{{map_tensor(b, {"", d.latent, d.latent_channels}, act),
                            boundary_tensor({{"batch", b}, {"channels", d.channels.front()}}, act)},
                           {map_tensor(b, out, act), time_tensor(d, b, act)}};
    });
  }

  /// A ResNet block from the current map (and `skip`, concatenated) to `out` channels, then a
  /// transformer block when `attends`: one layer.
  void resnet_layer(Model& m, const std::string& name, std::int64_t out, const std::optional<Map>& skip,
                    bool attends) {
    Layer l;
    l.name = name;
    const Map in = x_;
    const std::int64_t ci = in.channels + (skip ? skip->channels : 0), t = d_.time_dim();
    l.weights = {{ci}, {ci}};
    conv_weights(l, 3, ci, out);
    l.weights.push_back({t, out});
    l.weights.push_back({out});
    l.weights.push_back({out});
    l.weights.push_back({out});
    conv_weights(l, 3, out, out);
    if (ci != out) conv_weights(l, 1, ci, out);
    if (attends) transformer_weights(l, out, d_.context_width);
    const Map result{"x", in.size, out};
    const UnetDims d = d_;
    l.named_ops = [d, in, skip, out, attends](std::int64_t b) {
      const std::optional<Map> s =
          skip ? std::optional<Map>(Map{"skip", skip->size, skip->channels}) : std::nullopt;
      std::vector<NamedOp> ops =
          resnet_ops(d, "res", b, {"x", in.size, in.channels}, s, out, attends ? "res_y" : "y");
      if (attends) attention_ops(ops, d, "attention", b, {"res_y", in.size, out}, "y");
      return ops;
    };
    finish(l, in, skip, result, attends);
    x_ = result;
    m.add(std::move(l), name.substr(0, 2) + "res " + std::to_string(in.channels) + " " +
                            std::to_string(skip ? skip->channels : 0) + " " + std::to_string(out) + " " +
                            std::to_string(in.size) + (attends ? " attends" : ""));
  }

  static std::vector<NamedOp> resnet_ops(const UnetDims& d, const std::string& name, std::int64_t b,
                                         const Map& in, const std::optional<Map>& skip, std::int64_t out,
                                         const std::string& result) {
    std::vector<NamedOp> ops;
    norm_silu_conv(ops, name + "_1", b, in, out, name + "_h1");
    if (skip) {  // the skip's channels of the concatenation: a second convolution, summed
      norm_silu_conv(ops, name + "_1_skip", b, *skip, out, name + "_h1_skip");
      add(ops, name + "_1_sum", image(b, in.size, out), name + "_h1", name + "_h1");
    }
    const Dim B{"batch", b}, T{"d_ff", d.time_dim()}, C{"channels", out};
    ops.push_back(einsum(name + "_time_projection", act({B, T}, true), weight({T, C}), act({B, C})));
    ops.back().a.id = "temb";
    ops.push_back(elementwise(name + "_time_add", named_image(b, {name + "_h1", in.size, out}, false), 1));
    ops.back().out.id = name + "_h1";
    norm_silu_conv(ops, name + "_2", b, {name + "_h1", in.size, out}, out, name + "_h2");
    std::string shortcut = in.id;
    if (in.channels + (skip ? skip->channels : 0) != out) {
      ops.push_back(conv(name + "_shortcut", b, in.size, in.channels, out, 1, 1));
      ops.back().a = named_image(b, in, true);
      ops.back().out.id = shortcut = name + "_shortcut";
      if (skip) {
        ops.push_back(conv(name + "_shortcut_skip", b, in.size, skip->channels, out, 1, 1));
        ops.back().a = named_image(b, *skip, true);
        add(ops, name + "_shortcut_sum", image(b, in.size, out), shortcut, shortcut);
      }
    }
    add(ops, name + "_residual", named_image(b, {name + "_h2", in.size, out}, false), shortcut, result);
    return ops;
  }

  /// The transformer block's dimensions over a map of `size` x `size` positions of `c` channels.
  static TransformerDims block_dims(const UnetDims& d, std::int64_t size, std::int64_t c) {
    TransformerDims t;
    t.d_model = c;
    t.d_ff = 4 * c;
    t.heads = c / d.head_dim;
    t.d_kv = d.head_dim;
    t.seq = size * size;
    t.biases = false;
    t.gated = t.gelu = true;  // GEGLU
    t.flash = d.flash;
    t.flash_block_rows = d.flash_block_rows;
    t.context_seq = d.context_seq;
    t.context_width = d.context_width;
    return t;
  }

  /// Group norm, the projection in, the block (self-attention, cross-attention to the text
  /// embedding, GEGLU), the projection out and the residual sum with `in`, named `result`.
  static void attention_ops(std::vector<NamedOp>& ops, const UnetDims& d, const std::string& name,
                            std::int64_t b, const Map& in, const std::string& result) {
    const Dim B{"batch", b}, S{"seq", in.size * in.size}, C{"channels", in.channels},
        M{"d_model", in.channels};
    ops.push_back(reduction(name + "_attention_norm", act({B, S, C}, true), "channels", weight({C}, 2)));
    ops.back().a.id = in.id;
    ops.back().math = NamedOp::Math::LayerNorm;
    ops.push_back(einsum(name + "_projection_in", act({B, S, C}), weight({C, M}), act({B, S, M})));
    ops.back().out.id = "in";
    for (NamedOp& op : transformer_block_ops(block_dims(d, in.size, in.channels), b, true)) {
      op.name = name + "_" + op.name;
      if (op.a.id == "encoder") op.a.id = "text";
      ops.push_back(std::move(op));
    }
    ops.push_back(einsum(name + "_projection_out", act({B, S, M}, true), weight({M, C}), act({B, S, C})));
    add(ops, name + "_attention_residual", act({B, S, C}), in.id, result);
  }

  static void transformer_weights(Layer& l, std::int64_t c, std::int64_t context) {
    l.weights.push_back({c});
    l.weights.push_back({c});
    l.weights.push_back({c, c});  // projection in
    l.weights.push_back({c});
    for (int norm = 0; norm < 3; ++norm) {  // the block's three layer norms
      l.weights.push_back({c});
      l.weights.push_back({c});
    }
    l.weights.push_back({c, 3 * c});  // self-attention's q, k, v
    l.weights.push_back({c, c});      // its output
    l.weights.push_back({c});
    l.weights.push_back({c, c});            // cross-attention's q
    l.weights.push_back({context, 2 * c});  // its k, v from the text embedding
    l.weights.push_back({c, c});
    l.weights.push_back({c});
    l.weights.push_back({c, 8 * c});  // GEGLU's gate and up
    l.weights.push_back({8 * c});
    l.weights.push_back({4 * c, c});
    l.weights.push_back({c});
    l.weights.push_back({c, c});  // projection out
    l.weights.push_back({c});
  }

  /// A 3x3 convolution of stride 2 (`down`), or nearest-neighbour upsampling and a 3x3
  /// convolution: one layer.
  void resample_layer(Model& m, const std::string& name, bool down) {
    Layer l;
    l.name = name;
    const Map in = x_;
    conv_weights(l, 3, in.channels, in.channels);
    const Map result{"x", down ? (in.size + 1) / 2 : 2 * in.size, in.channels};
    l.named_ops = [in, result, down](std::int64_t b) {
      const std::string name = down ? "downsample" : "upsample";
      std::vector<NamedOp> ops;
      if (!down) {
        ops.push_back(elementwise(name + "_nearest", image(b, result.size, in.channels), 1));
        ops.back().a.id = "x";
      }
      ops.push_back(
          conv(name + "_conv", b, down ? in.size : result.size, in.channels, in.channels, 3, down ? 2 : 1));
      ops.back().a.keep = true;
      if (down) ops.back().a.id = "x";
      ops.back().out.id = "y";
      return ops;
    };
    finish(l, in, std::nullopt, result, false);
    x_ = result;
    m.add(std::move(l));
  }

  void down_path(Model& m) {
    for (std::size_t level = 0; level < d_.channels.size(); ++level) {
      for (std::int64_t j = 0; j < d_.layers_per_block; ++j) {
        resnet_layer(m, "down" + std::to_string(level) + "_" + std::to_string(j), d_.channels[level],
                     std::nullopt, d_.attention[level]);
        skips_.push_back(x_);
      }
      if (level + 1 < d_.channels.size()) {
        resample_layer(m, "down" + std::to_string(level) + "_downsample", true);
        skips_.push_back(x_);
      }
    }
  }

  /// ResNet, transformer, ResNet at the smallest size.
  void middle(Model& m) {
    const std::int64_t c = d_.channels.back();
    resnet_layer(m, "mid_0", c, std::nullopt, true);
    resnet_layer(m, "mid_1", c, std::nullopt, false);
  }

  void up_path(Model& m) {
    const std::size_t levels = d_.channels.size();
    for (std::size_t i = 0; i < levels; ++i) {
      const std::size_t level = levels - 1 - i;
      for (std::int64_t j = 0; j <= d_.layers_per_block; ++j) {
        const Map skip = skips_.back();
        skips_.pop_back();
        resnet_layer(m, "up" + std::to_string(i) + "_" + std::to_string(j), d_.channels[level], skip,
                     d_.attention[level]);
      }
      if (level > 0) resample_layer(m, "up" + std::to_string(i) + "_upsample", false);
    }
  }

  /// Group norm, SiLU, a 3x3 convolution to the latents' channels, the squared error.
  void output_layer(Model& m) {
    Layer l;
    l.name = "conv_out";
    const Map in = x_;
    l.weights = {{in.channels}, {in.channels}};
    conv_weights(l, 3, in.channels, d_.latent_channels);
    const std::int64_t latent = d_.latent_channels;
    l.named_ops = [in, latent](std::int64_t b) {
      std::vector<NamedOp> ops;
      norm_silu_conv(ops, "conv_out", b, in, latent, "prediction");
      // (prediction - noise)^2, summed: a subtract, a multiply, an add per element.
      ops.push_back(elementwise("squared_error", image(b, in.size, latent, true), 3));
      return ops;
    };
    derive_work(l, act_, false, [d = d_, act = act_, in](std::int64_t b) {
      return LayerBoundary{{map_tensor(b, in, act), time_tensor(d, b, act)}, {losses(b)}};
    });
    m.add(std::move(l));
  }
};

/// "block_channels": each level's channels (1 to 8 levels), multiples of the heads' width.
std::vector<std::int64_t> read_block_channels(const Json& j, const std::string& path, std::int64_t head_dim,
                                              Problems& problems) {
  std::vector<std::int64_t> channels;
  const std::string expected = "a list of 1 to 8 channel counts, each a positive multiple of head_dim (" +
                               std::to_string(head_dim) + ") up to 65536";
  if (!j.is_array() || j.empty() || j.size() > 8) {
    problems.add(path, j, expected);
    return {};
  }
  for (std::size_t i = 0; i < j.size(); ++i) {
    const Json& c = j[i];
    if (!c.is_number_integer() || c.get<std::int64_t>() <= 0 || c.get<std::int64_t>() > 65536 ||
        c.get<std::int64_t>() % head_dim != 0) {
      problems.add(path + "[" + std::to_string(i) + "]", c, expected);
      return {};
    }
    channels.push_back(c.get<std::int64_t>());
  }
  return channels;
}

}  // namespace

Model build_unet(Fields& f, Problems& problems) {
  UnetDims d;
  d.latent = f.integer_or("latent_size", d.latent, 8, 1 << 14);
  d.latent_channels = f.integer_or("latent_channels", d.latent_channels, 1, 1 << 12);
  d.layers_per_block = f.integer_or("layers_per_block", d.layers_per_block, 1, 16);
  d.head_dim = f.integer_or("head_dim", d.head_dim, 1, 1 << 12);
  d.context_seq = f.integer_or("context_tokens", d.context_seq, 1, 1 << 16);
  d.context_width = f.integer_or("context_width", d.context_width, 1, 1 << 16);
  if (const Json* c = f.optional("block_channels"); c && problems.empty()) {
    d.channels = read_block_channels(*c, f.path_of("block_channels"), d.head_dim, problems);
    d.attention.assign(d.channels.size(), true);  // every level attends but the deepest
    if (!d.attention.empty()) d.attention.back() = false;
  }
  for (const std::int64_t c : d.channels)
    if (problems.empty() && c % d.head_dim != 0)
      problems.add(f.path_of("head_dim"), Json(d.head_dim),
                   "a divisor of every level's channels (block_channels, " + std::to_string(c) + ")");
  TransformerDims attention;
  read_attention(f, problems, attention);
  d.flash = attention.flash;
  d.flash_block_rows = attention.flash_block_rows;
  const double act = read_activation_bytes(f);
  if (!problems.empty()) return {};
  return UnetBuilder(d, act).build();
}

}  // namespace tpusim
