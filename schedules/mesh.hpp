// Mesh-TensorFlow layouts: the cores form a named multi-dimensional mesh ("batch": 16,
// "model": 32); a layout maps tensor dimensions (batch, seq, d_model, d_ff, heads, d_kv, vocab)
// to mesh dimensions. Every core runs the same program on its shard (SPMD): each op's local
// shape divides every split dimension by its mesh dimension's size; an einsum whose contracted
// dimension is split leaves partial sums that are all-reduced over that mesh dimension (in
// forward, and for the input gradient in backward); a weight's gradient is all-reduced over the
// mesh dimensions that split dimensions the weight lacks (typically batch); a normalization over
// a split dimension all-reduces its statistics. Collectives run on every sub-group of the mesh
// dimensions at once (cores that share all other mesh coordinates), on the torus rings the
// placement gives them. Weights, optimizer slots and activations are sharded in HBM.
#pragma once

#include <algorithm>
#include <optional>

#include "schedules/mesh_lowering.hpp"
#include "schedules/offload.hpp"
#include "schedules/step_builder.hpp"

namespace tpusim {

class MeshSchedule : public Schedule {
 public:
  /// Reads "mesh" (object name -> size, or [[name, size], ...] in placement order), "layout"
  /// (tensor dimension -> mesh dimension) and "placement": "auto", the mesh dimensions from
  /// outermost to innermost over the core numbering, or an object giving each mesh dimension
  /// the torus axes it spans, fastest first ("core": the cores of a chip, "x", "y", or
  /// ["x", n]: a part of n of an axis; an axis's parts go fastest first to the mesh dimensions
  /// in mesh order). Validates every layer's ops against the layout.
  /// With `cores` > 0 the mesh spans the first `cores` of the slice, the rest idle (a fully
  /// sharded data-parallel step over fewer replicas than cores); otherwise every core.
  MeshSchedule(Fields& fields, const Study& study, Problems& problems, int cores = 0);
  /// The cores the mesh spans: the first cores() of the slice.
  int cores() const { return cores_; }
  BuiltStep build(const Study& study, FunctionalRuntime* functional = nullptr) const override;
  Json resolved() const override;
  const SavePolicy& save_policy() const override { return *saves_; }
  /// A replica's micro-batch (its whole batch without accumulation).
  std::int64_t layer_batch(const Study& study) const override {
    return study.batch / examples_split() / accumulation_steps_;
  }
  /// "data_parallel_dim": a mesh dimension the layout maps no tensor dimension to, along which the
  /// whole layout is replicated on other examples (MaxText's data axis beside its fsdp axis: the
  /// batch split over both, the weights sharded over the fsdp one only); its cores hold the same
  /// weights, update pieces and optimizer slots, and every weight gradient is all-reduced over it
  /// too. "" when not given.
  const std::string& data_parallel_dim() const { return data_dim_; }
  /// The ways the batch is split: over the batch's mesh dimension and the data dimension.
  int examples_split() const { return split("batch") * data_cores_; }
  /// Every core reads its batch shard (the cores along the other mesh dimensions read the same
  /// one), the part of each image its spatial split gives it.
  std::vector<CoreInput> input(const Study& study) const override;
  int batch_norm_group() const override { return batch_norm_group_; }
  /// From the SPMD program alone (schedules/mesh_bound.cpp): one core's compute (a re-materialized
  /// layer's recompute too) and its blocking collectives at their floors.
  StepBound bound(const Study& study) const override;
  /// weight_update "fully_sharded": each core holds pieces of its weight shards.
  bool fully_sharded() const { return weight_update_ == "fully_sharded"; }
  /// "weight_update": "replicated", "sharded" or "fully_sharded".
  const std::string& weight_update() const { return weight_update_; }
  /// "gradient_dtype" and "gathered_weight_dtype": what the weight-gradient reductions and the
  /// fully sharded gathers carry per element.
  const WireDtypes& wire() const { return wire_; }
  /// "weight_gathers" (fully sharded): "prefetched" starts a layer's gathers once the layer two
  /// back has run (at most two layers gathered, the gathers one after another) and runs its
  /// reduce-scatters behind the rest of the backward (a layer's backward waits for the one two
  /// layers back: at most two layers' gradients in flight), as FSDP and data parallelism's fully
  /// sharded step do; "in_program_order" runs both where the program has them, every core
  /// waiting, as XLA runs synchronous collectives. Default: "prefetched" when the hardware's
  /// software stack overlaps collectives with compute (core.gradient_collectives_overlap_backward).
  bool prefetches_gathers() const { return prefetch_gathers_; }
  /// Up to how many bytes of weight gradients one combined reduction carries ("gradient_bucket_bytes").
  double gradient_bucket_bytes() const { return bucket_bytes_; }
  /// Micro-batches per replica whose gradients are summed ("accumulation_steps"); the layers'
  /// programs are one micro-batch's.
  int accumulation_steps() const { return accumulation_steps_; }
  Keep remat() const { return remat_; }
  /// "offload": what a layer's forward keeps that goes to host memory (schedules/offload.hpp).
  const Offload& offload() const { return offload_; }
  /// What a core offloads of layer program `p` (0 without offload).
  double offloaded(const mesh::LayerProgram& p) const {
    return offload_.bytes(p, p.input_bytes / input_split_cores());
  }
  /// What a layer's forward keeps on a core under the schedule's re-materialization policy
  /// (its input split by layer_input_split, when given).
  double kept_in_forward(const mesh::LayerProgram& p) const {
    return remat_kept_bytes(remat_, p.kept_bytes, p.input_bytes / input_split_cores(), p.saved_output_bytes);
  }
  /// "layer_input_split": the mesh dimension over which each core keeps only its piece of a
  /// re-materialized layer's input between its forward and its backward, all-gathered again
  /// before the recompute (MaxText shards the residual stream's embedding over its tensor axis;
  /// Megatron's sequence parallelism splits its sequence). "" when not given.
  const std::string& layer_input_split() const { return layer_input_split_; }
  /// The cores along layer_input_split (1 when not given).
  int input_split_cores() const;

