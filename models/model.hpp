// Models as sequences of layers (the unit GPipe partitions), each lowered to ops of the
// hardware op vocabulary for a given per-core batch. Builders are registered by the JSON
// `kind` string, so a new model is one file plus one registry line.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hardware/cost_model.hpp"
#include "hardware/json_fields.hpp"
#include "models/functional.hpp"
#include "models/named_ops.hpp"
#include "models/sharding.hpp"

namespace tpusim {

/// The largest model accepted, in parameters (1e15: 4 PB of fp32 weights, far beyond any pod,
/// and far inside the 64-bit arithmetic sizes are counted in).
inline constexpr double kMaxModelParams = 1e15;

/// What one layer does for a batch of examples on one core.
struct LayerWork {
  std::vector<Op> forward;     ///< forward pass
  std::vector<Op> backward;    ///< input gradients and weight gradients
  double input_bytes = 0;      ///< activations the layer reads from earlier layers
  double output_bytes = 0;     ///< activations handed on to later layers (crosses a stage boundary)
  double stash_bytes = 0;      ///< activations kept from forward for backward (no re-materialization)
  double workspace_bytes = 0;  ///< transient buffers alive only while the layer computes
  /// Gradients in flight during its backward: at most one op's output gradient and input
  /// gradients at a time (the largest op's), besides the activations it kept.
  double backward_workspace_bytes = 0;
  /// Channels of each batch normalization, in order: each needs its per-channel statistics (mean
  /// and variance) in forward and its gradient statistics in backward, which cross-replica batch
  /// norm all-reduces over a group of replicas.
  std::vector<std::int64_t> batch_norm_channels;
  /// With re-materialization a layer keeps only its input for backward and recomputes the rest.
  double stash_remat_bytes() const { return input_bytes; }
  /// Re-materialization under the "save_dots" save policy (models/op_lowering.hpp save_plan):
  /// what it keeps besides the input, and the forward ops it recomputes.
  double saved_output_bytes = 0;
  std::vector<Op> partial_forward;
};

/// One layer: its weight tensors and how it lowers for a batch.
struct Layer {
  std::string name;
  std::vector<std::vector<std::int64_t>> weights;  ///< shapes of the parameter tensors
  /// The layer, described once: its forward as ops over named dimensions for `batch` examples
  /// (the backward, what it keeps and the collectives a mesh layout induces follow from them).
  std::function<std::vector<NamedOp>(std::int64_t batch)> named_ops;
  /// Its named ops lowered on one core, activations padded to `lanes` (Sharding::lanes; 0: not
  /// padded), weights of `weight_bytes` per element (derive_work in models/op_lowering.hpp).
  std::function<LayerWork(std::int64_t batch, int lanes, double weight_bytes)> lower;
  /// The lanes its activations pad to on the study's hardware (Model::pad_activations_to).
  int lanes = 0;
  /// Bytes of each of its weight elements as stored (Model::weight_bytes).
  double weight_bytes = kFp32Bytes;
  /// Its work on one core for `batch` examples.
  LayerWork work(std::int64_t batch) const { return lower(batch, lanes, weight_bytes); }
  /// What it reads from earlier layers and hands on, for a batch (a pipeline stage's stash and
  /// transfers), and whether its first op reads the model's input (which needs no gradient).
  Boundary boundary;
  bool model_input = false;
  /// The host math for functional mode (null when the layer kind has none).
  std::shared_ptr<const LayerFunction> function;
  /// The index of an earlier layer of the model that is the same computation (made by the same
  /// builder call: equal named ops, weights and work for every batch; only the name differs), so
  /// its costs serve this one; -1: none.
  int same_as = -1;
  /// The index of the earlier layer owning the weight it reads as an input (an embedding table
  /// tied to the output layer: NamedTensor::tied); -1: none. A pipeline stage holding this layer
  /// but not its owner keeps a copy of that weight (StepBuilder::TiedCopy).
  int tied_to = -1;

  std::int64_t params() const;
};

/// A model: an ordered sequence of layers.
struct Model {
  std::string kind;
  std::string name;             ///< human-readable, e.g. "transformer L=24 d=1024"
  double activation_bytes = 2;  ///< bytes per activation element (bf16 = 2)
  /// Bytes per element of the weights as stored, read by the matmuls and updated, and of their
  /// gradients (a study's precision.weights; fp32 masters by default), and of the optimizer's
  /// slots (precision.optimizer): set by store_state_in.
  double weight_bytes = kFp32Bytes;
  double slot_bytes = kFp32Bytes;
  std::vector<Layer> layers;
  /// Runs attention as one fused kernel (flash attention): a kernel the hardware may not have had.
  bool flash_attention = false;
  /// Has mixture-of-experts layers (a transformer's "moe"): a mesh layout may split "experts".
  bool mixture_of_experts = false;
  /// A mixture of experts: the same model with each expert's capacity its routed tokens
  /// (capacity factor 1), whose FLOPs are the useful ones (the experts' slots computed whether
  /// filled or not count in the model's own); null otherwise.
  std::shared_ptr<const Model> routed;
  /// Tokens an example is (a sequence model's positions; 0: a model without tokens): what a
  /// study's target in tokens counts.
  std::int64_t tokens_per_example = 0;

  /// Appends `layer`. `call` names the builder call that made it (the factory and every argument
  /// but the name; empty: not worth comparing): a layer made by the same call as an earlier one
  /// is marked the same computation (Layer::same_as).
  void add(Layer layer, const std::string& call = "");

  std::int64_t params() const;
  /// Lowers every layer with activations padded to `lanes` (the hardware's tiles; 0: not padded).
  void pad_activations_to(int lanes);
  /// Stores the weights (and gradients) in `weight_bytes` per element, the optimizer's slots in
  /// `slot_bytes`.
  void store_state_in(double weight_bytes, double slot_bytes);
  /// The math of one training step over `batch` examples: every layer's forward and backward
  /// (input and weight gradients), unpadded, without recomputation. The one definition every
  /// schedule reports as model FLOPs (and MXU utilization divides by).
  double step_model_flops(std::int64_t batch) const;

 private:
  std::map<std::string, int> first_of_call_;  ///< builder call -> the first layer it made (add)
};

/// Builds a model from its JSON description; records problems at `path`.
using ModelBuilder = std::function<Model(Fields& fields, Problems& problems)>;

/// Every registered builder, by kind.
const std::map<std::string, ModelBuilder>& model_builders();
/// The workload family a model kind belongs to ("language models", "image classifiers", ...):
/// what `run --intervals` sizes the model's validated error on.
const std::string& model_family(const std::string& kind);

/// Builds the model `json` describes (its "kind" picks the builder). Throws ConfigError.
Model build_model(const Json& json, const std::string& path, Problems& problems);

// Registered builders (one per file).
Model build_mlp(Fields& fields, Problems& problems);
Model build_transformer(Fields& fields, Problems& problems);
Model build_bert(Fields& fields, Problems& problems);
Model build_mesh_lm(Fields& fields, Problems& problems);
Model build_resnet50(Fields& fields, Problems& problems);
Model build_amoebanet_d(Fields& fields, Problems& problems);
Model build_ssd_resnet34(Fields& fields, Problems& problems);
Model build_sequential(Fields& fields, Problems& problems);
Model build_unet(Fields& fields, Problems& problems);

/// Reads the optional "activation_dtype" ("bf16" default, or "fp32") as bytes per element.
double read_activation_bytes(Fields& fields);

}  // namespace tpusim
