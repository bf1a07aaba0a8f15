// A decoder-only Transformer as the GPipe paper scales it: an embedding layer, `layers`
// identical blocks (pre-norm self-attention + ReLU feed-forward, biases and layer norms
// counted), and an output layer (final norm, projection to the vocabulary, softmax
// cross-entropy). Input and output embeddings are separate matrices.
#include "models/model.hpp"

namespace tpusim {

namespace {

constexpr double kWeightBytes = 4.0;  // fp32 master weights
constexpr double kLayerNormOps = 8;   // mean, variance, normalize, scale, shift per element
constexpr double kSoftmaxOps = 5;     // max, subtract, exp, sum, divide per element

/// Forward and backward ops of a dense projection t x k -> t x n.
void dense_fwd_bwd(LayerWork& w, const std::string& name, std::int64_t t, std::int64_t k, std::int64_t n, double act) {
  w.forward.push_back(dense_op(name, t, k, n, act, kWeightBytes));
  w.backward.push_back(dense_op(name + "_dx", t, n, k, act, kWeightBytes));
  w.backward.push_back(dense_op(name + "_dw", k, t, n, act, kWeightBytes));
}

struct Dims {
  std::int64_t d_model, d_ff, heads, d_kv, vocab, seq;
};

Layer embedding_layer(const Dims& d, double act) {
  Layer l;
  l.name = "embedding";
  l.weights = {{d.vocab, d.d_model}};
  l.work = [d, act](std::int64_t b) {
    LayerWork w;
    const double t = double(b) * d.seq;
    w.forward.push_back(memory_op("gather", t * d.d_model * (kWeightBytes + act) + t * 4));
    // The gradient of a gather is a scatter-add into a dense fp32 table.
    w.backward.push_back(memory_op("scatter_add", double(d.vocab) * d.d_model * kWeightBytes + t * d.d_model * act));
    w.output_bytes = t * d.d_model * act;
    w.stash_bytes = t * 4;  // token ids
    w.workspace_bytes = 0;
    return w;
  };
  return l;
}

Layer block_layer(int index, const Dims& d, double act) {
  Layer l;
  l.name = "block" + std::to_string(index);
  const std::int64_t inner = d.heads * d.d_kv;
  l.weights = {{d.d_model}, {d.d_model},             // layer norm 1
               {d.d_model, 3 * inner}, {3 * inner},  // Q, K, V
               {inner, d.d_model}, {d.d_model},      // output projection
               {d.d_model}, {d.d_model},             // layer norm 2
               {d.d_model, d.d_ff}, {d.d_ff},        // feed-forward in
               {d.d_ff, d.d_model}, {d.d_model}};    // feed-forward out
  l.work = [d, act, inner](std::int64_t b) {
    LayerWork w;
    const std::int64_t t = b * d.seq;
    const double td = double(t) * d.d_model;
    const double scores = double(b) * d.heads * d.seq * d.seq;
    w.forward.push_back(vector_op("layernorm1", td, kLayerNormOps, act, false));
    w.backward.push_back(vector_op("layernorm1_grad", td, 2 * kLayerNormOps, act, false));
    dense_fwd_bwd(w, "qkv", t, d.d_model, 3 * inner, act);
    w.forward.push_back(vector_op("qkv_bias", double(t) * 3 * inner, 1, act, true));
    w.forward.push_back(batched_matmul_op("scores", b * d.heads, d.seq, d.d_kv, d.seq, act));
    w.backward.push_back(batched_matmul_op("scores_dq", b * d.heads, d.seq, d.seq, d.d_kv, act));
    w.backward.push_back(batched_matmul_op("scores_dk", b * d.heads, d.seq, d.seq, d.d_kv, act));
    w.forward.push_back(vector_op("softmax", scores, kSoftmaxOps, act, false));
    w.backward.push_back(vector_op("softmax_grad", scores, 4, act, false));
    w.forward.push_back(batched_matmul_op("context", b * d.heads, d.seq, d.seq, d.d_kv, act));
    w.backward.push_back(batched_matmul_op("context_dp", b * d.heads, d.seq, d.d_kv, d.seq, act));
    w.backward.push_back(batched_matmul_op("context_dv", b * d.heads, d.seq, d.seq, d.d_kv, act));
    dense_fwd_bwd(w, "attn_out", t, inner, d.d_model, act);
    w.forward.push_back(vector_op("residual1", td, 2, act, true));
    w.forward.push_back(vector_op("layernorm2", td, kLayerNormOps, act, false));
    w.backward.push_back(vector_op("layernorm2_grad", td, 2 * kLayerNormOps, act, false));
    dense_fwd_bwd(w, "ffn_in", t, d.d_model, d.d_ff, act);
    w.forward.push_back(vector_op("relu", double(t) * d.d_ff, 2, act, true));
    w.backward.push_back(vector_op("relu_grad", double(t) * d.d_ff, 1, act, true));
    dense_fwd_bwd(w, "ffn_out", t, d.d_ff, d.d_model, act);
    w.forward.push_back(vector_op("residual2", td, 2, act, true));
    w.backward.push_back(vector_op("bias_grads", double(t) * (3 * inner + d.d_ff + 2 * d.d_model), 1, act, true));
    w.output_bytes = td * act;
    // Kept for backward: block input, norm1 output, Q, K, V, softmax output, context,
    // attention residual, norm2 output, feed-forward pre-activation and activation.
    w.stash_bytes = (td * 6 + double(t) * 3 * inner + scores + 2.0 * double(t) * d.d_ff) * act;
    w.workspace_bytes = scores * act;  // pre-softmax scores, not kept
    return w;
  };
  return l;
}

Layer output_layer(const Dims& d, double act) {
  Layer l;
  l.name = "output";
  l.weights = {{d.d_model}, {d.d_model}, {d.d_model, d.vocab}};
  l.work = [d, act](std::int64_t b) {
    LayerWork w;
    const std::int64_t t = b * d.seq;
    const double td = double(t) * d.d_model;
    const double logits = double(t) * d.vocab;
    w.forward.push_back(vector_op("final_layernorm", td, kLayerNormOps, act, false));
    w.backward.push_back(vector_op("final_layernorm_grad", td, 2 * kLayerNormOps, act, false));
    dense_fwd_bwd(w, "logits", t, d.d_model, d.vocab, act);
    w.forward.push_back(vector_op("softmax_xent", logits, kSoftmaxOps, act, false));
    w.backward.push_back(vector_op("softmax_xent_grad", logits, 2, act, false));
    w.output_bytes = double(t) * 4;  // the per-token loss
    w.stash_bytes = (2 * td + logits) * act;
    w.workspace_bytes = logits * act;
    return w;
  };
  return l;
}

}  // namespace

Model build_transformer(Fields& f, Problems& problems) {
  Model m;
  Dims d{};
  const auto layers = f.integer("layers", 1, 100000);
  d.d_model = f.integer("d_model", 1, 1 << 20);
  d.d_ff = f.integer("d_ff", 1, 1 << 22);
  d.heads = f.integer("heads", 1, 1 << 14);
  d.vocab = f.integer("vocab", 1, 1 << 24);
  d.seq = f.integer("seq_len", 1, 1 << 20);
  if (f.has("d_kv")) {
    d.d_kv = f.integer("d_kv", 1, 1 << 16);
  } else {
    f.allow("d_kv");
    if (problems.empty() && d.d_model % d.heads != 0) {
      problems.add(f.path_of("heads"), Json(d.heads),
                   "a divisor of d_model (" + std::to_string(d.d_model) + "), or give d_kv explicitly");
    }
    d.d_kv = d.heads > 0 ? d.d_model / d.heads : 1;
  }
  m.activation_bytes = read_activation_bytes(f);
  if (!problems.empty()) return m;
  m.name = "transformer L=" + std::to_string(layers) + " d_model=" + std::to_string(d.d_model);
  m.layers.push_back(embedding_layer(d, m.activation_bytes));
  for (std::int64_t i = 0; i < layers; ++i) m.layers.push_back(block_layer(int(i), d, m.activation_bytes));
  m.layers.push_back(output_layer(d, m.activation_bytes));
  return m;
}

}  // namespace tpusim
