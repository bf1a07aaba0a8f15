// The host math of a layer for functional mode: its parameters' initial values, its forward on
// a batch of examples and its backward, in fp32 with the kernels of models/kernels. The first
// layer of a model generates its input and the last its targets from deterministic synthetic
// data (a function of seed, step and example index only, so every partition of a batch sees
// the same examples); the loss is the mean over the global batch, so gradients of micro-batches
// and replicas add up to the full-batch gradient.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace tpusim {

using Tensor = std::vector<float>;

/// Which examples a layer call processes.
struct Batch {
  std::int64_t first = 0;         ///< index of the first example in the global batch
  std::int64_t count = 0;         ///< examples in this call
  std::int64_t global = 0;        ///< examples in the global batch (the loss averages over them)
  int step = 0;                   ///< training step (fresh data every step)
  std::uint64_t seed = 0;
};

/// Where a weight of the layer's named ops sits in the layer's parameters: parameter `param`
/// viewed with sizes `shape`, the weight's dimensions on axes `axes` (in order), every other
/// axis at index `fixed` (e.g. the q projection [d_model, heads, d_kv] inside a fused
/// [d_model, 3 x heads x d_kv] parameter: shape {d_model, 3, heads, d_kv}, axes {0, 2, 3},
/// fixed {0, 0, 0, 0}).
struct ParamView {
  int param = 0;
  std::vector<std::int64_t> shape;
  std::vector<int> axes;
  std::vector<std::int64_t> fixed;
};

/// What a forward keeps for its backward.
struct Saved {
  std::vector<Tensor> tensors;
  std::vector<std::int32_t> ids;  ///< token ids or class targets
};

class LayerFunction {
 public:
  virtual ~LayerFunction() = default;
  /// Initial parameters in the order and shapes of Layer::weights, deterministic in `seed`.
  virtual std::vector<Tensor> init(std::uint64_t seed) const = 0;
  /// Forward: `in` is the previous layer's output, handed over (the first layer ignores it and
  /// reads the data). Adds this call's share of the loss to `loss` if it is the loss layer.
  virtual Tensor forward(const std::vector<Tensor>& params, Tensor in, const Batch& batch, Saved& saved, double& loss) const = 0;
  /// Backward: returns the gradient of the input (empty for the first layer) and ADDS the
  /// parameter gradients to `grads`. The loss layer ignores `dout`.
  virtual Tensor backward(const std::vector<Tensor>& params, const Tensor& dout, const Batch& batch, const Saved& saved,
                          std::vector<Tensor>& grads) const = 0;
  /// The data a first layer reads ([examples x features]) and the targets a loss layer scores
  /// against (one class per example): for executors that run the layer's math themselves on
  /// shards. Empty when the layer does not read data.
  virtual Tensor input(const Batch&) const { return {}; }
  virtual std::vector<std::int32_t> targets(const Batch&) const { return {}; }
  /// Token ids a first layer looks up ([examples x positions]); empty when it reads features.
  virtual std::vector<std::int32_t> tokens(const Batch&) const { return {}; }
  /// Where the weights of the layer's named ops sit in its parameters, one view per weight (a
  /// weight standing for several copies has one view per copy). Empty: each weight is the
  /// next parameter, same layout.
  virtual std::vector<ParamView> param_views() const { return {}; }
};

/// A deterministic 64-bit hash of a few integers (splitmix64 rounds).
std::uint64_t mix(std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0, std::uint64_t d = 0);
/// A uniform float in [-1, 1) from a hash.
float unit(std::uint64_t h);

// Layer functions of the model kinds that support functional mode.
std::shared_ptr<const LayerFunction> mlp_dense_function(std::int64_t in, std::int64_t out, bool first, std::int64_t input,
                                                        std::int64_t classes);
std::shared_ptr<const LayerFunction> mlp_classifier_function(std::int64_t in, std::int64_t classes, bool first, std::int64_t input);
std::shared_ptr<const LayerFunction> embedding_function(std::int64_t vocab, std::int64_t d_model, std::int64_t seq);
std::shared_ptr<const LayerFunction> block_function(std::int64_t d_model, std::int64_t d_ff, std::int64_t heads, std::int64_t d_kv,
                                                   std::int64_t seq, bool biases);
std::shared_ptr<const LayerFunction> lm_output_function(std::int64_t d_model, std::int64_t vocab, std::int64_t seq);

}  // namespace tpusim
