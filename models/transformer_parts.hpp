// The pieces of the Transformer builders that other model kinds reuse (BERT's encoder blocks
// and tied embedding table): the dimensions and options a Transformer is read with, and its
// pre-norm block.
#pragma once

#include "hardware/json_fields.hpp"
#include "models/model.hpp"
#include "models/named_ops.hpp"

namespace tpusim {

/// A Transformer's dimensions and options.
struct TransformerDims {
  std::int64_t layers = 0, encoder_layers = 0, d_model = 0, d_ff = 0, heads = 0, d_kv = 0, vocab = 0, seq = 0;
  bool biases = true;
  bool shared_embeddings = false;
  bool gelu = false;  ///< the feed-forward's activation: GELU (BERT) instead of ReLU
  /// A gated feed-forward (GLU variants: swiglu, geglu): act(x W_gate) * (x W_up), then W_down;
  /// its activation SiLU (swiglu) or GELU (geglu, with `gelu`).
  bool gated = false;
  /// Key/value heads (multi-query: 1; grouped-query: a divisor of `heads`; default `heads`): each
  /// group of heads / kv_heads query heads shares one key and value head.
  std::int64_t kv_heads = 0;
  bool grouped() const { return kv_heads > 0 && kv_heads < heads; }
  /// Dropout rates: on the embedding and every sublayer's output, and on attention probabilities.
  double dropout = 0, attention_dropout = 0;
  /// "attention": "flash": attention as one fused kernel (FlashAttention) whose scores and
  /// probabilities never reach HBM; the keys and values are read once per block of
  /// `flash_block_rows` queries, its kernels step through blocks of that many queries by as many
  /// keys, and the backward's two kernels compute the scores again. 128: the default block size
  /// of JAX's Pallas TPU flash-attention kernel.
  bool flash = false;
  std::int64_t flash_block_rows = 128;
  /// Causal self-attention (decoder-only models, a decoder's self-attention): the model counts
  /// the scores' and the context's products below the diagonal (half of them, as PaLM's and
  /// MaxText's MFU do); standard attention computes them all and masks, flash attention skips
  /// the blocks above the diagonal.
  bool causal = false;
  /// PaLM's parallel block: y = x + Attention(LN(x)) + MLP(LN(x)), one layer norm feeding both.
  bool parallel = false;
  /// "positions": "learned": a position table [seq_len, d_model] added to the token embedding
  /// (GPT-2 and GPT-3's); "rotary": each self-attention's queries and keys rotated by their
  /// position (RoPE, as PaLM and Llama), an element-wise op after each projection; "none":
  /// positions cost nothing (sinusoidal, as the 2018 Transformer).
  bool learned_positions = false, rotary = false;
  /// "norm": "rms": RMSNorm (Zhang and Sennrich 2019, as Llama): a scale and no shift, no mean;
  /// "layer" (default): layer norm.
  bool rms_norm = false;
  /// A normalization's weight copies: the scale, and the shift of a layer norm.
  int norm_copies() const { return rms_norm ? 1 : 2; }
  /// What a normalization computes (its kind's host math and pricing).
  NamedOp::Math norm_math() const { return rms_norm ? NamedOp::Math::RmsNorm : NamedOp::Math::LayerNorm; }
  /// Positions per sequence the output layer predicts (BERT's masked-LM predicts a few of
  /// them); 0: every position.
  std::int64_t predicted = 0;
  /// Mixture-of-experts ("moe"; GShard, Switch): every `every`-th block's feed-forward is
  /// `experts` feed-forwards of width `d_ff` behind a router; each token goes to `top_k` of them,
  /// each expert taking capacity_factor x top_k x tokens / experts of the step's tokens (slots
  /// computed whether filled or not). experts 0: none.
  struct Experts {
    std::int64_t experts = 0, every = 1, top_k = 1, d_ff = 0;
    double capacity_factor = 1;
  } moe;
  /// Cross-attention's keys and values project the encoder output of `context_seq` positions of
  /// `context_width` features (a UNet's text embedding); 0: `seq` and `d_model`.
  std::int64_t context_seq = 0, context_width = 0;
  /// This block's feed-forward is the experts (set per block from `moe`).
  bool moe_layer = false;
  /// Expert slots per expert for `batch` sequences: capacity_factor x top_k x tokens / experts,
  /// rounded up.
  std::int64_t expert_capacity(std::int64_t batch) const;
  std::int64_t inner() const { return heads * d_kv; }
  std::int64_t predicted_positions() const { return predicted > 0 ? predicted : seq; }
};

/// Reads the dimensions and options; `defaults` fill any that are absent (mesh_lm's sizes).
TransformerDims read_transformer_dims(Fields& f, Problems& problems, const TransformerDims* defaults);
/// Reads "attention" ("standard" or "flash") and "flash_block_rows" into `d`, after its
/// attention dropout (a fused kernel keeps no dropout mask: refused together).
void read_attention(Fields& f, Problems& problems, TransformerDims& d);
/// A pre-norm encoder block (self-attention, feed-forward, dropout where `d` asks for it).
Layer transformer_block(const std::string& name, const TransformerDims& d, double act);
/// A pre-norm block's ops over named dimensions, its input named "in": self-attention,
/// cross-attention over the encoder output (named "encoder") when `cross`, feed-forward.
std::vector<NamedOp> transformer_block_ops(const TransformerDims& d, std::int64_t batch, bool cross);
/// A table [vocab, d_model] ([d_model, vocab] transposed): owned, or another layer's (tied).
NamedTensor transformer_embedding_table(const TransformerDims& d, bool owned, bool transposed);
/// The weight of a dense projection k -> n, with its bias when the model has biases.
void add_dense_weights_of(Layer& l, const TransformerDims& d, std::int64_t k, std::int64_t n);

}  // namespace tpusim
