// Lowering of a layer's named ops under a mesh layout: each core's shard of every op priced by
// the cost model, and the collectives the layout induces (partial sums, input and weight
// gradients, normalization statistics, halos of split images, all-gathers of a split sequence
// read whole), as the SPMD program a core runs (events). The mesh schedule plays the events
// on the task graph.
#pragma once

#include <map>
#include <optional>
#include <set>

#include "hardware/cost_model.hpp"
#include "models/model.hpp"
#include "models/named_ops.hpp"
#include "models/op_lowering.hpp"
#include "schedules/mesh_functional.hpp"
#include "schedules/study.hpp"

namespace tpusim::mesh {

/// The name of the collective task an event becomes (the per-op table refers to it): "all-reduce
/// EVENT over DIMS" and so on, the op's name (sim::to_string) with hyphens.
std::string collective_task_name(const std::string& event, const std::vector<std::string>& mesh_dims,
                                 sim::CollectiveOp op = sim::CollectiveOp::AllReduce);

/// Elements of a core's piece when `elements` are split into `count` equal pieces (padded).
double piece_elements(double elements, double count);
/// The elements a core does not keep of `elements` reduce-scattered over `count` cores (all but
/// its padded piece): what weight-update sharding frees and leaves to the others to update.
double unkept_elements(double elements, double count);
/// The mesh dimensions weight-update sharding cuts a weight gradient reduced over `dims` into
/// pieces over: all but `data_dim` (Sharding::data_dim), whose cores hold the same pieces. Empty:
/// a reduction over the data dimension alone, an all-reduce.
std::vector<std::string> scatter_dims(const std::vector<std::string>& dims, const std::string& data_dim);

/// One step of a layer's SPMD program: compute, or a collective (blocking the next compute, or
/// running behind it as weight-gradient reductions do).
struct Event {
  enum Kind {
    Compute,
    BlockingAllReduce,
    GradientAllReduce,
    Halo,
    BlockingAllGather,
    BlockingReduceScatter,
    BlockingAllToAll
  } kind;
  std::string name;
  double seconds = 0, model_flops = 0, hardware_flops = 0;
  std::vector<std::string> mesh_dims;  // collectives; Halo: the mesh dimension of the neighbours
  double bytes = 0;                    // collectives: payload per core; Halo: per neighbour
  std::vector<MeshAction> actions;     // functional mode: the math this event performs
  /// Collectives: with `block` > 0, only among cores whose coordinates along mesh dimension
  /// `block_dim` (one of mesh_dims) fall in the same block of `block` consecutive ones
  /// (cross-replica batch norm over groups of replicas).
  std::string block_dim;
  int block = 0;
  /// Forward compute: the part of it a partial re-materialization recomputes (SavePlan: the ops
  /// whose outputs its save policy does not keep; "save_dots": those other than matmuls).
  /// Forward collectives: of an op the policy does not recompute (a kept matmul's partial sums),
  /// so not run again.
  double partial_seconds = 0, partial_hardware_flops = 0;
  bool kept_by_save_policy = false;
  /// A blocking collective's part running behind the compute after it (a reduction decomposed
  /// with its matmul: core.tensor_collectives_overlap_matmuls): no core waits for it, the next
  /// blocking collective does.
  bool behind = false;
  /// Compute: the part of `seconds` (and of `partial_seconds`) HBM's bandwidth sets, and the
  /// part its matmuls' grid steps add (OpCost::grid_added_s).
  double hbm_seconds = 0, partial_hbm_seconds = 0;
  double grid_seconds = 0, partial_grid_seconds = 0;
  /// And the MXU time its 8-bit products save against the bf16 peak (OpCost::precision_saved_s).
  double saved_seconds = 0, partial_saved_seconds = 0;
  /// A blocking collective's phase when not its kind's (a batch norm's statistics:
  /// "batch_norm_statistics", its gradient's "batch_norm_gradient_statistics", as every player
  /// names them).
  std::string phase;
};

/// What a blocking event runs: its collective and the phase it counts as in breakdowns. None for
/// compute, halos and weight-gradient reductions (how those run is the schedule's choice). The one
/// map from event kinds to collectives, for the players, the bound and tensor-parallel stages.
struct BlockingCollective {
  sim::CollectiveOp op;
  const char* phase;
};
std::optional<BlockingCollective> blocking_collective(Event::Kind kind);

struct LayerProgram {
  std::vector<Event> forward, backward;
  double kept_bytes = 0, weight_elements = 0, total_weight_elements = 0;
  /// Re-materialization: the layer's input (what `remat` true keeps) and the outputs its save
  /// policy keeps ("save_dots": its matmuls'; a partial policy keeps both), on a core.
  double input_bytes = 0, saved_output_bytes = 0;
  double workspace_bytes = 0;           ///< the largest forward transient (LayerWork)
  double backward_workspace_bytes = 0;  ///< the largest op's gradients in flight (LayerWork)
  /// Elements of its weight shards a core updates: all of them, or with weight-update sharding
  /// its piece of each weight whose gradient is reduce-scattered.
  double update_elements = 0;
  /// Elements of another layer's weight it reads (a tied embedding table: NamedTensor::tied), on
  /// a core.
  double tied_elements = 0;
  std::set<std::string> weight_mesh_dims;  ///< mesh dimensions splitting any of its weights
  std::vector<NamedTensor> weights;        ///< its weights over named dimensions
  Json ops = Json::array();                // per-op table
};

/// A core's share of a layer's update: the elements of its weight shards it updates (all of
/// them, or under weight-update sharding its pieces) over the layer's weight elements. Its
/// optimizer slots are that share of the layer's.
double update_fraction(const LayerProgram& p);

/// What a core holds of a layer all step: its weight shards (`fully_sharded`: only the pieces
/// it updates) and the optimizer slots of the weights it updates (`slot_elements` for the whole
/// of the model's `layer`: so many slots per weight it updates; Adam's are twice its weights), in
/// bytes, each in its dtype (Model::weight_bytes, slot_bytes).
struct ResidentShards {
  double weights = 0, optimizer = 0;
};
ResidentShards resident_shards(const LayerProgram& p, const Model& model, std::size_t layer,
                               double slot_elements, bool fully_sharded = false);

/// `model_input`: the layer's first op reads the model's input, which needs no gradient.
/// `sharded`: weight gradients are reduce-scattered (weight-update sharding) instead of all-reduced.
/// `batch_norm_group`: batch normalizations combine their statistics over groups of this many
/// consecutive replicas along the batch's mesh dimension too (cross-replica batch norm; 1: each
/// replica its own, summed over a split image only). `saves`: the partial re-materialization
/// (a schedule's "remat" policy name) whose recompute each forward event carries (its unsaved part).
LayerProgram lower_layer(const std::vector<NamedOp>& ops, const Sharding& s, const CostModel& cost,
                         double act, const std::string& layer, bool model_input, bool sharded,
                         int batch_norm_group, const SavePolicy& saves);

/// `p`, lowered for layer `from`, as the program of layer `to` (the same computation): its
/// events named after `to`; no per-op table.
LayerProgram renamed(const LayerProgram& p, const std::string& from, const std::string& to);

/// "[batch, seq, d_model]"
std::string dims_text(const NamedTensor& t);

/// Whether `layout` already splits some layer's input (its first op's first operand) over mesh
/// dimension `mesh_dim`: "layer L's input [dims] is split along D over \"M\"" for the first such
/// layer, "" when every layer's input is whole along it (layer_input_split may split it there).
/// Layers without named ops are passed over.
std::string input_split_over(const Study& study, const std::map<std::string, std::string>& layout,
                             const std::string& mesh_dim);

/// Adds a problem (at `path`, the layout's JSON path) unless every op of every layer of the
/// study's model has a legal layout: described over named dimensions, no tensor mapping two of
/// its dimensions to one mesh dimension, every split dimension but an image's or a vocabulary's
/// (padded) divisible by its mesh dimension's size.
/// The dimensions `layout` splits unevenly and so pads (a vocabulary not divisible by the cores
/// splitting it; images aside, whose padding is spatial partitioning's own): for each, its size
/// and the padded size, as result.json's schedule details report them. Empty when none.
Json padded_dimensions(const Study& study, const std::map<std::string, std::string>& layout,
                       const std::map<std::string, int>& sizes);

void check_layout(const Study& study, const std::map<std::string, std::string>& layout,
                  const std::map<std::string, int>& sizes, const std::string& path, const Json& layout_json,
                  Problems& problems);

/// A combined weight-gradient reduction: reductions over one set of mesh dimensions, each with
/// its layer, and their fp32 bytes.
struct GradientChunk {
  std::vector<std::string> mesh_dims;
  std::vector<std::pair<const Event*, int>> reductions;
  double bytes = 0;
};
/// XLA's all-reduce combiner over a step's weight-gradient reductions: per set of mesh
/// dimensions (in their order), in backward order (the last layer's first, a layer's in program
/// order), combined up to `threshold_bytes` (combine_in_order). The events stay `programs`'.
/// `layers`: only those (last < 0: every layer). `unit`: what the combiner takes whole (each
/// reduction, as XLA's; or a layer's reductions over one set of mesh dimensions together).
enum class CombineUnit { Tensor, Layer };
std::vector<GradientChunk> gradient_chunks(const std::vector<LayerProgram>& programs, double threshold_bytes,
                                           LayerRange layers = {0, -1},
                                           CombineUnit unit = CombineUnit::Tensor);

}  // namespace tpusim::mesh
