// XLA's all-reduce combiner as every schedule applies it: the weight-gradient reductions of a
// step, taken in the order the backward produces them, combined into buffers of at most
// core.allreduce_combine_threshold_bytes (data parallelism's gradient buckets, a mesh's combined
// reductions, a pipeline stage's reductions across its replicas).
#pragma once

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "schedules/layer_cost.hpp"

namespace tpusim {

/// Spans [first, last) of `bytes` (in the order given): each reduction combined with those after
/// it while the combined buffer stays within `threshold_bytes`; one larger than the threshold
/// alone.
std::vector<std::pair<std::size_t, std::size_t>> combine_in_order(const std::vector<double>& bytes,
                                                                  double threshold_bytes);

/// The layers of `range` in backward order (last first), combined by their gradient bytes
/// (`bytes_of(layer)`): the buckets, the last layers' first.
std::vector<LayerRange> gradient_buckets(LayerRange range, const std::function<double(int)>& bytes_of,
                                         double threshold_bytes);

}  // namespace tpusim
