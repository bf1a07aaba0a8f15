#include "schedules/partitioner.hpp"

#include <algorithm>
#include <numeric>

namespace tpusim {

namespace {

/// Greedy contiguous split under a bottleneck: each stage takes layers while it stays within
/// `limit`, fits (when `fits` is given) and enough layers remain for the stages after it.
/// Returns the sizes, or empty if the layers do not fit in `stages` stages. Taking as many
/// layers as allowed is exact for feasibility because both constraints are monotone: the
/// stages after get a suffix of what they would otherwise get.
std::vector<int> greedy(const std::vector<double>& costs, int stages, double limit,
                        const StageFits& fits = {}) {
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
    if (greedy(costs, stages, mid).empty())
      lo = mid;
    else
      hi = mid;
  }
  return greedy(costs, stages, hi);
}

namespace {

/// Contiguous splits whose stages fit and stay within a bottleneck. Greedy is not exact here:
/// with room that differs by stage, taking the most layers early can push a large layer onto a
/// stage with little room. Instead, stage by stage, the set of layer counts the stages so far
/// can cover: stage s starting after layer i can end anywhere in (i, min(fit end, cost end)].
class FittingSplits {
 public:
  FittingSplits(const std::vector<double>& costs, int stages, const StageFits& fits)
      : n_(int(costs.size())), stages_(stages), prefix_(costs.size() + 1, 0.0), fit_end_(stages) {
    for (int i = 0; i < n_; ++i) prefix_[i + 1] = prefix_[i] + costs[i];
    // fit_end_[s][i]: the largest `last` with [i, last) fitting stage s (i: not even one layer).
    // Monotone in i, so one forward sweep per stage.
    for (int s = 0; s < stages; ++s) {
      fit_end_[s].resize(std::size_t(n_));
      for (int i = 0, e = 0; i < n_; ++i) {
        e = std::max(e, i);
        while (e < n_ && fits(s, i, e + 1)) ++e;
        fit_end_[s][i] = e;
      }
    }
  }

  /// The stage sizes under bottleneck `limit`, or empty when there are none.
  std::vector<int> split(double limit) const {
    // from[s][j]: the start of stage s - 1 in a way of covering layers [0, j) with s stages
    // (-1: none).
    std::vector<std::vector<int>> from(std::size_t(stages_ + 1), std::vector<int>(std::size_t(n_ + 1), -1));
    from[0][0] = 0;
    for (int s = 0; s < stages_; ++s) {
      int best_start = -1, best_end = -1;  // among reachable starts i < j, the one reaching furthest
      for (int j = 1; j <= n_; ++j) {
        const int i = j - 1;
        if (from[s][i] >= 0 && i < n_) {
          int cost_end =
              int(std::upper_bound(prefix_.begin(), prefix_.end(), prefix_[i] + limit) - prefix_.begin()) - 1;
          const int end = std::min(fit_end_[s][i], cost_end);
          if (end > best_end) {
            best_end = end;
            best_start = i;
          }
        }
        if (best_end >= j) from[s + 1][j] = best_start;
      }
    }
    if (from[stages_][n_] < 0) return {};
    std::vector<int> sizes(static_cast<std::size_t>(stages_), 0);
    for (int s = stages_, j = n_; s > 0; --s) {
      const int i = from[s][j];
      sizes[std::size_t(s - 1)] = j - i;
      j = i;
    }
    return sizes;
  }

 private:
  int n_, stages_;
  std::vector<double> prefix_;
  std::vector<std::vector<int>> fit_end_;
};

}  // namespace

std::vector<int> balanced_partition(const std::vector<double>& costs, int stages, const StageFits& fits) {
  const FittingSplits splits(costs, stages, fits);
  double lo = *std::max_element(costs.begin(), costs.end());
  double hi = std::accumulate(costs.begin(), costs.end(), 0.0);
  hi += 1e-9 * hi;                          // the whole sum, whatever the rounding of prefix sums
  if (splits.split(hi).empty()) return {};  // no bottleneck helps: nothing fits
  if (auto sizes = splits.split(lo); !sizes.empty()) return sizes;
  for (int iter = 0; iter < 100 && hi - lo > 1e-12 * hi; ++iter) {
    const double mid = lo + (hi - lo) / 2;
    if (splits.split(mid).empty())
      lo = mid;
    else
      hi = mid;
  }
  return splits.split(hi);
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
