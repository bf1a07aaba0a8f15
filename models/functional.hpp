// The host math of a layer for functional mode: its parameters' initial values, its forward on
// a batch of examples and its backward, in fp32 with the kernels of models/kernels (a layer's is
// its named ops interpreted: models/named_op_function.hpp). The first
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
  std::int64_t first = 0;   ///< index of the first example in the global batch
  std::int64_t count = 0;   ///< examples in this call
  std::int64_t global = 0;  ///< examples in the global batch (the loss averages over them)
  int step = 0;             ///< training step (fresh data every step)
  std::uint64_t seed = 0;
};

/// What a forward keeps for its backward.
struct Saved {
  std::vector<Tensor> tensors;
  std::vector<std::int32_t> ids;      ///< token ids looked up
  std::vector<std::int32_t> targets;  ///< the classes the loss scored against
};

class LayerFunction {
 public:
  virtual ~LayerFunction() = default;
  /// Initial parameters, deterministic in `seed` (a named-op layer's: its ops' weights, in op
  /// order, one tensor per copy).
  virtual std::vector<Tensor> init(std::uint64_t seed) const = 0;
  /// Forward: `in` is the previous layer's output, handed over (the first layer ignores it and
  /// reads the data). Adds this call's share of the loss to `loss` if it is the loss layer.
  virtual Tensor forward(const std::vector<Tensor>& params, Tensor in, const Batch& batch, Saved& saved,
                         double& loss) const = 0;
  /// Backward: returns the gradient of the input (empty for the first layer) and ADDS the
  /// parameter gradients to `grads`. The loss layer ignores `dout`.
  virtual Tensor backward(const std::vector<Tensor>& params, const Tensor& dout, const Batch& batch,
                          const Saved& saved, std::vector<Tensor>& grads) const = 0;
  /// The data a first layer reads ([examples x features]) and the targets a loss layer scores
  /// against (one class per example): for executors that run the layer's math themselves on
  /// shards. Empty when the layer does not read data.
  virtual Tensor input(const Batch&) const { return {}; }
  virtual std::vector<std::int32_t> targets(const Batch&) const { return {}; }
  /// Token ids a first layer looks up ([examples x positions]); empty when it reads features.
  virtual std::vector<std::int32_t> tokens(const Batch&) const { return {}; }
};

/// A model's synthetic data for functional mode: a function of seed, step and example index
/// only, so every partition of a batch sees the same examples.
class DataSource {
 public:
  virtual ~DataSource() = default;
  /// Features of a model whose first layer reads them ([examples x features]).
  virtual Tensor features(const Batch&) const { return {}; }
  /// Token ids of a model whose first layer looks them up ([examples x positions]).
  virtual std::vector<std::int32_t> tokens(const Batch&) const { return {}; }
  /// The class each row of the loss scores against (per example, or per position).
  virtual std::vector<std::int32_t> targets(const Batch&) const = 0;
};

/// A deterministic 64-bit hash of a few integers (splitmix64 rounds).
std::uint64_t mix(std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0, std::uint64_t d = 0);
/// A uniform float in [-1, 1) from a hash.
float unit(std::uint64_t h);

}  // namespace tpusim
