// Routes around failed ICI links (a link whose bandwidth scale is 0 in the network state): the
// dimension-order route where it avoids them, otherwise a shortest path over the links left
// (breadth-first with Boost.Graph, links tried in id order, so the same failures give the same
// detours). Pure (no SimGrid): the engine's platform and the perturbation checks use it.
#pragma once

#include <memory>
#include <vector>

#include "hardware/network_state.hpp"
#include "hardware/topology.hpp"

namespace tpusim {

class Detours {
 public:
  Detours(const Topology& topology, const NetworkState& network);
  /// Whether any link has failed.
  bool any() const { return failed_count_ > 0; }
  bool failed(int link) const { return failed_[std::size_t(link)]; }
  /// The links from chip `from` to chip `to`; `detoured` set when the dimension-order route crosses
  /// a failed link and another was taken. Empty with `reachable` false when no route is left.
  std::vector<int> route(int from, int to, bool* detoured = nullptr, bool* reachable = nullptr) const;
  /// The chips cut off by failed links (empty: every chip still reaches every other): those chip 0
  /// cannot reach or that cannot reach it, or, when they are most of the slice, chip 0's side.
  std::vector<int> cut_off() const;

 private:
  struct WorkingLinks;  // the chips and the links left, as a Boost graph (built once, when any failed)
  const Topology& topology_;
  std::vector<bool> failed_;
  int failed_count_ = 0;
  std::shared_ptr<const WorkingLinks> working_;
};

}  // namespace tpusim
