// Lowering of ops over named dimensions to the hardware ops a core runs: its shard of each op
// under a layout (Sharding; unsharded: the whole op on one core), forward and backward, the
// activations the ops keep for the backward and the gradients it holds at once. Each op's kind
// (models/ops/) prices it; the rules here are those of a layer's sequence of ops (what fuses,
// what the next op keeps). The mesh schedule adds the collectives a layout induces around these,
// and a layer's work on one core (data parallelism, pipeline stages) is its ops unsharded.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hardware/cost_model.hpp"
#include "models/model.hpp"
#include "models/named_ops.hpp"
#include "models/ops/op_kind.hpp"
#include "models/save_policies/save_policy.hpp"
#include "models/sharding.hpp"

namespace tpusim {

/// A core's shard of `op`'s forward.
Op forward_op(const NamedOp& op, const Sharding& s, double act);
/// Its backward pass for the gradient of its first operand: an einsum's da, a convolution's dx,
/// and the whole backward of ops with one (element-wise, normalizations, softmaxes, pools, the
/// gather's scatter-add).
Op input_gradient_op(const NamedOp& op, const Sharding& s, double act);
/// The backward pass for its second operand or weight, where an op has one: an einsum's db, a
/// convolution's dw.
std::optional<Op> operand_gradient_op(const NamedOp& op, const Sharding& s, double act);

/// Local elements an op's forward holds besides the kept activations: its input, unless kept (the
/// previous op's output), and its output, unless the next op keeps it. Element-wise ops fuse
/// into their producer and hold none of their own.
double forward_transient(const std::vector<NamedOp>& ops, std::size_t i, const Sharding& s);

/// Local elements of the gradients the backward of op `i` holds at once (its output gradient
/// and its operands'); `reads_model_input`: its first operand is the model's input.
double gradients_in_flight(const std::vector<NamedOp>& ops, std::size_t i, const Sharding& s,
                           bool reads_model_input);

/// Bytes an op keeps for the backward on a core: its tensors marked `keep` and what its kind
/// keeps besides (a lookup's ids).
double kept_bytes(const NamedOp& op, const Sharding& s, double act);

/// What a layer's ops keep and hold on a core, the one set of memory rules every lowering uses.
struct LayerMemory {
  double kept_bytes = 0;                ///< activations kept for the backward (and a gather's ids)
  double workspace_bytes = 0;           ///< the largest forward transient (forward_transient)
  double backward_workspace_bytes = 0;  ///< the largest op's gradients in flight (gradients_in_flight)
  double saved_output_bytes = 0;        ///< what the save policy keeps besides the input (SavePlan)
};

/// Re-materialization under a save policy (models/save_policies: "save_dots" keeps the matmuls'
/// outputs): every activation the backward reads is kept if an op the policy saves produced it,
/// or else recomputed from the layer's input and the outputs of such ops, which are then kept.
struct SavePlan {
  double kept_bytes = 0;         ///< the saved ops' outputs kept (the layer's input aside)
  std::vector<bool> recomputed;  ///< per op: recomputed before the backward
};
SavePlan save_plan(const std::vector<NamedOp>& ops, const Sharding& s, double act, const SavePolicy& policy);
/// `model_input`: the first op reads the model's input, which needs no gradient. `policy`: the
/// save policy whose kept bytes it gives (saved_output_bytes).
LayerMemory layer_memory(const std::vector<NamedOp>& ops, const Sharding& s, double act, bool model_input,
                         const SavePolicy& policy);

/// Bytes of `tensors` on a core as stored (padded to the sharding's lanes).
double boundary_bytes(const std::vector<BoundaryTensor>& tensors, const Sharding& s);

/// A layer's ops on one core, unsharded, as LayerWork: forward and backward hardware ops, the
/// activations kept for the backward (the tensors marked `keep`), the gradients held at once,
/// its batch normalizations' channels. `model_input`: the first op reads the model's input,
/// which needs no gradient. What it reads from and hands to other layers is the model's
/// (`boundary`). Activations pad to `lanes` (Sharding::lanes; 0: not padded), the boundary's too;
/// weights are `weight_bytes` per element.
LayerWork lower_work(const std::vector<NamedOp>& ops, double act, bool model_input,
                     const LayerBoundary& boundary, int lanes = 0, double weight_bytes = kFp32Bytes);

/// Sets `layer.lower` to its named ops lowered on one core (lower_work), and its boundary and
/// `model_input`: the named-op program is the one description of a layer, which the mesh
/// lowering shards.
void derive_work(Layer& layer, double act, bool model_input, Boundary boundary);

}  // namespace tpusim
