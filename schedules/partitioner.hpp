// Splitting a sequence of layers into K contiguous stages whose largest estimated cost is as
// small as possible (the pipeline's bottleneck), every stage getting at least one layer.
#pragma once

#include <functional>
#include <vector>

namespace tpusim {

/// Layers per stage (K entries summing to costs.size()), minimizing the largest stage sum.
/// Requires 1 <= stages <= costs.size() and non-negative costs.
std::vector<int> balanced_partition(const std::vector<double>& costs, int stages);

/// Whether layers [first, last) fit the core of stage `stage`. Must be monotone: a stage that
/// fits still fits with a sub-range of its layers.
using StageFits = std::function<bool(int stage, int first, int last)>;

/// Like balanced_partition, with every stage fitting (`fits`): the smallest largest stage sum
/// among the partitions whose stages all fit. Empty when none fits.
std::vector<int> balanced_partition(const std::vector<double>& costs, int stages, const StageFits& fits);

/// Largest stage sum over the mean stage sum, minus one (0 = perfectly balanced).
double partition_imbalance(const std::vector<double>& costs, const std::vector<int>& sizes);

}  // namespace tpusim
