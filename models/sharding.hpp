// A layout's view of the ops of one core: which named dimensions are split over which mesh
// dimensions, hence the local size of every tensor. Sharding::none() is the whole op on one core
// (data parallelism, a pipeline stage).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "models/named_ops.hpp"

namespace tpusim {

/// Bytes of an fp32 element: the weights', gradients' and optimizer slots' default dtype (fp32
/// masters, as the frameworks train: shared/HARDWARE.md, training memory conventions; a study's
/// precision.weights and precision.optimizer may make them bf16) and the host math's.
inline constexpr double kFp32Bytes = 4.0;

/// The layout's view of one op: local sizes, split mesh dimensions.
struct Sharding {
  /// No dimension split: every op whole on one core.
  static const Sharding& none();
  /// The same, with activations padded to `lanes` (Sharding::lanes) and weights of
  /// `weight_bytes` per element.
  static Sharding whole(int lanes, double weight_bytes);

  const std::map<std::string, std::string>& layout;
  const std::map<std::string, int>& sizes;  // mesh dimension -> size
  /// Lanes of the tiles an activation is stored in (0: its logical size). A TPU array's minor
  /// dimension fills whole rows of 128 lanes; XLA makes an activation's feature (last) dimension
  /// or its batch dimension the minor one, whichever pads less. Weights are counted unpadded.
  int lanes = 0;
  /// Bytes of a weight element as stored and read (and of its gradient): Model::weight_bytes.
  double weight_bytes = kFp32Bytes;
  /// A mesh dimension (in `sizes`, splitting no tensor dimension) over which the layer is
  /// replicated on other examples (a pipeline stage's replicas): every weight gradient is reduced
  /// over it too. Empty: none.
  std::string replica_dim = {};
  /// A mesh dimension (in `sizes`, splitting no tensor dimension) over which the whole layout is
  /// replicated on other examples with its weights, their update pieces and optimizer slots
  /// whole along it (a mesh's data_parallel_dim: MaxText's data axis beside its fsdp axis): every
  /// weight gradient is reduced over it too, by an all-reduce of what a reduce-scatter over the
  /// other dimensions leaves. Empty: none.
  std::string data_dim = {};

  int split(const std::string& dim) const {
    auto it = layout.find(dim);
    return it == layout.end() ? 1 : sizes.at(it->second);
  }
  /// A core's extent of a dimension. An image split unevenly is padded (the last cores' rows
  /// are partly padding), as spatial partitioning does, and so is a vocabulary (frameworks pad
  /// the embedding and softmax to a multiple of the cores splitting them); other dimensions
  /// divide evenly.
  std::int64_t local(const Dim& d) const {
    const int n = split(d.name);
    return may_pad(d.name) ? (d.size + n - 1) / n : d.size / n;
  }
  static bool is_spatial(const std::string& dim) { return dim == "height" || dim == "width"; }
  /// Dimensions a layout may split unevenly, padding the last shard. An expert's capacity split
  /// with the tokens is each core's own slots rounded up (GShard sizes the capacity per group of
  /// tokens, so every core holds ceil(capacity / cores) slots).
  static bool may_pad(const std::string& dim) {
    return is_spatial(dim) || dim == "vocab" || dim == "capacity";
  }
  /// Elements of a core's shard of `t` as stored: with `lanes`, an activation's minor dimension
  /// padded to whole lanes.
  double local_elements(const NamedTensor& t) const { return shard_elements(t) * lane_padding(t); }
  /// Elements of a core's shard of `t` in HBM: none for a tensor that lives on chip.
  double stored_elements(const NamedTensor& t) const { return t.on_chip ? 0.0 : local_elements(t); }
  /// Elements of a core's shard of `t`, unpadded.
  double shard_elements(const NamedTensor& t) const {
    double n = t.copies;
    for (const auto& d : t.dims) n *= double(local(d));
    return n;
  }
  /// The factor by which an activation's storage exceeds its elements (1 without `lanes`).
  double lane_padding(const NamedTensor& t) const;
  /// Bytes of a normalization's statistics (two fp32 values per normalized row) when its reduced
  /// dimension is split, else 0.
  double statistics_bytes(const NamedOp& op) const;
  /// Mesh dimensions splitting the dimensions of `from` that `to` lacks (sorted, unique).
  std::vector<std::string> split_missing(const std::vector<const NamedTensor*>& from,
                                         const NamedTensor& to) const;
};

}  // namespace tpusim
