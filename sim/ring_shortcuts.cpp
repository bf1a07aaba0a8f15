#include "sim/ring_shortcuts.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "sim/cluster_reduction.hpp"
#include "sim/components.hpp"

namespace tpusim::sim {

std::vector<long long> RingGeometry::flow_links_of(const PlannedRing& ring, std::size_t i) const {
  const int a = ring.cores[i], b = ring.cores[(i + 1) % ring.cores.size()];
  if (a == b) return {};
  return flow_links(topology, cores_per_chip, a, b);
}

namespace {

/// Whether no two flows of a phase share a link (and every flow crosses one); `links` gets the
/// links of every phase.
bool phases_have_disjoint_flows(const std::vector<Phase>& plan, const RingGeometry& geometry,
                                std::set<long long>& links) {
  bool disjoint = true;
  for (const Phase& phase : plan) {
    std::set<long long> in_phase;
    for (const auto& ring : phase.rings)
      for (std::size_t i = 0; i < ring.cores.size(); ++i) {
        const auto crossed = geometry.flow_links_of(ring, i);
        disjoint = disjoint && !crossed.empty();
        for (long long l : crossed) disjoint = in_phase.insert(l).second && disjoint;
      }
    links.insert(in_phase.begin(), in_phase.end());
  }
  return disjoint;
}

/// The first flow of each route shape (torus links, on-chip links) of a ring.
std::vector<int> one_flow_per_shape(const PlannedRing& ring, const RingGeometry& geometry) {
  std::set<std::tuple<int, int, int>> shapes;  // torus links, on-chip links, over the DCN (out 1, in 2)
  std::vector<int> played;
  for (std::size_t i = 0; i < ring.cores.size(); ++i) {
    const auto crossed = geometry.flow_links_of(ring, i);
    const int onchip = int(std::count_if(crossed.begin(), crossed.end(), [](long long l) { return l < 0; }));
    // A flow out through a host's card (its latency on it) or in: shapes of their own.
    const int dcn = is_dcn_endpoint(ring.cores[(i + 1) % ring.cores.size()]) ? 1
                    : is_dcn_endpoint(ring.cores[i])                         ? 2
                                                                             : 0;
    if (shapes.insert({int(crossed.size()) - onchip - (dcn > 0), onchip, dcn}).second)
      played.push_back(int(i));
  }
  return played;
}

/// A ring's flows (from, to), sorted.
std::vector<std::pair<int, int>> flows_of(const std::vector<PlannedRing>& rings) {
  std::vector<std::pair<int, int>> f;
  for (const auto& ring : rings)
    for (std::size_t i = 0; i < ring.cores.size(); ++i)
      f.emplace_back(ring.cores[i], ring.cores[(i + 1) % ring.cores.size()]);
  std::sort(f.begin(), f.end());
  return f;
}

/// Whether `ring` is `first` moved along the torus, started at its member `j`, by a move that
/// carries `flows` (the phase's) onto themselves. Moves only along wrapping dimensions
/// (elsewhere a move is no symmetry).
bool moved_onto(const PlannedRing& ring, const PlannedRing& first, std::size_t j,
                const std::vector<std::pair<int, int>>& flows, const RingGeometry& geometry) {
  const Topology& topo = geometry.topology;
  const int cpc = geometry.cores_per_chip;
  std::vector<int> shift(std::size_t(topo.dims()));
  bool moves = ring.cores.front() % cpc == first.cores[j] % cpc;
  for (int d = 0; d < topo.dims() && moves; ++d) {
    const int n = topo.size(d);
    shift[std::size_t(d)] =
        (topo.coord(ring.cores.front() / cpc, d) - topo.coord(first.cores[j] / cpc, d) + n) % n;
    moves = shift[std::size_t(d)] == 0 || topo.wraps(d);
  }
  if (!moves) return false;
  auto move = [&](int core) {
    std::vector<int> c = topo.coord(core / cpc);
    for (int d = 0; d < topo.dims(); ++d)
      c[std::size_t(d)] = (c[std::size_t(d)] + shift[std::size_t(d)]) % topo.size(d);
    return topo.rank(c) * cpc + core % cpc;
  };
  for (std::size_t i = 0; i < ring.cores.size(); ++i)
    if (move(first.cores[(i + j) % first.cores.size()]) != ring.cores[i]) return false;
  std::vector<std::pair<int, int>> moved;
  for (const auto& [a, b] : flows) moved.emplace_back(move(a), move(b));
  std::sort(moved.begin(), moved.end());
  return moved == flows;
}

/// Whether every ring of `phase` is its first ring moved along the torus (up to where it starts),
/// with the same chunk, steps and flows played, and each such move carries the phase's flows
/// onto themselves.
bool translation_invariant(const Phase& phase, const RingGeometry& geometry) {
  const PlannedRing& first = phase.rings.front();
  const auto flows = flows_of(phase.rings);
  if (std::any_of(flows.begin(), flows.end(),
                  [](auto f) { return is_dcn_endpoint(f.first) || is_dcn_endpoint(f.second); }))
    return false;  // a network card is no torus translation's
  for (const auto& ring : phase.rings) {
    if (ring.cores.size() != first.cores.size() || ring.steps != first.steps ||
        ring.chunk_bytes != first.chunk_bytes || !ring.played.empty() || !first.played.empty())
      return false;
    bool found = false;
    for (std::size_t j = 0; j < first.cores.size() && !found; ++j)
      found = moved_onto(ring, first, j, flows, geometry);
    if (!found) return false;
  }
  return true;
}

/// Per ring of `phase`, whether its steps repeat its first (see mark_repeating_rings).
std::vector<bool> repeating_rings(const Phase& phase, const RingGeometry& geometry) {
  const std::size_t n = phase.rings.size();
  std::vector<std::set<long long>> links(n);
  std::map<long long, int> users;  // link -> rings crossing it
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < phase.rings[r].cores.size(); ++i)
      for (long long l : geometry.flow_links_of(phase.rings[r], i)) links[r].insert(l);
    for (long long l : links[r]) ++users[l];
  }
  std::vector<bool> lone(n, true);
  for (std::size_t r = 0; r < n; ++r)
    for (long long l : links[r]) lone[r] = lone[r] && users[l] == 1;
  if (std::find(lone.begin(), lone.end(), false) != lone.end() && translation_invariant(phase, geometry))
    lone.assign(n, true);
  return lone;
}

}  // namespace

