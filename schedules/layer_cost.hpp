// What a layer costs on one core (time, FLOPs, what its forward keeps) and the
// re-materialization policies' one memory rule: the summary every step builder, the pipelines'
// memory walk and tensor-parallel stages read. No task graph here, so the functional runtime and
// the tensor-parallel lowering can use it without the step builder.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "hardware/json_fields.hpp"
#include "models/save_policies/save_policy.hpp"
#include "sim/task_graph.hpp"

namespace tpusim {

/// What a forward keeps for its backward: every activation, or (re-materialization) only the
/// input of the range, the rest being recomputed before the backward, or (a save policy,
/// models/save_policies: "save_dots") the input and the outputs of the ops the policy saves, the
/// other ops being recomputed.
enum class Keep { All, Input, Saved };

/// A schedule's "remat" key: false (keep everything), true (keep each layer's input, recompute
/// its forward before its backward) or a save policy's name ("save_dots": keep the matmuls'
/// outputs too, recompute the other ops), which `saves` is then set to; absent: `fallback`. A bad
/// value is a problem at the key's path.
Keep read_remat(Fields& f, Keep fallback, const SavePolicy*& saves);
/// The key's value for a policy (false, true or the save policy's name), as resolved() reports it.
Json remat_json(Keep keep, const SavePolicy& saves);

/// What a step's weight-gradient reductions and its gathers of fully sharded weights carry per
/// element on the wire: schedule keys "gradient_dtype" (bf16 halves the reductions' bytes; the
/// gradients are kept and summed in fp32) and "gathered_weight_dtype" (fully sharded weights
/// only: bf16 gathers the copy the matmuls read, converted on each core's piece before the gather
/// and held whole while the layer runs; fp32 gathers the master copy, each core's own piece in
/// place). Both "fp32" or "bf16", fp32 by default; never wider than the weights themselves
/// (precision.weights): bf16 weights reduce and gather bf16.
struct WireDtypes {
  double gradient_bytes = 4;
  double gathered_weight_bytes = 4;
  /// Bytes of a weight (and gradient) element as held (Model::weight_bytes).
  double weight_bytes = 4;
  /// Whether a gather brings a converted copy, held whole (bf16), rather than the other cores'
  /// pieces of the master copy (fp32).
  bool gathers_copy() const { return gathered_weight_bytes < weight_bytes; }
  /// What the wire carries of `bytes` of weight gradients, and of `bytes` of gathered weights.
  double gradients_on_wire(double bytes) const { return bytes * gradient_bytes / weight_bytes; }
  double gathered_on_wire(double bytes) const { return bytes * gathered_weight_bytes / weight_bytes; }
};
/// Reads both keys for weights of `weight_bytes` per element; "gathered_weight_dtype" without
/// `fully_sharded`, or either key wider than the weights, is a problem at its path.
WireDtypes read_wire_dtypes(Fields& f, bool fully_sharded, double weight_bytes);
/// The keys as resolved() reports them ("gathered_weight_dtype" only when fully sharded).
void add_wire_dtypes(Json& resolved, const WireDtypes& d, bool fully_sharded);
/// "gradient_bucket_bytes": up to how many bytes of weight gradients are combined into one
/// reduction (XLA's all-reduce combiner threshold; by default the hardware's
/// core.allreduce_combine_threshold_bytes). Not with `fully_sharded`, whose gradients are
/// reduce-scattered per layer: a problem at its path.
double read_gradient_bucket_bytes(Fields& f, double hardware_bytes, bool fully_sharded);
/// "accumulation_steps" A (default 1): each replica's batch run as A micro-batches, their
/// gradients summed before the one reduction. A must divide `examples_per_replica`, and is 1 with
/// `fully_sharded` weights or cross-replica batch norm (`batch_norm_group` > 1): problems at its
/// path. Read only once the rest is valid (no problem yet).
int read_accumulation_steps(Fields& f, std::int64_t examples_per_replica, bool fully_sharded,
                            int batch_norm_group);

/// The one memory rule of the policies, for a layer (or range) that keeps `stash` bytes for its
/// backward, reads `input` and outputs `dots` from matmuls against weights: what its forward
/// keeps, and what the recompute before its backward adds (the rest of the stash).
inline double remat_kept_bytes(Keep keep, double stash, double input, double dots) {
  return keep == Keep::All ? stash : keep == Keep::Input ? input : input + dots;
}
inline double remat_recomputed_bytes(Keep keep, double stash, double dots) {
  return keep == Keep::All ? 0.0 : keep == Keep::Input ? stash : std::max(stash - dots, 0.0);
}
/// While a re-materialized layer's forward runs, what it computes for the backward beyond what it
/// keeps (`kept`) lives until the forward ends, then is dropped: at most the rest of its stash
/// (an op's output is freed after its last reader in the forward, so this bounds it from above).
inline double remat_forward_bytes(Keep keep, double stash, double kept) {
  return keep == Keep::All ? 0.0 : std::max(stash - kept, 0.0);
}

/// A layer's cost for one batch size on one core.
struct LayerCost {
  double forward_s = 0, backward_s = 0;
  /// The parts of forward_s and backward_s HBM's bandwidth sets (OpCost::hbm_bound_s).
  double forward_hbm_s = 0, backward_hbm_s = 0;
  double forward_flops = 0, backward_flops = 0;                    ///< model FLOPs
  double forward_hardware_flops = 0, backward_hardware_flops = 0;  ///< padded MXU FLOPs
  double stash_bytes = 0, input_bytes = 0, output_bytes = 0;
  /// One layer: the most its forward holds besides its kept activations (LayerWork). Layers
  /// [first, last): what a forward keeping everything holds beyond all of them at its peak:
  /// max over l of (layer l's transient - what the layers after l keep), at least 0.
  double workspace_bytes = 0;
  /// One layer: the largest op's gradients in flight (LayerWork). Layers [first, last): what
  /// their backward, which runs last to first freeing each layer's kept activations as it
  /// goes, holds at its peak beyond the activations kept at its start:
  /// max over l of (layer l's transient - what the layers after l kept), at least 0.
  double backward_workspace_bytes = 0;
  /// Split over a group of cores (tensor parallelism): a core's share of the weights.
  double weight_fraction = 1;
  /// A save policy ("save_dots"): the outputs it keeps, and the recompute of the other ops.
  double saved_output_bytes = 0;
  double partial_forward_s = 0, partial_forward_hardware_flops = 0, partial_forward_hbm_s = 0;

