// XLA's all-reduce combiner as every schedule applies it (mesh::gradient_chunks, for the one step
// tail): the weight-gradient reductions of a step, taken in the order the backward produces them,
// combined into buffers of at most core.allreduce_combine_threshold_bytes.
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
