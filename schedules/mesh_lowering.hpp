// Lowering of a layer's named ops under a mesh layout: each core's shard of every op priced by
// the cost model, and the collectives the layout induces (partial sums, input and weight
// gradients, normalization statistics, halos of split images, all-gathers of a split sequence
// read whole), as the SPMD program a core runs (events). The mesh schedule plays the events
// on the task graph.
#pragma once

#include <map>
#include <set>

#include "hardware/cost_model.hpp"
#include "models/model.hpp"
#include "models/named_ops.hpp"
#include "schedules/mesh_functional.hpp"

namespace tpusim::mesh {

/// The layout's view of one op: local sizes, split mesh dimensions.
struct Sharding {
  const std::map<std::string, std::string>& layout;
  const std::map<std::string, int>& sizes;  // mesh dimension -> size

  int split(const std::string& dim) const {
    auto it = layout.find(dim);
    return it == layout.end() ? 1 : sizes.at(it->second);
  }
  /// A core's extent of a dimension. An image split unevenly is padded (the last cores' rows
  /// are partly padding), as spatial partitioning does; other dimensions divide evenly.
  std::int64_t local(const Dim& d) const {
    const int n = split(d.name);
    return is_spatial(d.name) ? (d.size + n - 1) / n : d.size / n;
  }
  static bool is_spatial(const std::string& dim) { return dim == "height" || dim == "width"; }
  double local_elements(const NamedTensor& t) const {
    double n = t.copies;
    for (const auto& d : t.dims) n *= double(local(d));
    return n;
  }
  /// Bytes of a normalization's statistics (two fp32 values per normalized row) when its reduced
  /// dimension is split, else 0.
  double statistics_bytes(const NamedOp& op) const;
  /// Mesh dimensions splitting the dimensions of `from` that `to` lacks (sorted, unique).
  std::vector<std::string> split_missing(const std::vector<const NamedTensor*>& from,
                                         const NamedTensor& to) const;
};

/// x . y -> z as a (batched) matmul of local sizes: batch dims in all three, m in x and z, k in
/// x and y, n in y and z.
Op local_matmul(const std::string& name, const Sharding& s, const NamedTensor& x, const NamedTensor& y,
                const NamedTensor& z, double act);

/// The name of the collective task an event becomes (the per-op table refers to it).
std::string collective_task_name(const std::string& event, const std::vector<std::string>& mesh_dims,
                                 const char* op = "all-reduce");

/// Elements of a core's piece when `elements` are split into `count` equal pieces (padded).
double piece_elements(double elements, double count);

/// One step of a layer's SPMD program: compute, or a collective (blocking the next compute, or
/// running behind it as weight-gradient reductions do).
struct Event {
  enum Kind {
    Compute,
    BlockingAllReduce,
    GradientAllReduce,
    Halo,
    BlockingAllGather,
    BlockingReduceScatter
  } kind;
  std::string name;
  double seconds = 0, model_flops = 0, hardware_flops = 0;
  std::vector<std::string> mesh_dims;  // collectives; Halo: the mesh dimension of the neighbours
  double bytes = 0;                    // collectives: payload per core; Halo: per neighbour
  std::vector<MeshAction> actions;     // functional mode: the math this event performs
};

struct LayerProgram {
  std::vector<Event> forward, backward;
  double kept_bytes = 0, weight_elements = 0, total_weight_elements = 0;
  double backward_workspace_bytes = 0;  ///< the largest op's gradients in flight (LayerWork)
  /// Elements of its weight shards a core updates: all of them, or with weight-update sharding
  /// its piece of each weight whose gradient is reduce-scattered.
  double update_elements = 0;
  std::set<std::string> weight_mesh_dims;  ///< mesh dimensions splitting any of its weights
  std::vector<NamedTensor> weights;        ///< its weights over named dimensions
  Json ops = Json::array();                // per-op table
};

/// `model_input`: the layer's first op reads the model's input, which needs no gradient.
/// `sharded`: weight gradients are reduce-scattered (weight-update sharding) instead of all-reduced.
LayerProgram lower_layer(const std::vector<NamedOp>& ops, const Sharding& s, const CostModel& cost,
                         double act, const std::string& layer, bool model_input, bool sharded);

/// "[batch, seq, d_model]"
std::string dims_text(const NamedTensor& t);

}  // namespace tpusim::mesh
