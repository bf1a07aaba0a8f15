// Layers other builders reuse (e.g. `sequential` lists them by name).
#pragma once

#include "models/model.hpp"

namespace tpusim {

/// A pre-norm Transformer block (self-attention + ReLU feed-forward) over sequences of `seq`.
Layer transformer_block_layer(const std::string& name, std::int64_t d_model, std::int64_t d_ff,
                              std::int64_t heads, std::int64_t d_kv, std::int64_t seq, bool biases,
                              double act);

}  // namespace tpusim
