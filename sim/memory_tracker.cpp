#include "sim/memory_tracker.hpp"

#include <cmath>

#include "hardware/errors.hpp"

namespace tpusim::sim {

MemoryTracker::MemoryTracker(int cores, double capacity_bytes)
    : capacity_(capacity_bytes),
      current_(cores),
      at_peak_(cores),
      total_(cores, 0.0),
      peak_(cores, 0.0),
      peak_at_(cores, 0.0),
      peak_task_(cores, -1) {
  for (auto& c : current_) c.fill(0.0);
  for (auto& c : at_peak_) c.fill(0.0);
}

void MemoryTracker::set_resident(int core, const MemoryBreakdown& bytes) {
  current_[core] = bytes;
  total_[core] = 0;
  for (double b : bytes) total_[core] += b;
  peak_[core] = total_[core];
  at_peak_[core] = bytes;
  if (total_[core] > capacity_) {
    const Overflow now{true, core, -1, 0.0, total_[core] - capacity_};
    if (!overflow_.happened) overflow_ = now;
    if (now.bytes_over > worst_.bytes_over) worst_ = now;
  }
}

void MemoryTracker::apply(const MemoryEffect& e, int task, double time_s) {
  double& slot = current_[e.core][int(e.category)];
  slot += e.bytes;
  total_[e.core] += e.bytes;
  if (slot < -1e-6 * std::max(1.0, std::fabs(e.bytes))) {
    throw SimulationError("core " + std::to_string(e.core) + ": " + to_string(e.category) +
                          " memory went negative (a free without its allocation) in task " +
                          std::to_string(task));
  }
  if (total_[e.core] > peak_[e.core]) {
    peak_[e.core] = total_[e.core];
    at_peak_[e.core] = current_[e.core];
    peak_at_[e.core] = time_s;
    peak_task_[e.core] = task;
  }
  if (e.bytes > 0 && total_[e.core] > capacity_) {
    const Overflow now{true, e.core, task, time_s, total_[e.core] - capacity_};
    if (!overflow_.happened) overflow_ = now;
    if (now.bytes_over > worst_.bytes_over) worst_ = now;
  }
}

}  // namespace tpusim::sim
