// What-ifs of a non-uniform pod (study key "perturbations"): slow chips and slow links, read into
// the NetworkState the engine applies (a chip's compute and HBM time divided by its scale, a
// directed link's bandwidth times its scale). The symmetry proof and the cluster reduction refuse
// a non-uniform network, so a perturbed step is simulated chip by chip.
#pragma once

#include "hardware/json_fields.hpp"
#include "hardware/network_state.hpp"
#include "hardware/topology.hpp"

namespace tpusim {

/// "perturbations": {"chips": [{"chip": [x, y(, z)], "compute_scale": s}],
///                   "links": [{"chip": [...], "dimension": "x" | 0, "direction": "+" | "-",
///                              "bandwidth_scale": s}],
///                   "random": {"seed": n, "slow_chip_fraction": p, "compute_scale": s,
///                              "slow_link_fraction": q, "link_bandwidth_scale": s}}
/// `random` makes each chip slow with probability p and each directed link with probability q,
/// drawn from the seed (the same seed, the same draw, on any machine); listed chips and links
/// are applied after it.
/// A chip is its coordinates on the slice's torus; a scale is in (0, 1000], a link's in [0, 1000]
/// (0: failed; routes go round it, hardware/detours.hpp). Problems at their paths (a chip off the
/// torus, a link with no neighbour, failures that cut chips off, a key not modelled).
NetworkState read_perturbations(const Json& perturbations, const Topology& torus, Problems& problems);

}  // namespace tpusim