  /// The mesh size a tensor dimension is split by (1 when the layout does not split it).
  int split(const std::string& dim) const;
  /// The mesh dimension a tensor dimension is split over ("" when the layout does not split it).
  std::string mesh_dim_of(const std::string& dim) const {
    const auto it = layout_.find(dim);
    return it == layout_.end() ? "" : it->second;
  }
  /// Whether a weight-gradient reduction over mesh dimensions `dims` sums over the data-parallel
  /// replicas (the batch's mesh dimension): it then continues across slices.
  bool over_replicas(const std::vector<std::string>& dims) const {
    const std::string batch = mesh_dim_of("batch");
    const auto has = [&](const std::string& d) {
      return std::find(dims.begin(), dims.end(), d) != dims.end();
    };
    return (!batch.empty() && has(batch)) || (!data_dim_.empty() && has(data_dim_));
  }
  /// The mesh coordinates of a core (in mesh order: placement order, innermost last, unless the
  /// placement is given per torus axis).
  std::vector<int> coords(int core) const;
  /// The core at mesh coordinates (the inverse of coords()).
  int core_at(const std::vector<int>& coords) const;
  /// Each layer's SPMD program (what every core runs; `build` plays them onto the task graph).
  std::vector<mesh::LayerProgram> programs(const Study& study) const;
  /// Every group of cores that differ only along `mesh_dims`: a partition of the mesh's cores.
  /// With `block` > 0, cores differing along `block_dim` (one of `mesh_dims`) share a group only
  /// within the same block of `block` consecutive coordinates.
  std::vector<std::vector<int>> groups(const std::vector<std::string>& mesh_dims,
                                       const std::string& block_dim = "", int block = 0) const;
  /// The groups a collective event runs on.
  std::vector<std::vector<int>> groups(const mesh::Event& ev) const {
    return groups(ev.mesh_dims, ev.block_dim, ev.block);
  }