std::set<int> play_lone_flows_once(const TaskGraph& g, std::vector<std::vector<Phase>>& plans,
                                   const RingGeometry& geometry) {
  const int n = g.size();
  std::vector<std::set<long long>> links(static_cast<std::size_t>(n));
  std::map<long long, std::vector<int>> tasks_on;  // link -> the collectives simulated on it
  std::vector<int> candidates;
  for (int id = 0; id < n; ++id) {
    if (g.task(id).kind != TaskKind::Collective) continue;
    if (phases_have_disjoint_flows(plans[std::size_t(id)], geometry, links[std::size_t(id)]))
      candidates.push_back(id);
    for (long long l : links[std::size_t(id)]) tasks_on[l].push_back(id);
  }
  // Transfers meeting a collective's links are ordered with it (the symmetry proof's
  // condition); collectives meeting it must be too: those joined by shared links form a chain.
  Components joined(n);
  for (const auto& [link, on] : tasks_on)
    for (int id : on) joined.join(id, on.front());
  std::map<int, std::vector<int>> components;
  for (int id = 0; id < n; ++id)
    if (!links[std::size_t(id)].empty()) components[joined.root(id)].push_back(id);
  std::set<int> alone;
  for (const auto& [r, members] : components)
    if (g.chain(members)) alone.insert(members.begin(), members.end());
  for (int id : candidates)
    if (alone.count(id))
      for (Phase& phase : plans[std::size_t(id)])
        for (auto& ring : phase.rings) ring.played = one_flow_per_shape(ring, geometry);
  return alone;
}

void mark_repeating_rings(const std::set<int>& alone, std::vector<std::vector<Phase>>& plans,
                          const RingGeometry& geometry) {
  std::map<std::vector<int>, std::vector<bool>> known;  // a phase's rings' cores -> verdicts
  for (int id : alone)
    for (Phase& phase : plans[std::size_t(id)]) {
      std::vector<int> key;
      for (const auto& ring : phase.rings) {
        key.push_back(int(ring.cores.size()));
        key.insert(key.end(), ring.cores.begin(), ring.cores.end());
      }
      auto [at, fresh] = known.emplace(std::move(key), std::vector<bool>());
      if (fresh) at->second = repeating_rings(phase, geometry);
      for (std::size_t r = 0; r < phase.rings.size(); ++r) phase.rings[r].repeats = at->second[r];
    }
}

}  // namespace tpusim::sim
