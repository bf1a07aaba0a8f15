#include "sim/cluster_reduction.hpp"

#include <algorithm>
#include <set>
#include <tuple>
#include <unordered_set>

#include "sim/components.hpp"

namespace tpusim::sim {

std::vector<long long> flow_links(const Topology& topology, int cores_per_chip, int a, int b) {
  const int cpc = cores_per_chip;
  if (is_dcn_endpoint(b)) return {dcn_link(dcn_endpoint_host(b), true)};
  if (is_dcn_endpoint(a)) return {dcn_link(dcn_endpoint_host(a), false)};
  if (a / cpc == b / cpc) return {-1 - (long long)(a)*cpc - b % cpc};
  std::vector<long long> links;
  for (int l : topology.route(a / cpc, b / cpc)) links.push_back(l);
  return links;
}

int flow_hops(const Topology& topology, int cores_per_chip, int a, int b) {
  if (is_dcn_endpoint(a) || is_dcn_endpoint(b)) return 0;
  return int(topology.route(a / cores_per_chip, b / cores_per_chip).size());
}

namespace {

using Effect = std::tuple<int, int, double, int>;  // core (local index), category, bytes, when

ClusterReduction none(std::string why) {
  ClusterReduction r;
  r.reason = "none: " + std::move(why);
  return r;
}

/// The reduction's bookkeeping while it checks congruence.
class Reducer {
 public:
  Reducer(const TaskGraph& g, const CollectivePlanner& planner, const NetworkState& network)
      : g_(g), planner_(planner), network_(network) {}

  ClusterReduction run() {
    for (int id = 0; id < g_.size(); ++id)
      if (g_.task(id).host) return none("functional mode runs every task's math");
    if (std::string why = find_clusters(); !why.empty()) return none(why);
    if (std::string why = pair_tasks(); !why.empty()) return none(why);
    if (std::string why = check_congruence(); !why.empty()) return none(why);
    sort_into_kinds();
    ClusterReduction r = build();
    if (std::string why = check_collectives_against_transfers(r); !why.empty()) return none(why);
    r.applied = true;
    return r;
  }

 private:
  /// The core a task belongs to: a compute task's, a transfer's source, a local collective's
  /// first member; -1 for a shared collective (one over several clusters, which stays whole).
  int anchor(int id) const { return anchors_[std::size_t(id)]; }
  int find_anchor(int id) const {
    const Task& t = g_.task(id);
    if (t.kind == TaskKind::Compute) return t.core;
    if (t.kind == TaskKind::Transfer) return t.src_core;
    if (!local_collective_[std::size_t(id)]) return -1;
    return t.groups.empty() ? t.group.front() : t.groups.front().front();
  }
  bool communication(int id) const {
    return g_.task(id).kind == TaskKind::Transfer || local_collective_[std::size_t(id)];
  }

  /// The links a local collective's rings cross.
  std::vector<long long> ring_links(const Task& t) const {
    std::set<long long> links;
    const int cpc = planner_.cores_per_chip();
    for (const auto& group : t.collective_groups())
      for (const auto& phase : planner_.plan(t, group))
        for (const auto& ring : phase.rings)
          for (std::size_t i = 0; i < ring.cores.size(); ++i)
            for (long long l :
                 flow_links(planner_.topology(), cpc, ring.cores[i], ring.cores[(i + 1) % ring.cores.size()]))
              links.insert(l);
    return {links.begin(), links.end()};
  }

  std::string find_clusters() {
    const int cores = g_.cores();
    Components c(cores);
    std::vector<bool> active(std::size_t(cores), false);
    std::map<long long, int> link_user;
    links_.resize(std::size_t(g_.size()));
    local_collective_.assign(std::size_t(g_.size()), false);
    anchors_.resize(std::size_t(g_.size()));
    for (int id = 0; id < g_.size(); ++id) anchors_[std::size_t(id)] = find_anchor(id);
    join_transfers(c, active, link_user);
    for (int id = 0; id < g_.size(); ++id)
      if (g_.task(id).kind == TaskKind::Collective)
        for (int m : g_.task(id).members()) active[std::size_t(m)] = true;
    join_dependencies(c);
    join_local_collectives(c, active, link_user);
    return number_clusters(c, active);
  }

