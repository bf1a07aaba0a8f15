// Transformers as sequences of layers: the GPipe paper's Transformer-L (decoder-only, separate
// input and output embeddings), the MLPerf Transformer-big (encoder-decoder, shared
// embeddings), and the Mesh-TensorFlow language models (`mesh_lm`, no biases). Pre-norm blocks:
// self-attention (+ cross-attention in a decoder block of an encoder-decoder) and a ReLU (or
// BERT's GELU) feed-forward, with dropout where the model asks for it; biases and layer norms
// are counted.
#include <cmath>

#include "models/blocks.hpp"
#include "models/named_op_function.hpp"
#include "models/op_lowering.hpp"
#include "models/transformer_parts.hpp"

namespace tpusim {

using Dims = TransformerDims;

namespace {

/// Weight tensors of a dense projection k -> n (with its bias if the model has biases).
void add_dense_weights(Layer& l, const Dims& d, std::int64_t k, std::int64_t n) {
  l.weights.push_back({k, n});
  if (d.biases) l.weights.push_back({n});
}

std::vector<NamedOp> block_named_ops(const Dims& d, std::int64_t b, bool cross);

/// A mixture-of-experts feed-forward's weights: the router (d_model x experts, no bias) and each
/// expert's projections (gate and up when gated), with their biases when the model has them.
void add_expert_weights(Layer& l, const Dims& d) {
  const auto& e = d.moe;
  l.weights.push_back({d.d_model, e.experts});
  for (int p = 0; p < (d.gated ? 2 : 1); ++p) {
    l.weights.push_back({e.experts, d.d_model, e.d_ff});
    if (d.biases) l.weights.push_back({e.experts, e.d_ff});
  }
  l.weights.push_back({e.experts, e.d_ff, d.d_model});
  if (d.biases) l.weights.push_back({e.experts, d.d_model});
}

Layer block(const std::string& name, const Dims& d, double act, bool decoder_with_encoder) {
  Layer l;
  l.name = name;
  const std::int64_t inner = d.inner();
  l.weights.assign(std::size_t(d.norm_copies()), {d.d_model});  // the norm before self-attention
  // q for every head; k and v for every key/value head (all heads unless grouped).
  add_dense_weights(l, d, d.d_model, inner + 2 * (d.grouped() ? d.kv_heads * d.d_kv : inner));
  add_dense_weights(l, d, inner, d.d_model);
  if (decoder_with_encoder) {
    for (int c = 0; c < d.norm_copies(); ++c) l.weights.push_back({d.d_model});
    add_dense_weights(l, d, d.d_model, inner);
    add_dense_weights(l, d, d.d_model, 2 * inner);
    add_dense_weights(l, d, inner, d.d_model);
  }
  if (!d.parallel)  // the feed-forward's own norm
    for (int c = 0; c < d.norm_copies(); ++c) l.weights.push_back({d.d_model});
  if (d.moe_layer) {
    add_expert_weights(l, d);
  } else {
    add_dense_weights(l, d, d.d_model, d.d_ff);
    if (d.gated) add_dense_weights(l, d, d.d_model, d.d_ff);  // the gate's and the up projection
    add_dense_weights(l, d, d.d_ff, d.d_model);
  }
  l.named_ops = [d, decoder_with_encoder](std::int64_t b) {
    return block_named_ops(d, b, decoder_with_encoder);
  };
  derive_work(l, act, false, [d, act, decoder_with_encoder](std::int64_t b) {
    // A decoder block also passes the encoder output on to the next decoder block.
    const BoundaryTensor x = boundary_tensor({{"batch", b}, {"seq", d.seq}, {"d_model", d.d_model}}, act);
    std::vector<BoundaryTensor> t(decoder_with_encoder ? 2 : 1, x);
    return LayerBoundary{t, t};
  });
  return l;
}

/// A table [vocab, d_model]: this layer's weight, or (tied) another layer's read as an input.
NamedTensor embedding_table(const Dims& d, bool owned, bool transposed) {
  const Dim M{"d_model", d.d_model}, V{"vocab", d.vocab};
  const std::vector<Dim> dims = transposed ? std::vector<Dim>{M, V} : std::vector<Dim>{V, M};
  NamedTensor t = owned ? weight(dims) : tpusim::act(dims);
  t.tied = !owned;
  return t;
}

/// `carried`: what passes through it from the input to later layers (the source ids, the
/// encoder output) for one example.
Layer embedding(const std::string& name, const Dims& d, double act, bool owns_table,
                std::optional<BoundaryTensor> carried) {
  Layer l;
  l.name = name;
  if (owns_table) l.weights = {{d.vocab, d.d_model}};
  if (d.learned_positions) l.weights.push_back({d.seq, d.d_model});
  l.named_ops = [name, d, owns_table](std::int64_t b) {
    const Dim B{"batch", b}, S{"seq", d.seq}, M{"d_model", d.d_model};
    std::vector<NamedOp> ops{
        gather(name, tpusim::act({B, S}), embedding_table(d, owns_table, false), tpusim::act({B, S, M}))};
    if (d.learned_positions) {  // each position's row added, fused into the lookup
      ops.push_back(elementwise(name + "_positions", tpusim::act({B, S, M}), 1, weight({S, M})));
      ops.back().math = NamedOp::Math::Bias;
    }
    if (d.dropout > 0) ops.push_back(dropout(name + "_dropout", tpusim::act({B, S, M})));
    return ops;
  };
  derive_work(l, act, true, [d, act, carried](std::int64_t b) {
    LayerBoundary boundary{{boundary_tensor({{"batch", b}, {"seq", d.seq}}, 4)},
                           {boundary_tensor({{"batch", b}, {"seq", d.seq}, {"d_model", d.d_model}}, act)}};
    if (carried) {
      BoundaryTensor c = *carried;
      c.tensor.dims.front().size = b;  // [batch, ...]
      boundary.in.push_back(c);
      boundary.out.push_back(c);
    }
    return boundary;
  });
  return l;
}

Layer output(const Dims& d, double act, bool owns_table) {
  Layer l;
  l.name = "output";
  l.weights.assign(std::size_t(d.norm_copies()), {d.d_model});
  if (owns_table) l.weights.push_back({d.d_model, d.vocab});
  l.named_ops = [d, owns_table](std::int64_t b) {
    const Dim B{"batch", b}, S{"seq", d.seq}, M{"d_model", d.d_model}, V{"vocab", d.vocab};
    // Logits for the predicted positions only (all of them unless a masked LM).
    const Dim P{"seq", d.predicted_positions()};
    std::vector<NamedOp> ops{
        reduction("final_layernorm", tpusim::act({B, S, M}, true), "d_model", weight({M}, d.norm_copies()))};
    ops[0].math = d.norm_math();
    const bool picked = d.predicted_positions() < d.seq;
    if (picked)  // a masked LM picks its predicted positions' rows first
      ops.push_back(
          gather("predicted_positions", tpusim::act({B, P}), tpusim::act({B, S, M}), tpusim::act({B, P, M})));
    // The final layer norm's output is recomputed; a masked LM keeps its picked rows.
    ops.push_back(einsum("logits", tpusim::act({B, P, M}, picked), embedding_table(d, owns_table, true),
                         tpusim::act({B, P, V})));
    ops.push_back(reduction("softmax_xent", tpusim::act({B, P, V}, true), "vocab"));
    ops.back().math = NamedOp::Math::SoftmaxXent;
    return ops;
  };
  derive_work(l, act, false, [d, act](std::int64_t b) {
    return LayerBoundary{{boundary_tensor({{"batch", b}, {"seq", d.seq}, {"d_model", d.d_model}}, act)},
                         {losses(b, d.predicted_positions())}};
  });
  return l;
}

/// Ids name the activations ops read other than their predecessor's output (functional mode
/// executes the ops on mesh shards by following them).
NamedTensor named(NamedTensor t, const std::string& id) {
  t.id = id;
  return t;
}

/// Builds a block's ops: attention sub-blocks, then the feed-forward one.
struct BlockOps {
  const Dims& d;
  const Dim B, S, Sk, M, F, H, K, G;
  const Dim Sc, Mc;  ///< cross-attention's keys: the encoder output's positions and width
  std::vector<NamedOp> ops;

