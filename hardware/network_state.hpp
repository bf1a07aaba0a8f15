// The state of a slice's network and chips beyond what the hardware file says of every link and
// chip: a bandwidth scale per directed ICI link and a speed scale per chip (1 = as specified).
// Uniform by default; a degraded link, a failed one or a slow chip is a network state. The
// engine's platform applies it; the symmetry proof refuses representative rings unless its links
// are uniform, and the cluster reduction simulates one cluster of each kind of chip speeds.
#pragma once

#include <vector>

#include "hardware/topology.hpp"

namespace tpusim {

struct NetworkState {
  /// By directed link id (Topology::link_id): the link's bandwidth is the hardware's times this.
  /// Empty: every link 1.
  std::vector<double> link_bandwidth_scale;
  /// By chip rank: compute on the chip's cores takes its time divided by this. Empty: every chip 1.
  std::vector<double> chip_speed_scale;
  /// By chip rank: the part of a task its HBM traffic sets (Task::hbm_s) takes its time divided by
  /// this instead. Empty: every chip's is its speed scale (a chip throttled as a whole).
  std::vector<double> chip_hbm_scale;

  /// Every link and chip as specified.
  bool uniform() const {
    for (double s : link_bandwidth_scale)
      if (s != 1.0) return false;
    for (double s : chip_speed_scale)
      if (s != 1.0) return false;
    for (std::size_t c = 0; c < chip_hbm_scale.size(); ++c)
      if (chip_hbm_scale[c] != chip_scale(int(c))) return false;
    return true;
  }
  /// Every link as specified (chips may differ in speed: collectives' flows do not compute).
  bool links_uniform() const {
    for (double s : link_bandwidth_scale)
      if (s != 1.0) return false;
    return true;
  }
  double link_scale(int link) const {
    return std::size_t(link) < link_bandwidth_scale.size() ? link_bandwidth_scale[std::size_t(link)] : 1.0;
  }
  double chip_scale(int chip) const {
    return std::size_t(chip) < chip_speed_scale.size() ? chip_speed_scale[std::size_t(chip)] : 1.0;
  }
  double hbm_scale(int chip) const {
    return std::size_t(chip) < chip_hbm_scale.size() ? chip_hbm_scale[std::size_t(chip)] : chip_scale(chip);
  }
};

}  // namespace tpusim