  /// Joins `core`'s cluster to the clusters of whatever already uses one of `links`.
  static void occupy(Components& c, std::map<long long, int>& link_user, const std::vector<long long>& links,
                     int core) {
    for (long long l : links) {
      auto [it, fresh] = link_user.emplace(l, core);
      if (!fresh) c.join(core, it->second);
    }
  }

  /// Every core that computes or transfers is active; a transfer joins its two cores, and the
  /// links it crosses join it to whatever else crosses them.
  void join_transfers(Components& c, std::vector<bool>& active, std::map<long long, int>& link_user) {
    const int cpc = planner_.cores_per_chip();
    for (int id = 0; id < g_.size(); ++id) {
      const Task& t = g_.task(id);
      if (t.kind == TaskKind::Compute) active[std::size_t(t.core)] = true;
      if (t.kind != TaskKind::Transfer) continue;
      active[std::size_t(t.src_core)] = active[std::size_t(t.dst_core)] = true;
      c.join(t.src_core, t.dst_core);
      if (t.src_core == t.dst_core || t.bytes <= 0) continue;
      links_[std::size_t(id)] = flow_links(planner_.topology(), cpc, t.src_core, t.dst_core);
      occupy(c, link_user, links_[std::size_t(id)], t.src_core);
    }
  }

  /// A collective over every cluster (a data-parallel gradient all-reduce, a mesh family) stays
  /// whole, shared by all; one over some of them joins them (a tensor-parallel stage's partial
  /// sums join the stage's cores) and then belongs to the cluster, its rings' links joining it
  /// to whatever else uses them. The collectives over the fewest clusters join first, round by
  /// round, so that one over every replica is not taken for one over some cores.
  void join_local_collectives(Components& c, const std::vector<bool>& active,
                              std::map<long long, int>& link_user) {
    for (bool changed = true; changed;) {
      changed = false;
      std::set<int> parts;
      for (int core = 0; core < g_.cores(); ++core)
        if (active[std::size_t(core)]) parts.insert(c.root(core));
      std::map<int, std::size_t> touching;  // collective -> the clusters it touches
      std::size_t fewest = parts.size();
      for (int id = 0; id < g_.size(); ++id) {
        if (g_.task(id).kind != TaskKind::Collective || local_collective_[std::size_t(id)]) continue;
        std::set<int> touched;
        for (int m : g_.task(id).members()) touched.insert(c.root(m));
        touching[id] = touched.size();
        if (touched.size() < parts.size()) fewest = std::min(fewest, touched.size());
      }
      for (const auto& [id, n] : touching) {
        if (n >= parts.size() || n != fewest) continue;
        const Task& t = g_.task(id);
        const auto members = t.members();
        for (int m : members) c.join(m, members.front());
        local_collective_[std::size_t(id)] = true;
        anchors_[std::size_t(id)] = find_anchor(id);
        links_[std::size_t(id)] = ring_links(t);
        occupy(c, link_user, links_[std::size_t(id)], members.front());
        changed = true;
      }
      if (changed) join_dependencies(c);
    }
  }

