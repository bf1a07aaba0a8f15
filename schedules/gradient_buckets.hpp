// XLA's all-reduce combiner as every schedule applies it: the weight-gradient reductions of a
// step, one per weight tensor, taken in the order the backward produces them, combined into
// buffers of at most core.allreduce_combine_threshold_bytes (a mesh's combined reductions, and so
// data parallelism's gradient buckets; a pipeline stage's reductions across its replicas).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace tpusim {

/// Spans [first, last) of `bytes` (in the order given): each reduction combined with those after
/// it while the combined buffer stays within `threshold_bytes`; one larger than the threshold
/// alone.
std::vector<std::pair<std::size_t, std::size_t>> combine_in_order(const std::vector<double>& bytes,
                                                                  double threshold_bytes);

}  // namespace tpusim
