// Host offload (a schedule's "offload"): what a re-materialized layer's forward keeps for its
// backward, moved to its host's memory over the chip's host link as the forward goes on and
// brought back, one layer ahead, before the recompute that reads it, as MaxText's offloading
// remat policies do (shared/HARDWARE.md, Today's TPUs: the named activations go to host memory
// over PCIe in the forward and come back before the backward). Each thing one can offload is an
// entry of the registry in offload.cpp: its name, what it moves, the bytes of a layer on a core.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hardware/json_fields.hpp"
#include "schedules/layer_cost.hpp"
#include "schedules/mesh_lowering.hpp"

namespace tpusim {

struct Study;

struct OffloadTarget {
  std::string name;
  std::string description;
  /// The re-materialization it needs (what it moves is what that policy keeps).
  bool needs_save_policy = false;
  /// Bytes of layer program `p` a core moves, `input` being the piece of its input it keeps.
  std::function<double(const mesh::LayerProgram& p, double input)> bytes;
};

/// Every target, by name ("layer_input", "saved_outputs").
const std::vector<OffloadTarget>& offload_targets();

/// A schedule's offload: the targets it names (none by default).
struct Offload {
  std::vector<const OffloadTarget*> targets;
  bool empty() const { return targets.empty(); }
  /// What a core moves to its host of layer program `p` (`input`: its kept input piece).
  double bytes(const mesh::LayerProgram& p, double input) const;
  /// The target names, as the schedule's resolved() reports them.
  Json json() const;
};

/// Reads "offload" (a list of target names; absent: none): each must be registered, its
/// re-materialization in force (`remat`), and the hardware must give its hosts' memory.
Offload read_offload(Fields& f, Keep remat, const Study& study, Problems& problems);

/// Throws ConfigError (at `path`) when what a step offloads per device, `per_device` bytes, is
/// over a host's memory for the devices it hosts.
void check_host_memory(const Study& study, double per_device, const std::string& path);

}  // namespace tpusim