  /// The active cores' clusters, numbered (each core's cluster and place in it); why the step
  /// cannot be reduced, or "".
  std::string number_clusters(Components& c, const std::vector<bool>& active) {
    const int cores = g_.cores();
    std::map<int, std::vector<int>> by_root;
    for (int core = 0; core < cores; ++core)
      if (active[std::size_t(core)]) by_root[c.root(core)].push_back(core);
    for (auto& [root, members] : by_root) clusters_.push_back(std::move(members));
    std::sort(clusters_.begin(), clusters_.end());
    if (clusters_.size() < 2) return "the step is one cluster of cores";
    for (const auto& k : clusters_)
      if (k.size() != clusters_.front().size())
        return "its clusters of cores differ in size (" + std::to_string(clusters_.front().size()) + " and " +
               std::to_string(k.size()) + ")";
    cluster_of_.assign(std::size_t(cores), -1);
    local_.assign(std::size_t(cores), -1);
    for (std::size_t k = 0; k < clusters_.size(); ++k)
      for (std::size_t j = 0; j < clusters_[k].size(); ++j) {
        cluster_of_[std::size_t(clusters_[k][j])] = int(k);
        local_[std::size_t(clusters_[k][j])] = int(j);
      }
    // A local collective whose cluster merged with another's stays local.
    for (int id = 0; id < g_.size(); ++id)
      if (local_collective_[std::size_t(id)]) {
        const auto members = g_.task(id).members();
        for (int m : members)
          if (cluster_of_[std::size_t(m)] != cluster_of_[std::size_t(members.front())])
            return "a collective spans clusters";
      }
    return "";
  }

  /// Joins the cores of tasks a dependency links (shared collectives aside).
  void join_dependencies(Components& c) const {
    for (int u = 0; u < g_.size(); ++u) {
      if (anchor(u) < 0) continue;
      g_.for_each_successor(u, [&](int v) {
        if (anchor(v) >= 0) c.join(anchor(u), anchor(v));
      });
    }
  }

  /// Pairs every task with the first cluster's: compute tasks by program position, transfers by
  /// their local endpoints and order.
  std::string pair_tasks() {
    image_.assign(std::size_t(g_.size()), -1);
    const auto& first = clusters_.front();
    for (const auto& k : clusters_)
      for (std::size_t j = 0; j < k.size(); ++j) {
        const auto& mine = g_.program(k[j]);
        const auto& theirs = g_.program(first[j]);
        if (mine.size() != theirs.size()) return "its clusters' cores run programs of different lengths";
        for (std::size_t p = 0; p < mine.size(); ++p) image_[std::size_t(mine[p])] = theirs[p];
      }
    // Transfers by their local endpoints, local collectives by their groups' local members.
    std::vector<std::map<std::vector<int>, std::vector<int>>> comms(clusters_.size());
    for (int id = 0; id < g_.size(); ++id) {
      if (!communication(id)) continue;
      std::vector<int> key;
      for (int m : g_.task(id).members()) key.push_back(local_[std::size_t(m)]);
      key.push_back(-int(g_.task(id).kind) - 1);
      if (g_.task(id).kind == TaskKind::Collective)
        for (const auto& group : g_.task(id).collective_groups()) key.push_back(-int(group.size()) - 10);
      comms[std::size_t(cluster_of_[std::size_t(anchor(id))])][key].push_back(id);
    }
    for (std::size_t k = 0; k < clusters_.size(); ++k) {
      if (comms[k].size() != comms[0].size()) return "its clusters' transfers or collectives differ";
      for (const auto& [key, ids] : comms[k]) {
        auto it = comms[0].find(key);
        if (it == comms[0].end() || it->second.size() != ids.size())
          return "its clusters' transfers or collectives differ";
        for (std::size_t n = 0; n < ids.size(); ++n) image_[std::size_t(ids[n])] = it->second[n];
      }
    }
    return "";
  }

  /// A task's memory effects with cores as local indices, sorted.
  std::vector<Effect> effects(const Task& t, int cluster) const {
    std::vector<Effect> e;
    for (const auto& m : t.memory)
      if (cluster < 0 || cluster_of_[std::size_t(m.core)] == cluster)
        e.emplace_back(cluster < 0 ? m.core : local_[std::size_t(m.core)], int(m.category), m.bytes,
                       int(m.when));
    std::sort(e.begin(), e.end());
    return e;
  }

