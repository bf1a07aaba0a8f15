// Per-core HBM occupancy over simulated time, by category: the peak, the breakdown at the
// peak, and the first allocation that went over capacity.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "sim/task_graph.hpp"

namespace tpusim::sim {

using MemoryBreakdown = std::array<double, kMemoryCategories>;

struct Overflow {
  bool happened = false;
  int core = -1;
  int task = -1;  ///< the task whose allocation first exceeded capacity
  double time_s = 0;
  double bytes_over = 0;  ///< by how much it exceeded capacity at that moment
};

class MemoryTracker {
 public:
  MemoryTracker(int cores, double capacity_bytes);
  /// Starting occupancy (resident weights, optimizer slots) at time 0.
  void set_resident(int core, const MemoryBreakdown& bytes);
  /// Applies one effect at `time_s` on behalf of `task`. Throws SimulationError if a category
  /// would go negative (a free without its allocation).
  void apply(const MemoryEffect& effect, int task, double time_s);

  double peak(int core) const { return peak_[core]; }
  /// When a core first reached its peak, and the task whose effect took it there (-1: the
  /// resident state at the start).
  double peak_at(int core) const { return peak_at_[core]; }
  int peak_task(int core) const { return peak_task_[core]; }
  const MemoryBreakdown& at_peak(int core) const { return at_peak_[core]; }
  const MemoryBreakdown& current(int core) const { return current_[core]; }
  const Overflow& overflow() const { return overflow_; }
  /// The allocation that took a core furthest over capacity (happened only with an overflow).
  const Overflow& worst_overflow() const { return worst_; }
  double capacity() const { return capacity_; }

 private:
  double capacity_;
  std::vector<MemoryBreakdown> current_;
  std::vector<MemoryBreakdown> at_peak_;
  std::vector<double> total_;
  std::vector<double> peak_;
  std::vector<double> peak_at_;
  std::vector<int> peak_task_;
  Overflow overflow_;
  Overflow worst_;
};

}  // namespace tpusim::sim