  /// What a forward keeping `keep` holds for the backward.
  double kept_bytes(Keep keep) const {
    return remat_kept_bytes(keep, stash_bytes, input_bytes, saved_output_bytes);
  }
  /// What the recompute before the backward adds to it (the rest of the stash).
  double recomputed_bytes(Keep keep) const {
    return remat_recomputed_bytes(keep, stash_bytes, saved_output_bytes);
  }
  /// The recompute's time: none, the whole forward, or the part a save policy recomputes.
  double recompute_s(Keep keep) const {
    return keep == Keep::All ? 0.0 : keep == Keep::Input ? forward_s : partial_forward_s;
  }
  double recompute_hbm_s(Keep keep) const {
    return keep == Keep::All ? 0.0 : keep == Keep::Input ? forward_hbm_s : partial_forward_hbm_s;
  }
  double recompute_hardware_flops(Keep keep) const {
    return keep == Keep::All     ? 0.0
           : keep == Keep::Input ? forward_hardware_flops
                                 : partial_forward_hardware_flops;
  }
};

/// Layers [first, last).
struct LayerRange {
  int first = 0;
  int last = 0;
  int size() const { return last - first; }
};

/// Report labels of a task, and which examples it processes (functional mode).
struct Labels {
  int stage = -1;
  int micro_batch = -1;
  std::int64_t first_example = 0;  ///< the first of the task's examples in the global batch
  int chunk = -1;                  ///< interleaved pipelines: the model chunk on its stage (0 .. V-1)
};

}  // namespace tpusim