  /// Whether a task's memory effects are the same in every cluster (cores as local indices):
  /// its effects sorted into their clusters in one pass.
  bool alike_in_every_cluster(const Task& t) const {
    std::vector<std::vector<Effect>> by_cluster(clusters_.size());
    for (const auto& m : t.memory)
      if (const int k = cluster_of_[std::size_t(m.core)]; k >= 0)
        by_cluster[std::size_t(k)].emplace_back(local_[std::size_t(m.core)], int(m.category), m.bytes,
                                                int(m.when));
    for (auto& e : by_cluster) std::sort(e.begin(), e.end());
    for (std::size_t k = 1; k < by_cluster.size(); ++k)
      if (by_cluster[k] != by_cluster[0]) return false;
    return true;
  }

  bool same_task(const Task& a, const Task& b, int ka, int kb) const {
    if (a.kind != b.kind || a.seconds != b.seconds || a.bytes != b.bytes || a.op != b.op) return false;
    if (a.memory.size() != b.memory.size()) return false;
    return a.memory.empty() || effects(a, ka) == effects(b, kb);
  }

  /// Per cluster: for each link its transfers use, the kind of link and the first cluster's
  /// images of those transfers; sorted.
  std::vector<std::pair<bool, std::vector<int>>> sharing(std::size_t k) const {
    std::map<long long, std::vector<int>> on_link;
    for (int id : comms_of_[k])
      for (long long l : links_[std::size_t(id)]) on_link[l].push_back(image_[std::size_t(id)]);
    std::vector<std::pair<bool, std::vector<int>>> s;
    for (auto& [l, ids] : on_link) {
      std::sort(ids.begin(), ids.end());
      s.emplace_back(l < 0, std::move(ids));
    }
    std::sort(s.begin(), s.end());
    return s;
  }

  std::string check_congruence() {
    comms_of_.resize(clusters_.size());
    for (int id = 0; id < g_.size(); ++id) {
      const Task& t = g_.task(id);
      if (anchor(id) < 0) continue;
      const int k = cluster_of_[std::size_t(anchor(id))];
      const Task& i = g_.task(image_[std::size_t(id)]);
      if (!same_task(t, i, k, 0)) return "the task " + t.name + " differs from its counterpart " + i.name;
      if (communication(id)) {
        comms_of_[std::size_t(k)].push_back(id);
        const auto& a = links_[std::size_t(id)];
        const auto& b = links_[std::size_t(image_[std::size_t(id)])];
        const auto onchip = [](const std::vector<long long>& l) {
          return std::count_if(l.begin(), l.end(), [](long long x) { return x < 0; });
        };
        if (a.size() != b.size() || onchip(a) != onchip(b))
          return "the task " + t.name + " crosses other links than its counterpart " + i.name;
      }
    }
    const auto first_sharing = sharing(0);
    for (std::size_t k = 1; k < clusters_.size(); ++k)
      if (sharing(k) != first_sharing) return "its clusters' transfers share links differently";
    for (std::size_t k = 1; k < clusters_.size(); ++k)
      for (std::size_t j = 0; j < clusters_[k].size(); ++j)
        if (g_.resident()[std::size_t(clusters_[k][j])] != g_.resident()[std::size_t(clusters_[0][j])])
          return "its clusters' cores hold different resident state";
    for (int id = 0; id < g_.size(); ++id) {
      const Task& t = g_.task(id);
      if (anchor(id) >= 0 || t.memory.empty()) continue;
      if (!alike_in_every_cluster(t))
        return "a collective (" + t.name + ") changes its clusters' memory unlike";
    }
    return check_dependencies();
  }

  /// The task a step's task stands for in the first cluster: itself for a shared collective.
  int mapped(int id) const { return image_[std::size_t(id)] < 0 ? id : image_[std::size_t(id)]; }

  /// The clusters by the speeds of their chips (by core, in cluster order): congruent clusters of
  /// one kind run alike; the first cluster of each kind is simulated for all of its kind.
  void sort_into_kinds() {
    const int cpc = planner_.cores_per_chip();
    std::map<std::vector<double>, int> first_of_kind;
    representative_.assign(clusters_.size(), 0);
    for (std::size_t k = 0; k < clusters_.size(); ++k) {
      std::vector<double> speeds;
      for (int core : clusters_[k]) {
        speeds.push_back(network_.chip_scale(core / cpc));
        speeds.push_back(network_.hbm_scale(core / cpc));
      }
      representative_[k] = first_of_kind.emplace(speeds, int(k)).first->second;
    }
    kinds_ = int(first_of_kind.size());
    counterpart_.assign(clusters_.size(), {});
    for (int id = 0; id < g_.size(); ++id)
      if (anchor(id) >= 0) {
        const int k = cluster_of_[std::size_t(anchor(id))];
        if (representative_[std::size_t(k)] == k) counterpart_[std::size_t(k)][mapped(id)] = id;
      }
  }

