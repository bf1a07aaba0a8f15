// Splitting a sequence of layers into K contiguous stages whose largest estimated cost is as
// small as possible (the pipeline's bottleneck), every stage getting at least one layer.
#pragma once

#include <vector>

namespace tpusim {

/// Layers per stage (K entries summing to costs.size()), minimizing the largest stage sum.
/// Requires 1 <= stages <= costs.size() and non-negative costs.
std::vector<int> balanced_partition(const std::vector<double>& costs, int stages);

/// Largest stage sum over the mean stage sum, minus one (0 = perfectly balanced).
double partition_imbalance(const std::vector<double>& costs, const std::vector<int>& sizes);

}  // namespace tpusim