 private:
  /// A torus axis (0: the cores of a chip, 1 + d: torus dimension d), or the part of one
  /// starting at `stride`.
  struct AxisPart {
    int axis = 0;
    int stride = 1, size = 1;
  };
  static std::optional<AxisPart> read_axis_part(const Json& e, const std::string& at,
                                                const std::vector<std::string>& names,
                                                const std::vector<int>& sizes,
                                                const std::vector<int>& next_stride,
                                                const std::string& expected, Problems& problems);
  /// "mesh": [[name, size], ...] or {name: size}; the sizes must multiply to the slice's cores.
  void read_mesh(const Json& mesh, const std::string& path, const Study& study, Problems& problems);
  /// A mesh dimension named "dcn" names data parallelism across the study's slices explicitly
  /// (MaxText's dcn_data_parallelism): its size must be the study's `slices`; it is outermost and
  /// implicit otherwise, so the per-slice mesh is the rest.
  void read_dcn_dimension(const std::string& path, const Study& study, Problems& problems);
  int dcn_ = 0;  ///< the "dcn" dimension's size as given (0: not named)
  /// "placement": "auto", the mesh dimensions outermost first, or torus axes per dimension.
  void read_placement(const Json& placement, const std::string& path, const Study& study, Problems& problems);
  /// "layout": tensor dimension -> mesh dimension (of `sizes`).
  void read_layout(const Json& layout, const std::string& path, const std::map<std::string, int>& sizes,
                   Problems& problems);
  void read_axes(const Json& placement, const std::string& path, const Study& study, Problems& problems);
  /// Per mesh dimension: the torus axes it spans, the chips a group covers and the longest ring hop.
  Json placement_details(const Study& study) const;

  std::vector<std::pair<std::string, int>> mesh_;  ///< placement order: the last varies fastest over cores
  std::vector<std::vector<AxisPart>> axes_;    ///< per mesh dimension, fastest first; empty: by core order
  std::vector<int> axis_sizes_;                ///< cores per chip, then chips along each dimension
  std::vector<std::string> axis_names_;        ///< "core", then the torus dimensions' names
  std::map<std::string, std::string> layout_;  ///< tensor dimension -> mesh dimension
  std::map<std::string, int> sizes_;           ///< mesh dimension -> size
  /// A mixture of experts' layout: "experts" on the batch's mesh dimension, or (not split) the
  /// expert slots split as the tokens are ("capacity"). False after adding a problem.
  bool read_experts_layout(const Study& study, const std::string& path, Problems& problems);
  /// "accumulation_steps" A: each replica's batch run as A micro-batches, one after another, their
  /// gradients summed before the step's one reduction (as data parallelism's).
  void read_accumulation(Fields& f, const Study& study, Problems& problems);
  int accumulation_steps_ = 1;
  int cores_ = 0;
  std::string weight_update_ = "replicated";
  WireDtypes wire_;
  bool prefetch_gathers_ = false;
  double bucket_bytes_ = 0;
  void read_weight_gathers(Fields& f, const Study& study, Problems& problems);
  /// "remat": what a layer's forward keeps; the rest is recomputed just before its backward.
  Keep remat_ = Keep::All;
  Offload offload_;
  const SavePolicy* saves_ = &save_dots_policy();  ///< the policy of remat_ Keep::Saved
  int batch_norm_group_ = 1;  ///< replicas along the batch's mesh dimension sharing batch-norm statistics
  std::string layer_input_split_;
  std::string data_dim_;  ///< data_parallel_dim
  int data_cores_ = 1;    ///< its size (1 without it)
  /// The mesh dimension `given` names, or end() with a problem at `path` listing them.
  std::vector<std::pair<std::string, int>>::const_iterator named_dimension(const Json& given,
                                                                           const std::string& path,
                                                                           Problems& problems) const;
  /// "data_parallel_dim": a mesh dimension the layout does not use.
  void read_data_parallel_dim(Fields& f, Problems& problems);
  /// The layout's view of a core's ops (the data dimension's too).
  Sharding sharding(const Study& study) const;
  /// "layer_input_split": a mesh dimension that does not split any layer's input, with
  /// re-materialization (without it a layer keeps every activation, not only its input).
  void read_layer_input_split(Fields& f, const Study& study, Problems& problems);
};

}  // namespace tpusim
