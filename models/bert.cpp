// BERT (Devlin et al., 2019) for pre-training, as BertForPreTraining builds it: word, token-type
// and learned position embeddings summed and layer-normalized, `layers` encoder blocks with a GELU
// feed-forward and dropout, and the two pre-training heads — the masked LM (a dense transform
// with GELU and a layer norm over the predicted positions, logits through the tied word
// embedding plus a bias) and next-sentence prediction (a tanh pooler over the first token, two
// classes). BERT's blocks normalize after each sublayer and this library's before (one layer norm
// per sublayer either way, the same parameters, FLOPs and kept tensors); BERT-large's
// 336,226,108 parameters are counted exactly.
#include "models/op_lowering.hpp"
#include "models/transformer_parts.hpp"

namespace tpusim {

namespace {

struct Bert {
  TransformerDims d;
  std::int64_t token_types = 2;
};

Layer bert_embedding(const Bert& bert, double act_bytes) {
  const TransformerDims& d = bert.d;
  Layer l;
  l.name = "embedding";
  l.weights = {
      {d.vocab, d.d_model}, {bert.token_types, d.d_model}, {d.seq, d.d_model}, {d.d_model}, {d.d_model}};
  l.named_ops = [bert](std::int64_t b) {
    const TransformerDims& d = bert.d;
    const Dim B{"batch", b}, S{"seq", d.seq}, M{"d_model", d.d_model}, T{"token_types", bert.token_types};
    std::vector<NamedOp> ops;
    ops.push_back(
        gather("word_embedding", act({B, S}), transformer_embedding_table(d, true, false), act({B, S, M})));
    ops.back().out.id = "words";
    NamedTensor type_ids = act({B, S});
    type_ids.id = "token_type_ids";  // read from the input, like the token ids
    ops.push_back(gather("token_type_embedding", type_ids, weight({T, M}), act({B, S, M})));
    // Words + token types + the learned position table (a bias over [seq, d_model]).
    ops.push_back(elementwise("embedding_sum", act({B, S, M}), 2, weight({S, M})));
    ops.back().math = NamedOp::Math::Residual;
    ops.back().skip = "words";
    ops.push_back(reduction("embedding_layernorm", act({B, S, M}, true), "d_model", weight({M}, 2)));
    ops.back().math = NamedOp::Math::LayerNorm;
    if (d.dropout > 0) ops.push_back(dropout("embedding_dropout", act({B, S, M})));
    return ops;
  };
  derive_work(l, act_bytes, true, [d, act_bytes](std::int64_t b) {
    const BoundaryTensor ids = boundary_tensor({{"batch", b}, {"seq", d.seq}}, 4);  // int32
    return LayerBoundary{
        {ids, ids},  // token and token-type ids
        {boundary_tensor({{"batch", b}, {"seq", d.seq}, {"d_model", d.d_model}}, act_bytes)}};
  });
  return l;
}

/// The masked LM's ops: the predicted positions' rows, the transform, logits and the loss. F is
/// the transform's width (d_model, named d_ff as dense stacks alternate their names).
void masked_lm(std::vector<NamedOp>& ops, const TransformerDims& d, const Dim& B) {
  const Dim S{"seq", d.seq}, P{"seq", d.predicted_positions()}, M{"d_model", d.d_model}, F{"d_ff", d.d_model},
      V{"vocab", d.vocab};
  NamedTensor encoded = act({B, S, M});
  encoded.id = "in";
  ops.push_back(gather("predicted_positions", act({B, P}), encoded, act({B, P, M})));
  ops.push_back(einsum("mlm_transform", act({B, P, M}, true), weight({M, F}), act({B, P, F})));
  // GELU with its bias (10 operations per element, 17 for the gradient: transformer.cpp's figures).
  ops.push_back(elementwise("mlm_transform_gelu", act({B, P, F}, true), 10, weight({F})));
  ops.back().math = NamedOp::Math::BiasGelu;
  ops.back().backward_ops = 17;
  ops.push_back(reduction("mlm_layernorm", act({B, P, F}, true), "d_ff", weight({F}, 2)));
  ops.back().math = NamedOp::Math::LayerNorm;
  // The layer norm's output is recomputed for the logits' table gradient, as the Transformer's.
  NamedTensor table = act({F, V});
  table.tied = true;  // the word embedding's table
  ops.push_back(einsum("mlm_logits", act({B, P, F}), table, act({B, P, V})));
  ops.push_back(elementwise("mlm_logits_bias", act({B, P, V}), 1, weight({V})));
  ops.back().math = NamedOp::Math::Bias;
  ops.push_back(reduction("mlm_xent", act({B, P, V}, true), "vocab"));
  ops.back().math = NamedOp::Math::SoftmaxXent;
}

/// Next-sentence prediction: the first token's row, the tanh pooler, two classes and the loss.
void next_sentence(std::vector<NamedOp>& ops, const TransformerDims& d, const Dim& B) {
  const Dim S{"seq", d.seq}, One{"seq", 1}, M{"d_model", d.d_model}, F{"d_ff", d.d_model}, C{"vocab", 2};
  NamedTensor encoded = act({B, S, M});
  encoded.id = "in";
  ops.push_back(gather("first_token", act({B, One}), encoded, act({B, One, M})));
  ops.push_back(einsum("pooler", act({B, One, M}, true), weight({M, F}), act({B, One, F})));
  // tanh(x + bias): two operations; its gradient (1 - y^2) dy three, from the kept output.
  ops.push_back(elementwise("pooler_tanh", act({B, One, F}), 2, weight({F})));
  ops.back().backward_ops = 3;
  ops.push_back(einsum("next_sentence", act({B, One, F}, true), weight({F, C}), act({B, One, C})));
  ops.push_back(elementwise("next_sentence_bias", act({B, One, C}), 1, weight({C})));
  ops.back().math = NamedOp::Math::Bias;
  ops.push_back(reduction("next_sentence_xent", act({B, One, C}, true), "vocab"));
  ops.back().math = NamedOp::Math::SoftmaxXent;
}

Layer pretraining_heads(const TransformerDims& d, double act_bytes) {
  Layer l;
  l.name = "pretraining_heads";
  const std::int64_t m = d.d_model;
  l.weights = {{m, m}, {m}, {m}, {m}, {d.vocab}, {m, m}, {m}, {m, 2}, {2}};
  l.named_ops = [d](std::int64_t b) {
    const Dim B{"batch", b};
    std::vector<NamedOp> ops;
    masked_lm(ops, d, B);
    next_sentence(ops, d, B);
    return ops;
  };
  derive_work(l, act_bytes, false, [d, act_bytes](std::int64_t b) {
    // Reads the encoder's output; hands on one loss per predicted position and per sequence.
    return LayerBoundary{{boundary_tensor({{"batch", b}, {"seq", d.seq}, {"d_model", d.d_model}}, act_bytes)},
                         {losses(b, d.predicted_positions() + 1)}};
  });
  return l;
}

}  // namespace

Model build_bert(Fields& f, Problems& problems) {
  Bert bert;
  TransformerDims& d = bert.d;
  d.layers = f.integer("layers", 1, 100000);
  d.d_model = f.integer("d_model", 1, 1 << 20);
  d.d_ff = f.integer("d_ff", 1, 1 << 24);
  d.heads = f.integer("heads", 1, 1 << 16);
  d.vocab = f.integer("vocab", 1, 1 << 24);
  d.seq = f.integer("seq_len", 1, 1 << 20);
  d.predicted = f.integer("predicted_positions", 1, d.seq > 0 ? d.seq : 1);
  bert.token_types = f.integer_or("token_types", 2, 1, 1 << 16);
  // The BERT paper's rates: 0.1 on every layer and on the attention probabilities.
  d.dropout = f.has("dropout") ? f.number("dropout", 0.0, 0.99) : 0.1;
  d.attention_dropout = f.has("attention_dropout") ? f.number("attention_dropout", 0.0, 0.99) : 0.1;
  read_attention(f, problems, d);
  d.gelu = true;
  d.shared_embeddings = true;
  const double bytes = read_activation_bytes(f);
  if (problems.empty() && d.d_model % d.heads != 0)
    problems.add(f.path_of("heads"), Json(d.heads),
                 "a divisor of d_model (" + std::to_string(d.d_model) + ")");
  if (!problems.empty()) return {};
  d.d_kv = d.d_model / d.heads;
  Model m;
  m.activation_bytes = bytes;
  m.tokens_per_example = d.seq;
  m.name = "bert L=" + std::to_string(d.layers) + " d_model=" + std::to_string(d.d_model);
  m.layers.push_back(bert_embedding(bert, bytes));
  for (std::int64_t i = 0; i < d.layers; ++i)
    m.add(transformer_block("block" + std::to_string(i), d, bytes), "block");
  m.layers.push_back(pretraining_heads(d, bytes));
  m.layers.back().tied_to = 0;  // the logits read the word embedding's table
  return m;
}

}  // namespace tpusim
