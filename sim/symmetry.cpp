#include "sim/symmetry.hpp"

#include <algorithm>
#include <set>

#include "sim/cluster_reduction.hpp"

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
    for (const auto& phase : planner.plan(t, groups[gi]))
      for (const auto& ring : phase.rings) {
        f.shapes[gi].insert(f.shapes[gi].end(),
                            {double(ring.cores.size()), ring.chunk_bytes, double(ring.steps)});
        for (std::size_t i = 0; i < ring.cores.size(); ++i) {
          const int a = ring.cores[i], b = ring.cores[(i + 1) % ring.cores.size()];
          f.shapes[gi].push_back(double(flow_hops(topology, cpc, a, b)));
          for (long long l : flow_links(topology, cpc, a, b)) f.links[gi].insert(l);
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

/// `proof`'s representatives simulated all the same where collectives sharing links may run at
/// once (EngineOptions::approximate_sharing): not exact, and said so.
SymmetryProof approximate(SymmetryProof proof) {
  proof.approximate = true;
  proof.reason =
      "representative rings, approximate: collectives sharing links may run at once, and contention with the "
      "rings not simulated is left out";
  return proof;
}

/// The rings of every collective of `g` (every group, every phase), joined by shared links into
/// clusters: whether the representative rings (each phase's first line, in every group) make
/// up whole clusters and every other cluster is congruent with one of theirs (the same
/// collectives' phases with rings of the same shapes). Then each representative cluster runs
/// as its congruent copies do, whatever runs at once, so simulating the representative rings is
/// exact even where collectives sharing links overlap in time (the stages' gradient all-reduces
/// of many pipeline replicas).
bool ring_clusters_congruent(const TaskGraph& g, const CollectivePlanner& planner) {
  const Topology& topology = planner.topology();
  const int cpc = planner.cores_per_chip();
  std::vector<std::vector<double>> signature;  // per ring: task, phase, then its shape
  std::vector<bool> representative;
  std::map<long long, std::size_t> owner;
  std::vector<std::size_t> parent;
  auto root = [&](std::size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  for (int id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.kind != TaskKind::Collective) continue;
    for (const auto& group : t.collective_groups()) {
      const auto plan = planner.plan(t, group);
      for (std::size_t p = 0; p < plan.size(); ++p)
        for (const auto& ring : plan[p].rings) {
          const std::size_t r = signature.size();
          parent.push_back(r);
          representative.push_back(ring.representative);
          signature.push_back(
              {double(id), double(p), double(ring.cores.size()), ring.chunk_bytes, double(ring.steps)});
          for (std::size_t i = 0; i < ring.cores.size(); ++i) {
            const int a = ring.cores[i], b = ring.cores[(i + 1) % ring.cores.size()];
            signature[r].push_back(double(flow_hops(topology, cpc, a, b)));
            for (long long l : flow_links(topology, cpc, a, b)) {
              auto [it, fresh] = owner.emplace(l, r);
              if (!fresh) parent[root(r)] = root(it->second);
            }
          }
        }
    }
  }
  std::map<std::size_t, std::vector<std::size_t>> members;
  for (std::size_t r = 0; r < signature.size(); ++r) members[root(r)].push_back(r);
  std::set<std::vector<std::vector<double>>> kept;
  std::vector<std::vector<std::vector<double>>> others;
  for (const auto& [c, rings] : members) {
    const bool rep = representative[rings.front()];
    std::vector<std::vector<double>> cluster;
    for (std::size_t r : rings) {
      if (representative[r] != rep) return false;  // a representative ring meets another line's
      cluster.push_back(signature[r]);
    }
    std::sort(cluster.begin(), cluster.end());
    if (rep)
      kept.insert(std::move(cluster));
    else
      others.push_back(std::move(cluster));
  }
  return std::all_of(others.begin(), others.end(), [&](const auto& c) { return kept.count(c) > 0; });
}

/// The transfers of `g` by the links they stand for.
std::map<long long, std::vector<int>> transfers_by_link(
    const TaskGraph& g, const CollectivePlanner& planner,
    const std::map<int, std::set<long long>>* transfer_links) {
  std::map<long long, std::vector<int>> on;
  for (int id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.kind != TaskKind::Transfer || t.src_core == t.dst_core || t.bytes <= 0) continue;
    if (transfer_links) {
      if (auto it = transfer_links->find(id); it != transfer_links->end())
        for (long long l : it->second) on[l].push_back(id);
      continue;
    }
    for (long long l : flow_links(planner.topology(), planner.cores_per_chip(), t.src_core, t.dst_core))
      on[l].push_back(id);
  }
  return on;
}

}  // namespace

SymmetryProof prove_symmetry(const TaskGraph& g, const CollectivePlanner& planner,
                             const NetworkState& network,
                             const std::map<int, std::set<long long>>* transfer_links,
                             bool approximate_sharing) {
  if (!network.links_uniform()) return none("the links are not uniform");
  const auto transfers_on = transfers_by_link(g, planner, transfer_links);
  std::map<Family, std::vector<int>> family_tasks;
  for (int id = 0; id < g.size(); ++id)
    if (g.task(id).kind == TaskKind::Collective) family_tasks[g.task(id).collective_groups()].push_back(id);
  if (family_tasks.empty()) return none("the step has no collectives");
  SymmetryProof proof;
  std::map<Family, std::set<long long>> family_links;
  std::vector<std::pair<Family, Family>> sharing;
  for (const auto& [groups, tasks] : family_tasks) {
    const Task& t = g.task(tasks.front());
    const Footprints f = footprints(t, groups, planner);
    const auto c = clusters(f.links);
    if (!congruent(c, f.shapes)) return none("the groups of a collective (" + t.name + ") are not congruent");
    std::set<long long> all;
    for (const auto& l : f.links) all.insert(l.begin(), l.end());
    std::set<int> meeting;
    for (long long l : all)
      if (auto it = transfers_on.find(l); it != transfers_on.end())
        meeting.insert(it->second.begin(), it->second.end());
    if (!meeting.empty() && !g.ordered(tasks, std::vector<int>(meeting.begin(), meeting.end())))
      return none("a collective (" + t.name +
                  ") shares links with point-to-point transfers it may run beside");
    for (const auto& [other, other_links] : family_links)
      if (std::any_of(all.begin(), all.end(), [&](long long l) { return other_links.count(l) > 0; }))
        sharing.push_back({groups, other});
    family_links[groups] = std::move(all);
    proof.representatives[groups] = c.begin()->second;
  }
  if (!sharing_families_never_overlap(g, sharing)) {
    // Collectives sharing links may run at once: exact all the same when their rings fall into
    // congruent clusters (every group's representative rings kept).
    if (!ring_clusters_congruent(g, planner))
      return approximate_sharing ? approximate(std::move(proof))
                                 : none("collectives sharing links may run at once");
    for (auto& [groups, kept] : proof.representatives) {
      kept.resize(groups.size());
      for (std::size_t gi = 0; gi < groups.size(); ++gi) kept[gi] = gi;
    }
  }
  proof.exact = true;
  return proof;
}

}  // namespace tpusim::sim
