#include "sim/symmetry.hpp"

#include <algorithm>
#include <set>

namespace tpusim::sim {
namespace {

/// What each group of a family occupies: the links its rings use (on-chip hops as negative ids)
/// and its shape (ring sizes, chunks, steps and hop counts), which congruent groups share.
struct Footprints {
  std::vector<std::set<long long>> links;
  std::vector<std::vector<double>> shapes;
};

Footprints footprints(const Task& t, const Family& groups, const CollectivePlanner& planner) {
  const Topology& topology = planner.topology();
  const int cpc = planner.cores_per_chip();
  Footprints f{std::vector<std::set<long long>>(groups.size()),
               std::vector<std::vector<double>>(groups.size())};
  for (std::size_t gi = 0; gi < groups.size(); ++gi)
    for (const auto& phase : planner.plan(t.op, groups[gi], t.bytes))
      for (const auto& ring : phase.rings) {
        f.shapes[gi].insert(f.shapes[gi].end(),
                            {double(ring.cores.size()), ring.chunk_bytes, double(ring.steps)});
        for (std::size_t i = 0; i < ring.cores.size(); ++i) {
          const int a = ring.cores[i], b = ring.cores[(i + 1) % ring.cores.size()];
          const auto route = topology.route(a / cpc, b / cpc);
          f.shapes[gi].push_back(double(route.size()));
          if (a / cpc == b / cpc) f.links[gi].insert(-1 - (long long)(a)*cpc - b % cpc);  // on-chip a -> b
          for (int l : route) f.links[gi].insert(l);
        }
      }
  return f;
}

/// Groups joined by a shared link (union-find over groups), each cluster's groups in order.
std::map<std::size_t, std::vector<std::size_t>> clusters(const std::vector<std::set<long long>>& links) {
  std::vector<std::size_t> parent(links.size());
  for (std::size_t i = 0; i < parent.size(); ++i) parent[i] = i;
  auto root = [&](std::size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  std::map<long long, std::size_t> owner;
  for (std::size_t gi = 0; gi < links.size(); ++gi)
    for (long long l : links[gi]) {
      auto [it, fresh] = owner.emplace(l, gi);
      if (!fresh) parent[root(gi)] = root(it->second);
    }
  std::map<std::size_t, std::vector<std::size_t>> c;
  for (std::size_t gi = 0; gi < links.size(); ++gi) c[root(gi)].push_back(gi);
  return c;
}

/// Whether every cluster is congruent with the first (as many groups, the same shapes).
bool congruent(const std::map<std::size_t, std::vector<std::size_t>>& clusters,
               const std::vector<std::vector<double>>& shapes) {
  const auto& first = clusters.begin()->second;
  for (const auto& [r, members] : clusters) {
    if (members.size() != first.size()) return false;
    for (std::size_t k = 0; k < members.size(); ++k)
      if (shapes[members[k]] != shapes[first[k]]) return false;
  }
  return true;
}

/// Families sharing links must never run at once: each one's collectives all before or all
/// after each of the other's (e.g. weight-gradient reductions waiting for the whole backward,
/// and the activations' collectives within it).
bool sharing_families_never_overlap(const TaskGraph& g,
                                    const std::vector<std::pair<Family, Family>>& sharing) {
  if (sharing.empty()) return true;
  std::map<Family, std::vector<int>> tasks;
  for (int id = 0; id < g.size(); ++id)
    if (g.task(id).kind == TaskKind::Collective) tasks[g.task(id).collective_groups()].push_back(id);
  for (const auto& [x, y] : sharing)
    if (!g.ordered(tasks.at(x), tasks.at(y))) return false;
  return true;
}

SymmetryProof none(std::string why) {
  SymmetryProof p;
  p.reason = "none: " + std::move(why);
  return p;
}

}  // namespace

SymmetryProof prove_symmetry(const TaskGraph& g, const CollectivePlanner& planner,
                             const NetworkState& network) {
  if (!network.uniform()) return none("the links or chips are not uniform");
  for (int id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.kind == TaskKind::Transfer) return none("the step has point-to-point transfers");
    if (t.kind == TaskKind::Collective && int(t.members().size()) != g.cores())
      return none("a collective (" + t.name + ") does not span every core");
  }
  SymmetryProof proof;
  std::map<Family, std::set<long long>> family_links;
  std::vector<std::pair<Family, Family>> sharing;
  for (int id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.kind != TaskKind::Collective) continue;
    const auto groups = t.collective_groups();
    if (family_links.count(groups)) continue;
    const Footprints f = footprints(t, groups, planner);
    const auto c = clusters(f.links);
    if (!congruent(c, f.shapes)) return none("the groups of a collective (" + t.name + ") are not congruent");
    std::set<long long> all;
    for (const auto& l : f.links) all.insert(l.begin(), l.end());
    for (const auto& [other, other_links] : family_links)
      if (std::any_of(all.begin(), all.end(), [&](long long l) { return other_links.count(l) > 0; }))
        sharing.push_back({groups, other});
    family_links[groups] = std::move(all);
    proof.representatives[groups] = c.begin()->second;
  }
  if (!sharing_families_never_overlap(g, sharing)) return none("collectives sharing links may run at once");
  proof.exact = true;
  return proof;
}

}  // namespace tpusim::sim
