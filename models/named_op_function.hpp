// The host math of a layer interpreted from its named ops, the one description of the layer:
// functional mode runs exactly the ops the cost model prices. Each op reads its predecessor's
// output, the layer's input ("in") or an earlier op's output by id; its weights are the layer's
// parameters, in op order, one tensor per copy (a layer norm's scale, then its shift).
#pragma once

#include <functional>
#include <memory>

#include "models/functional.hpp"
#include "models/model.hpp"
#include "models/named_ops.hpp"

namespace tpusim {

/// The mlp's data: features uniform in [-1, 1); the class a fixed random linear teacher scores
/// highest (learnable by the model).
std::shared_ptr<const DataSource> mlp_data(std::int64_t input, std::int64_t classes);
/// A language model's data: random tokens; each position's target is the next token id modulo
/// the vocabulary (learnable through the embedding and output layers).
std::shared_ptr<const DataSource> lm_data(std::int64_t seq, std::int64_t vocab);

using NamedOpsOf = std::function<std::vector<NamedOp>(std::int64_t batch)>;

/// Why functional mode has no host math for `op`, from its kind and math alone (its kind's
/// statement; "" when it has: einsums, a bias with or without ReLU or GELU, a ReLU alone,
/// residual adds, a layer norm, a causal softmax or softmax cross-entropy over the last
/// dimension, a table lookup, square "SAME" convolutions, max and average pools). Both host
/// interpreters (whole tensors here, shards in the mesh executor, which adds what shards need
/// and runs no convolutions or pools) start from it.
std::string missing_host_math(const NamedOp& op);

/// Whether every op has host math here (missing_host_math), reads what an earlier op of the layer
/// produced, a lookup comes first and a loss last.
bool has_host_math(const std::vector<NamedOp>& ops);

/// The layer function of a layer described by `ops`; `first`: it reads the model's input (from
/// `data`); a layer ending in softmax cross-entropy scores `data`'s targets.
std::shared_ptr<const LayerFunction> named_op_function(NamedOpsOf ops, std::shared_ptr<const DataSource> data,
                                                       bool first);

/// Gives every layer of `model` its named-op function, reading and scoring `data`, when every
/// layer has host math here; otherwise none (functional mode then refuses the model).
void attach_functions(Model& model, const std::shared_ptr<const DataSource>& data);

}  // namespace tpusim