  /// The task a step's task runs as: itself for a shared collective, else its counterpart in the
  /// simulated cluster of its cluster's kind.
  int simulated_as(int id) const {
    if (image_[std::size_t(id)] < 0) return id;
    const int k = representative_[std::size_t(cluster_of_[std::size_t(anchor(id))])];
    return k == 0 ? image_[std::size_t(id)] : counterpart_[std::size_t(k)].at(mapped(id));
  }
  bool simulated_cluster(int k) const { return k >= 0 && representative_[std::size_t(k)] == k; }

  std::string check_dependencies() const {
    std::unordered_set<std::uint64_t> kept;
    auto key = [](int u, int v) { return (std::uint64_t(std::uint32_t(u)) << 32) | std::uint32_t(v); };
    for (int u = 0; u < g_.size(); ++u) {
      if (mapped(u) != u) continue;
      g_.for_each_successor(u, [&](int v) {
        if (mapped(v) == v) kept.insert(key(u, v));
      });
    }
    std::string missing;
    for (int u = 0; u < g_.size() && missing.empty(); ++u)
      g_.for_each_successor(u, [&](int v) {
        if (missing.empty() && !kept.count(key(mapped(u), mapped(v))))
          missing = "a dependency (" + g_.task(u).name + " -> " + g_.task(v).name +
                    ") has no counterpart in the first cluster";
      });
    return missing;
  }

  ClusterReduction build() const {
    ClusterReduction r;
    r.clusters = int(clusters_.size());
    r.kinds = kinds_;
    r.cores_per_cluster = int(clusters_.front().size());
    r.graph = TaskGraph(g_.cores());
    r.simulated_task.assign(std::size_t(g_.size()), -1);
    r.simulated_core.resize(std::size_t(g_.cores()));
    r.cluster_of_core = cluster_of_;
    for (int c = 0; c < g_.cores(); ++c) {
      const int k = cluster_of_[std::size_t(c)];
      r.simulated_core[std::size_t(c)] =
          k < 0
              ? c
              : clusters_[std::size_t(representative_[std::size_t(k)])][std::size_t(local_[std::size_t(c)])];
      if (k >= 0 && !simulated_cluster(k)) continue;
      for (int cat = 0; cat < kMemoryCategories; ++cat)
        r.graph.resident(c, MemoryCategory(cat), g_.resident()[std::size_t(c)][std::size_t(cat)]);
    }
    for (int id = 0; id < g_.size(); ++id) {
      if (simulated_as(id) != id) continue;
      Task t = g_.task(id);
      // Memory effects on the other clusters' cores are theirs to mirror.
      std::erase_if(t.memory, [&](const MemoryEffect& m) {
        const int k = cluster_of_[std::size_t(m.core)];
        return k >= 0 && !simulated_cluster(k);
      });
      r.simulated_task[std::size_t(id)] = r.graph.add(std::move(t));
      r.step_task.push_back(id);
    }
    for (int id = 0; id < g_.size(); ++id)
      if (r.simulated_task[std::size_t(id)] < 0)
        r.simulated_task[std::size_t(id)] = r.simulated_task[std::size_t(simulated_as(id))];
    for (int u = 0; u < g_.size(); ++u) {
      if (simulated_as(u) != u) continue;
      for (int v : g_.successors(u))
        if (simulated_as(v) == v)
          r.graph.depend(r.simulated_task[std::size_t(u)], r.simulated_task[std::size_t(v)]);
    }
    add_orbits(r);
    return r;
  }