  BlockOps(const Dims& dims, std::int64_t b)
      : d(dims),
        B{"batch", b},
        S{"seq", d.seq},
        Sk{"seq_k", d.seq},
        M{"d_model", d.d_model},
        F{"d_ff", d.d_ff},
        // Grouped: "heads" counts the query heads of a group, "kv_heads" the groups.
        H{"heads", d.grouped() ? d.heads / d.kv_heads : d.heads},
        K{"d_kv", d.d_kv},
        G{"kv_heads", d.grouped() ? d.kv_heads : 0},
        Sc{"seq_k", d.context_seq > 0 ? d.context_seq : d.seq},
        Mc{"d_model", d.context_width > 0 ? d.context_width : d.d_model} {}

  /// The dimensions of a query (or context) head, and of a key or value head: every head alone,
  /// or grouped (G groups of H query heads sharing one key and value head).
  std::vector<Dim> query_heads() const { return d.grouped() ? std::vector<Dim>{G, H} : std::vector<Dim>{H}; }
  std::vector<Dim> kv_heads() const { return d.grouped() ? std::vector<Dim>{G} : std::vector<Dim>{H}; }
  /// [B, seq, heads..., d_kv] and friends.
  static std::vector<Dim> cat(std::vector<Dim> a, const std::vector<Dim>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  NamedTensor bias(std::vector<Dim> dims) const { return d.biases ? weight(std::move(dims)) : NamedTensor{}; }

  /// The pre-norm layer norm of sub-block `p` over its input `in`, its output named `p`_h.
  void layer_norm(const std::string& p, const std::string& in) {
    ops.push_back(reduction("layernorm_" + p, named(act({B, S, M}, true), in), "d_model",
                            weight({M}, d.norm_copies())));
    ops.back().math = d.norm_math();
    ops.back().out.id = p + "_h";
  }

  /// The q, k and v projections (with their biases). The layer norm's output feeds the query
  /// projection (and the key and value ones in self-attention): recomputed for their weight
  /// gradients, not kept. Cross-attention's k and v project the encoder output, kept once.
  void projections(const std::string& p, bool from_encoder) {
    for (const char* x : {"q", "k", "v"}) {
      const bool encoder_side = from_encoder && x[0] != 'q';
      const auto input =
          named(act({B, encoder_side ? Sc : S, encoder_side ? Mc : M}, encoder_side && x[0] == 'k'),
                encoder_side ? "encoder" : p + "_h");
      const auto heads = x[0] == 'q' ? query_heads() : kv_heads();
      const auto out = act(cat(cat({B, encoder_side ? Sc : S}, heads), {K}));
      ops.push_back(einsum(p + "_" + x + "_projection", input,
                           weight(cat(cat({encoder_side ? Mc : M}, heads), {K})), named(out, p + "_" + x)));
      if (d.biases) {
        ops.back().out.id += "_unbiased";
        ops.push_back(elementwise(p + "_" + x + "_bias", named(out, p + "_" + x + "_unbiased"), 1,
                                  bias(cat(heads, {K}))));
        ops.back().math = NamedOp::Math::Bias;
        ops.back().out.id = p + "_" + x;
      }
      if (d.rotary && p == "self" && x[0] != 'v') rotate(p + "_" + x, out);
    }
  }

  /// Rotary positions (RoPE) on the projection `id` of shape `out`: each pair of features turned
  /// by its position's angle, x cos + rot(x) sin (the angles' cos and sin a table per position,
  /// shared by every example and head): two multiplies and an add per element, the rotation a
  /// permutation; its backward turns the gradient back (the same three). Element-wise, fused
  /// with the projection where the core fuses; it keeps nothing.
  void rotate(const std::string& id, const NamedTensor& out) {
    ops.back().out.id = id + "_unrotated";
    ops.push_back(elementwise(id + "_rotary", named(out, id + "_unrotated"), 3));
    ops.back().math = NamedOp::Math::Rotary;
    ops.back().backward_ops = 3;
    ops.back().out.id = id;
  }

  /// Attention sub-block `p` ("self", or "cross" over the encoder output), its output named
  /// `next` (the next sub-block's input).
  void attention(const std::string& p, bool from_encoder, const std::string& next) {
    const std::string in = p == "self" ? "in" : "cross_in";
    layer_norm(p, in);
    projections(p, from_encoder);
    attend(p, p == "self" && d.causal);
    residual(p, in);
    ops.back().out.id = next;
  }

  /// Scores, softmax, context and the output projection of sub-block `p` over its projections.
  void attend(const std::string& p, bool causal) {
    const Dim& keys = p == "cross" ? Sc : Sk;
    const auto q = cat(cat({B, S}, query_heads()), {K}), kv = cat(cat({B, keys}, kv_heads()), {K});
    const auto probabilities = cat(cat({B}, query_heads()), {S, keys});
    ops.push_back(einsum(p + "_scores", named(act(q, true), p + "_q"), named(act(kv, true), p + "_k"),
                         act(probabilities)));
    ops.push_back(reduction(p + "_softmax", act(probabilities), "seq_k"));
    ops.back().math = NamedOp::Math::CausalSoftmax;
    ops.back().scale = 1.0 / std::sqrt(double(d.d_kv));
    // With dropout, the context's kept input stands for the probabilities (the softmax's
    // backward reads them); the dropped ones are recomputed from them and the mask in its fusion.
    if (d.attention_dropout > 0) ops.push_back(dropout(p + "_attention_dropout", act(probabilities)));
    ops.push_back(einsum(p + "_context", act(probabilities, true), named(act(kv, true), p + "_v"), act(q)));
    if (d.flash) flash(ops.size() - 3, causal);
    if (causal) {
      NamedOp &scores = ops[ops.size() - (d.attention_dropout > 0 ? 4 : 3)], &context = ops.back();
      scores.counted_fraction = context.counted_fraction = 0.5;
    }
    ops.push_back(einsum(p + "_output", act(q, true), weight(cat(query_heads(), {K, M})), act({B, S, M})));
  }

  /// Flash attention over the scores, softmax and context ops from `first`: the scores and
  /// probabilities stay on chip (nothing kept but each row's log-sum-exp, the softmax's), the
  /// keys and values are read once per block of queries, and the kernels step through blocks of
  /// flash_block_rows queries by as many keys (Op::kernel_block).
  /// Causal: each block of queries meets only the blocks of keys up to the diagonal, nb (nb + 1) / 2
  /// of the nb x nb blocks.
  void flash(std::size_t first, bool causal) {
    NamedOp &scores = ops[first], &softmax = ops[first + 1], &context = ops[first + 2];
    const double blocks = double((d.seq + d.flash_block_rows - 1) / d.flash_block_rows);
    scores.out.on_chip = softmax.a.on_chip = softmax.out.on_chip = context.a.on_chip = true;
    context.a.keep = false;
    scores.kernel_block = context.kernel_block = d.flash_block_rows;
    scores.b.passes = context.b.passes = causal ? (blocks + 1) / 2 : blocks;
    if (causal) scores.computed_fraction = context.computed_fraction = (blocks + 1) / (2 * blocks);
  }

  /// Dropout (when set), then the residual sum with the sub-block's input `in`.
  void residual(const std::string& p, const std::string& in) {
    if (d.dropout > 0) ops.push_back(dropout(p + "_dropout", act({B, S, M})));
    ops.push_back(elementwise(p + "_residual", act({B, S, M}), 2, bias({M})));
    ops.back().math = NamedOp::Math::Residual;
    ops.back().skip = in;
  }

  /// The feed-forward sub-block. ffn_in reads the layer norm's output (recomputed); ffn_out's
  /// kept input stands for the pre-activation its ReLU is recomputed from (the same size).
  void feed_forward() {
    ops.push_back(reduction("layernorm_ffn", named(act({B, S, M}, true), "ffn_in"), "d_model",
                            weight({M}, d.norm_copies())));
    ops.back().math = d.norm_math();
    ops.back().out.id = "ffn_h";
    mlp("ffn_h", "ffn_in");
  }

  /// The feed-forward's projections over the normalized input `h`, its residual sum with `in`
  /// (a mixture of experts in an expert block).
  void mlp(const std::string& h, const std::string& in) {
    if (d.moe_layer) return experts(h, in);
    if (d.gated) return gated_feed_forward(h, in);
    ops.push_back(einsum("ffn_in", named(act({B, S, M}), h), weight({M, F}), act({B, S, F})));
    activation("ffn", {B, S}, {}, F);
    ops.push_back(einsum("ffn_out", act({B, S, F}, true), weight({F, M}), act({B, S, M})));
    residual("ffn", in);
  }

  /// The feed-forward's activation over rows `rows` of width `f` (`wprefix`: the dimensions its
  /// bias has before the width, an expert's).
  void activation(const std::string& p, const std::vector<Dim>& rows, const std::vector<Dim>& wprefix,
                  const Dim& f) {
    if (d.gelu) {
      // gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), BERT's form: with the bias, 10
      // operations per element (tanh one); its gradient recomputes tanh from the kept input and
      // takes 17. Unlike ReLU's, it needs its input as well as its output (ffn_out's input).
      ops.push_back(elementwise(p + "_gelu", act(cat(rows, {f}), true), 10, bias(cat(wprefix, {f}))));
      ops.back().math = NamedOp::Math::BiasGelu;
      ops.back().backward_ops = 17;
    } else {
      ops.push_back(elementwise(p + "_relu", act(cat(rows, {f})), 2, bias(cat(wprefix, {f}))));
      ops.back().math = NamedOp::Math::BiasRelu;
    }
  }

  /// A mixture of experts (GShard's MoE layer): a router over the normalized input `h` (logits
  /// for every expert, their softmax), the tokens dispatched to their experts' slots [experts,
  /// capacity, d_model], each expert's feed-forward on its slots (batched over the experts), the
  /// results combined back to the tokens and weighted by their gates, then the residual sum.
  /// Under a layout splitting "experts", dispatch and combine are all-to-alls (models/ops/dispatch.cpp).
  void experts(const std::string& h, const std::string& in) {
    const Dim E{"experts", d.moe.experts}, C{"capacity", d.expert_capacity(B.size)}, Fe{"d_ff", d.moe.d_ff};
    const Dim R{"router", d.moe.experts};  // the router's logits: not split with the experts
    ops.push_back(einsum("moe_router", named(act({B, S, M}), h), weight({M, R}), act({B, S, R})));
    ops.push_back(reduction("moe_gates", act({B, S, R}), "router"));  // a softmax over the experts
    ops.back().out.id = "moe_gates";
    ops.push_back(dispatch("moe_dispatch", named(act({B, S, M}), h), act({E, C, M})));
    ops.back().out.id = "moe_slots";
    if (d.gated) {
      // Gate and up read the slots, kept once (by the gate) for both weight gradients.
      for (const char* x : {"gate", "up"})
        ops.push_back(einsum(std::string("moe_") + x, named(act({E, C, M}, x[0] == 'g'), "moe_slots"),
                             weight({E, M, Fe}), named(act({E, C, Fe}), std::string("moe_") + x)));
      ops.push_back(elementwise(d.gelu ? "moe_geglu" : "moe_swiglu", named(act({E, C, Fe}, true), "moe_gate"),
                                d.gelu ? 11 : 6, named(act({E, C, Fe}, true), "moe_up")));
      ops.back().math = d.gelu ? NamedOp::Math::GatedGelu : NamedOp::Math::GatedSilu;
      ops.back().backward_ops = d.gelu ? 19 : 12;
    } else {
      ops.push_back(einsum("moe_in", act({E, C, M}, true), weight({E, M, Fe}), act({E, C, Fe})));
      activation("moe", {E, C}, {E}, Fe);
    }
    ops.push_back(einsum("moe_out", act({E, C, Fe}, true), weight({E, Fe, M}), act({E, C, M})));
    if (d.biases) {
      ops.push_back(elementwise("moe_out_bias", act({E, C, M}), 1, bias({E, M})));
      ops.back().math = NamedOp::Math::Bias;
    }
    ops.push_back(dispatch("moe_combine", act({E, C, M}), act({B, S, M})));
    // Each token's expert outputs weighted by their gates and summed.
    ops.push_back(elementwise("moe_weighting", act({B, S, M}), 2 * double(d.moe.top_k),
                              named(act({B, S, R}, true), "moe_gates")));
    residual("ffn", in);
  }

  /// The gated feed-forward (GLU variants, Shazeer 2020; PaLM's and Llama's SwiGLU): the layer
  /// norm's output projected twice, gate and up (recomputed for their weight gradients, not
  /// kept), act(gate) * up with both kept for its backward, then the down projection. SiLU is
  /// x * sigmoid(x): with the product, 6 operations per element (exp, add, reciprocal, two
  /// products and the gate's product); its gradient 12. GELU's tanh form takes 10 with its bias
  /// (above): 11 with the product, 19 for the gradient.
  void gated_feed_forward(const std::string& h, const std::string& in) {
    for (const char* x : {"gate", "up"}) {
      ops.push_back(einsum(std::string("ffn_") + x, named(act({B, S, M}), h), weight({M, F}),
                           named(act({B, S, F}), std::string("ffn_") + x)));
      if (!d.biases) continue;
      ops.back().out.id += "_unbiased";
      ops.push_back(elementwise(std::string("ffn_") + x + "_bias",
                                named(act({B, S, F}), std::string("ffn_") + x + "_unbiased"), 1, bias({F})));
      ops.back().math = NamedOp::Math::Bias;
      ops.back().out.id = std::string("ffn_") + x;
    }
    ops.push_back(elementwise(d.gelu ? "ffn_geglu" : "ffn_swiglu", named(act({B, S, F}, true), "ffn_gate"),
                              d.gelu ? 11 : 6, named(act({B, S, F}, true), "ffn_up")));
    ops.back().math = d.gelu ? NamedOp::Math::GatedGelu : NamedOp::Math::GatedSilu;
    ops.back().backward_ops = d.gelu ? 19 : 12;
    ops.push_back(einsum("ffn_out", act({B, S, F}, true), weight({F, M}), act({B, S, M})));
    residual("ffn", in);
  }

  /// PaLM's parallel block: one layer norm, its output (`ffn_h`) read by the attention's
  /// projections and the feed-forward's (one fused matmul in PaLM; separate einsums here, the
  /// same FLOPs and weights, the normalized input read once per projection); the attention's
  /// output and the feed-forward's added to the input: y = x + Attention(LN(x)) + MLP(LN(x)).
  void parallel_block() {
    layer_norm("self", "in");
    projections("self", false);
    attend("self", d.causal);
    residual("self", "in");
    ops.back().out.id = "attention_sum";
    mlp("self_h", "attention_sum");
  }
};

/// A block's ops over named dimensions (for mesh layouts): self-attention, cross-attention over
/// the encoder output (seq_k positions) in a decoder block of an encoder-decoder, feed-forward.
}  // namespace

std::vector<NamedOp> transformer_block_ops(const Dims& d, std::int64_t b, bool cross) {
  return block_named_ops(d, b, cross);
}

namespace {

std::vector<NamedOp> block_named_ops(const Dims& d, std::int64_t b, bool cross) {
  BlockOps block(d, b);
  if (d.parallel) {
    block.parallel_block();
    return std::move(block.ops);
  }
  block.attention("self", false, cross ? "cross_in" : "ffn_in");
  if (cross) block.attention("cross", true, "ffn_in");
  block.feed_forward();
  return std::move(block.ops);
}

Model assemble(const Dims& d, double act, const std::string& name) {
  Model m;
  m.tokens_per_example = d.seq;
  m.activation_bytes = act;
  m.name = name;
  m.flash_attention = d.flash;
  const bool encdec = d.encoder_layers > 0;
  // Per example: the target token ids (int32) ride along the encoder half of the pipeline.
  const auto target_ids = boundary_tensor({{"batch", 1}, {"seq", d.seq}}, 4);
  m.layers.push_back(embedding(encdec ? "source_embedding" : "embedding", d, act, true,
                               encdec ? std::optional{target_ids} : std::nullopt));
  Dims encoder = d;  // an encoder attends both ways
  encoder.causal = false;
  for (std::int64_t i = 0; i < d.encoder_layers; ++i)
    m.add(block("encoder" + std::to_string(i), encoder, act, false), "block");
  if (encdec) {
    // The target embedding reads the target ids and passes the encoder output along.
    m.layers.push_back(
        embedding("target_embedding", d, act, !d.shared_embeddings,
                  boundary_tensor({{"batch", 1}, {"seq", d.seq}, {"d_model", d.d_model}}, act)));
    if (d.shared_embeddings) m.layers.back().tied_to = 0;  // the source embedding's table
  }
  for (std::int64_t i = 0; i < d.layers; ++i) {
    Dims b = d;  // every `every`-th block's feed-forward is the experts
    b.moe_layer = d.moe.experts > 0 && (i + 1) % d.moe.every == 0;
    m.add(block((encdec ? "decoder" : "block") + std::to_string(i), b, act, encdec), encdec ? "decoder_block"
                                                                                     : b.moe_layer
                                                                                         ? "expert_block"
                                                                                         : "block");
  }
  m.mixture_of_experts = d.moe.experts > 0;
  m.layers.push_back(output(d, act, !d.shared_embeddings));
  if (d.shared_embeddings) m.layers.back().tied_to = 0;  // the (source) embedding's table
  // Functional mode runs the named ops on the host wherever it has their math (the decoder-only
  // model with its own input and output tables and without dropout).
  attach_functions(m, lm_data(d.seq, d.vocab));
  return m;
}

/// "moe": {"experts", "every", "top_k", "capacity_factor", "d_ff"} (a decoder-only model's
/// mixture of experts; see TransformerDims::Experts).
void read_experts(Fields& f, Problems& problems, Dims& d) {
  const Json* j = f.optional("moe");
  if (!j) return;
  Fields e(*j, f.path_of("moe"), problems);
  if (!e.ok()) return;
  auto& m = d.moe;
  m.experts = e.integer("experts", 1, 1 << 20);
  m.every = e.integer_or("every", 1, 1, 100000);
  m.top_k = e.integer_or("top_k", 1, 1, 1 << 20);  // at most experts (below)
  m.capacity_factor = e.has("capacity_factor") ? e.number("capacity_factor", 1e-6, 1000.0) : 1.0;
  m.d_ff = e.integer_or("d_ff", d.d_ff, 1, 1 << 24);
  e.finish();
  if (problems.empty() && m.every > d.layers)
    problems.add(e.path_of("every"), Json(m.every),
                 "at most layers (" + std::to_string(d.layers) +
                     "): the experts replace every k-th block's feed-forward, a larger k none");
  if (problems.empty() && m.top_k > m.experts)
    problems.add(
        e.path_of("top_k"), Json(m.top_k),
        "at most experts (" + std::to_string(m.experts) + "): each token goes to top_k distinct experts");
  if (problems.empty() && d.encoder_layers > 0)
    problems.add(f.path_of("moe"), *j, "no moe with encoder_layers > 0 (experts in a decoder-only model)");
  if (problems.empty() && d.parallel)
    problems.add(f.path_of("moe"), *j, "no moe with block \"parallel\" (experts in sequential blocks)");
}

/// "activation": required (it changes the FLOPs, the memory and, gated, the parameters), but for
/// a preset (mesh_lm: the paper's ReLU, Mesh-TensorFlow's default).
void read_activation(Fields& f, Problems& problems, Dims& d, bool preset) {
  if (!f.has("activation") && !preset)
    problems.add(f.path_of("activation"), Json("missing"),
                 "one of \"relu\" (the 2017 Transformer), \"gelu\" (BERT, GPT-2/3), \"swiglu\" (Llama, "
                 "PaLM), \"geglu\": the MLP's activation");
  const std::string activation = f.string_or("activation", "relu", {"relu", "gelu", "swiglu", "geglu"});
  d.gelu = activation == "gelu" || activation == "geglu";
  d.gated = activation == "swiglu" || activation == "geglu";
}

/// Reads the dimensions; `defaults` (from mesh_lm's size) fill any that are absent.
Dims read_dims_impl(Fields& f, Problems& problems, const Dims* defaults) {
  Dims d = defaults ? *defaults : Dims{};
  auto get = [&](const char* key, std::int64_t& into, std::int64_t min, std::int64_t max) {
    into = defaults ? f.integer_or(key, into, min, max) : f.integer(key, min, max);
  };
  get("layers", d.layers, 1, 100000);
  get("d_model", d.d_model, 1, 1 << 20);
  get("d_ff", d.d_ff, 1, 1 << 24);
  get("heads", d.heads, 1, 1 << 16);
  get("vocab", d.vocab, 1, 1 << 24);
  get("seq_len", d.seq, 1, 1 << 20);
  d.encoder_layers = f.integer_or("encoder_layers", 0, 0, 100000);
  d.biases = f.boolean_or("biases", d.biases);
  d.shared_embeddings = f.boolean_or("shared_embeddings", false);
  d.predicted = f.integer_or("predicted_positions", 0, 1, d.seq > 0 ? d.seq : 1);
  d.causal = f.boolean_or("causal", true);  // decoder-only: causal; a decoder's self-attention too
  d.parallel = f.string_or("block", "sequential", {"sequential", "parallel"}) == "parallel";
  const std::string positions = f.string_or("positions", "none", {"none", "learned", "rotary"});
  d.learned_positions = positions == "learned";
  d.rotary = positions == "rotary";
  d.rms_norm = f.string_or("norm", "layer", {"layer", "rms"}) == "rms";
  if (problems.empty() && d.parallel && d.encoder_layers > 0)
    problems.add(f.path_of("block"), Json("parallel"),
                 "\"sequential\" with encoder_layers > 0 (a parallel block has no cross-attention here)");
  read_activation(f, problems, d, defaults != nullptr);
  // A rate of 1 would drop everything: at most 0.99.
  d.dropout = f.has("dropout") ? f.number("dropout", 0.0, 0.99) : 0.0;
  d.attention_dropout = f.has("attention_dropout") ? f.number("attention_dropout", 0.0, 0.99) : 0.0;
  read_attention(f, problems, d);
  read_experts(f, problems, d);
  d.kv_heads = f.integer_or("kv_heads", d.heads, 1, 1 << 16);
  if (problems.empty() && d.heads % d.kv_heads != 0)
    problems.add(f.path_of("kv_heads"), Json(d.kv_heads),
                 "a divisor of heads (" + std::to_string(d.heads) +
                     "): each key/value head serves as many query heads (1: multi-query attention)");
  if (f.has("d_kv")) {
    d.d_kv = f.integer("d_kv", 1, 1 << 16);
  } else {
    f.allow("d_kv");
    if (!defaults) {
      if (problems.empty() && d.d_model % d.heads != 0) {
        problems.add(f.path_of("heads"), Json(d.heads),
                     "a divisor of d_model (" + std::to_string(d.d_model) + "), or give d_kv explicitly");
      }
      d.d_kv = d.heads > 0 ? d.d_model / d.heads : 1;
    }
  }
  return d;
}

}  // namespace

Model build_transformer(Fields& f, Problems& problems) {
  Dims d = read_transformer_dims(f, problems, nullptr);
  const double act = read_activation_bytes(f);
  if (!problems.empty()) return {};
  std::string name = "transformer L=" + std::to_string(d.layers) + " d_model=" + std::to_string(d.d_model);
  if (d.encoder_layers > 0)
    name = "transformer " + std::to_string(d.encoder_layers) + "+" + std::to_string(d.layers) +
           " d_model=" + std::to_string(d.d_model);
  Model m = assemble(d, act, name);
  if (d.moe.experts > 0 && d.moe.capacity_factor != 1.0) {
    Dims routed = d;
    routed.moe.capacity_factor = 1.0;
    m.routed = std::make_shared<const Model>(assemble(routed, act, name));
  }
  return m;
}

Model build_mesh_lm(Fields& f, Problems& problems) {
  // The Mesh-TensorFlow paper's language models: 6 layers, d_model 1024, d_kv 256,
  // d_ff = 8192 * 2^s, heads = 8 * 2^s, vocabulary 32k, sequence 256, no biases.
  // The other keys are read whatever the size (a bad size, or a problem elsewhere in the study,
  // must not make them look unknown).
  const std::size_t before = problems.size();
  const auto s = f.integer("size", -1, 5);
  const double scale = std::ldexp(1.0, problems.size() == before ? int(s) : 0);
  Dims defaults;
  defaults.layers = 6;
  defaults.d_model = 1024;
  defaults.d_kv = 256;
  defaults.d_ff = std::int64_t(8192 * scale);
  defaults.heads = std::int64_t(8 * scale);
  defaults.vocab = 32768;
  defaults.seq = 256;
  defaults.biases = false;
  Dims d = read_transformer_dims(f, problems, &defaults);
  const double act = read_activation_bytes(f);
  if (!problems.empty()) return {};
  return assemble(d, act, "mesh_lm s=" + std::to_string(s));
}

}  // namespace tpusim

namespace tpusim {

std::int64_t TransformerDims::expert_capacity(std::int64_t batch) const {
  const double slots =
      moe.capacity_factor * double(moe.top_k) * double(batch) * double(seq) / double(moe.experts);
  return std::max<std::int64_t>(1, std::int64_t(std::ceil(slots - 1e-9)));
}

void read_attention(Fields& f, Problems& problems, Dims& d) {
  d.flash = f.string_or("attention", "standard", {"standard", "flash"}) == "flash";
  d.flash_block_rows = f.integer_or("flash_block_rows", d.flash_block_rows, 8, 1 << 20);
  if (problems.empty() && d.flash && d.attention_dropout > 0)
    problems.add(f.path_of("attention"), Json("flash"),
                 "\"standard\" with attention_dropout > 0 (a dropout mask inside the fused kernel is not "
                 "modelled)");
  if (problems.empty() && !d.flash && f.has("flash_block_rows"))
    problems.add(f.path_of("flash_block_rows"), Json(d.flash_block_rows),
                 "no flash_block_rows unless \"attention\" is \"flash\"");
}

Dims read_transformer_dims(Fields& f, Problems& problems, const Dims* defaults) {
  return read_dims_impl(f, problems, defaults);
}

Layer transformer_block(const std::string& name, const Dims& d, double act) {
  return block(name, d, act, false);
}

NamedTensor transformer_embedding_table(const Dims& d, bool owned, bool transposed) {
  return embedding_table(d, owned, transposed);
}

void add_dense_weights_of(Layer& l, const Dims& d, std::int64_t k, std::int64_t n) {
  add_dense_weights(l, d, k, n);
}

Layer transformer_block_layer(const std::string& name, std::int64_t d_model, std::int64_t d_ff,
                              std::int64_t heads, std::int64_t d_kv, std::int64_t seq, bool biases,
                              double act) {
  Dims d;
  d.d_model = d_model;
  d.d_ff = d_ff;
  d.heads = heads;
  d.d_kv = d_kv;
  d.seq = seq;
  d.biases = biases;
  return block(name, d, act, false);
}

}  // namespace tpusim
