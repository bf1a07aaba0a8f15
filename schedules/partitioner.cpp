#include "schedules/partitioner.hpp"

#include <algorithm>
#include <numeric>

namespace tpusim {

namespace {

/// Greedy contiguous split under a bottleneck: each stage takes layers while it stays within
/// `limit` and enough layers remain for the stages after it. Returns the sizes, or empty if
/// the layers do not fit in `stages` stages.
std::vector<int> greedy(const std::vector<double>& costs, int stages, double limit) {
  std::vector<int> sizes;
  const int n = int(costs.size());
  int i = 0;
  for (int s = 0; s < stages; ++s) {
    const int stages_after = stages - s - 1;
    double sum = 0;
    int taken = 0;
    while (i < n && n - i > stages_after && (taken == 0 || sum + costs[i] <= limit)) {
      if (taken == 0 && costs[i] > limit) return {};
      sum += costs[i++];
      ++taken;
    }
    sizes.push_back(taken);
  }
  if (i != n) return {};
  return sizes;
}

}  // namespace

std::vector<int> balanced_partition(const std::vector<double>& costs, int stages) {
  double lo = *std::max_element(costs.begin(), costs.end());
  double hi = std::accumulate(costs.begin(), costs.end(), 0.0);
  if (greedy(costs, stages, lo).size() == std::size_t(stages)) return greedy(costs, stages, lo);
  // The optimal bottleneck lies in (lo, hi]: bisect on it (greedy feasibility is exact for
  // contiguous splits), then split with the smallest feasible bottleneck found.
  for (int iter = 0; iter < 100 && hi - lo > 1e-12 * hi; ++iter) {
    const double mid = lo + (hi - lo) / 2;
    if (greedy(costs, stages, mid).empty()) lo = mid;
    else hi = mid;
  }
  return greedy(costs, stages, hi);
}

double partition_imbalance(const std::vector<double>& costs, const std::vector<int>& sizes) {
  double largest = 0, total = 0;
  std::size_t i = 0;
  for (int size : sizes) {
    double sum = 0;
    for (int k = 0; k < size; ++k) sum += costs[i++];
    largest = std::max(largest, sum);
    total += sum;
  }
  const double mean = total / double(sizes.size());
  return mean > 0 ? largest / mean - 1.0 : 0.0;
}

}  // namespace tpusim