  /// By simulated task, the step's tasks it stands for (by cluster) and the links they cross.
  void add_orbits(ClusterReduction& r) const {
    r.orbit.resize(std::size_t(r.graph.size()));
    for (int id = 0; id < g_.size(); ++id) {
      auto& orbit = r.orbit[std::size_t(r.simulated_task[std::size_t(id)])];
      if (anchor(id) < 0) {
        orbit = {id};
        continue;
      }
      orbit.resize(clusters_.size(), -1);  // each cluster's counterpart of its kind, by cluster
      orbit[std::size_t(cluster_of_[std::size_t(anchor(id))])] = id;
    }
    for (int id = 0; id < g_.size(); ++id)
      if (communication(id)) {
        auto& links = r.orbit_links[r.simulated_task[std::size_t(id)]];
        links.insert(links_[std::size_t(id)].begin(), links_[std::size_t(id)].end());
      }
  }

  /// Every transfer sharing a link with a collective (the collective's every group; every
  /// cluster's transfers) must be ordered with it: checked on the reduced graph, where a path
  /// between two tasks exists exactly when one exists between their counterparts.
  std::string check_collectives_against_transfers(const ClusterReduction& r) const {
    std::map<long long, std::set<int>>
        transfers_on;  // link -> simulated communications whose orbit crosses it
    for (const auto& [sim_id, links] : r.orbit_links)
      for (long long l : links) transfers_on[l].insert(sim_id);
    if (transfers_on.empty()) return "";
    std::map<std::vector<std::vector<int>>, std::vector<int>> families;
    for (int id = 0; id < r.graph.size(); ++id)
      if (anchor(r.step_task[std::size_t(id)]) < 0)
        families[r.graph.task(id).collective_groups()].push_back(id);
    const int cpc = planner_.cores_per_chip();
    for (const auto& [groups, tasks] : families) {
      const Task& t = r.graph.task(tasks.front());
      std::set<int> meeting;
      for (const auto& group : groups)
        for (const auto& phase : planner_.plan(t, group))
          for (const auto& ring : phase.rings)
            for (std::size_t i = 0; i < ring.cores.size(); ++i)
              for (long long l : flow_links(planner_.topology(), cpc, ring.cores[i],
                                            ring.cores[(i + 1) % ring.cores.size()]))
                if (auto it = transfers_on.find(l); it != transfers_on.end())
                  meeting.insert(it->second.begin(), it->second.end());
      if (!meeting.empty() && !r.graph.ordered(tasks, std::vector<int>(meeting.begin(), meeting.end())))
        return "a collective (" + t.name + ") shares links with transfers it may run beside";
    }
    return "";
  }

  const TaskGraph& g_;
  const CollectivePlanner& planner_;
  const NetworkState& network_;
  std::vector<std::vector<long long>> links_;  ///< by transfer or local collective: the links it crosses
  std::vector<std::vector<int>> clusters_;     ///< cores of each cluster, ascending; clusters by first core
  std::vector<int> cluster_of_, local_;        ///< by core: its cluster (-1: idle) and index in it
  std::vector<int> image_;  ///< by task: the first cluster's counterpart (-1: a shared collective)
  std::vector<std::vector<int>> comms_of_;  ///< by cluster: its transfers and local collectives
  std::vector<bool> local_collective_;      ///< by task: a collective among one cluster's cores
  std::vector<int> anchors_;                ///< by task: its anchor (find_anchor), kept current
  std::vector<int> representative_;         ///< by cluster: the simulated cluster of its kind (chip speeds)
  int kinds_ = 1;
  /// By simulated cluster (other than the first): the first cluster's task -> this cluster's.
  std::vector<std::map<int, int>> counterpart_;
};

}  // namespace

ClusterReduction reduce_to_one_cluster(const TaskGraph& graph, const CollectivePlanner& planner,
                                       const NetworkState& network) {
  if (!network.links_uniform()) return none("the links are not uniform");
  return Reducer(graph, planner, network).run();
}

}  // namespace tpusim::sim
