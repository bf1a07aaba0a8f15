#include "sim/engine.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <simgrid/s4u.hpp>

#include "hardware/errors.hpp"
#include "hardware/torus.hpp"
#include "sim/collective_plan.hpp"

namespace tpusim::sim {
namespace sg = simgrid::s4u;

namespace {

bool g_engine_used = false;

/// Creates the one SimGrid engine of this process with the network model pinned to what ICI
/// is: CM02 without cross-traffic or TCP window (see shared/SIMGRID.md).
std::unique_ptr<sg::Engine> make_engine() {
  if (g_engine_used)
    throw SimulationError("SimGrid allows one simulation per process; this process already ran one");
  g_engine_used = true;
  static int argc = 3;
  static char arg0[] = "tpusim";
  static char arg1[] = "--log=root.thres:critical";
  static char arg2[] = "--log=xbt_cfg.thres:critical";
  static char* argv[] = {arg0, arg1, arg2, nullptr};
  auto engine = std::make_unique<sg::Engine>(&argc, argv);
  sg::Engine::set_config("network/model:CM02");
  sg::Engine::set_config("network/crosstraffic:0");
  sg::Engine::set_config("network/TCP-gamma:0");
  // Actors run shallow code (a core's program, a ring's steps, functional mode's host math on
  // heap buffers): 1 MiB stacks instead of SimGrid's 8 MiB cost less to map and fault in (a
  // spatially partitioned SSD on v3-1024: 10.9 -> 9.2 s); the guard page stays.
  sg::Engine::set_config("contexts/stack-size:1024");
  return engine;
}

/// The slice as a SimGrid platform: hosts per core, directed ICI and on-chip links, and
/// routes for the core pairs that will talk.
class Platform {
 public:
  Platform(const HardwareSpec& hw, const SliceSpec& slice) : torus_(slice), cpc_(hw.chip.cores) {
    zone_ = sg::create_full_zone("ici");
    const int cores = torus_.chips() * cpc_;
    hosts_.resize(cores);
    for (int c = 0; c < cores; ++c) hosts_[c] = zone_->create_host("core" + std::to_string(c), 1e12)->seal();
    links_.assign(std::size_t(torus_.chips()) * 4, nullptr);
    for (int r = 0; r < torus_.chips(); ++r)
      for (int d = 0; d < 4; ++d)
        if (torus_.link_exists(r, Direction(d))) {
          links_[Torus::link_id(r, Direction(d))] =
              zone_
                  ->create_link("ici" + std::to_string(r) + "_" + std::to_string(d),
                                hw.chip.ici_bandwidth_bytes_per_s)
                  ->set_latency(hw.chip.ici_latency_s)
                  ->seal();
        }
    onchip_.assign(std::size_t(cores) * cpc_, nullptr);
    for (int r = 0; r < torus_.chips(); ++r)
      for (int i = 0; i < cpc_; ++i)
        for (int j = 0; j < cpc_; ++j)
          if (i != j) {
            onchip_[std::size_t(r * cpc_ + i) * cpc_ + j] =
                zone_
                    ->create_link(
                        "chip" + std::to_string(r) + "_" + std::to_string(i) + "to" + std::to_string(j),
                        hw.chip.onchip_bandwidth_bytes_per_s)
                    ->set_latency(hw.chip.onchip_latency_s)
                    ->seal();
          }
  }

  void add_route(int src, int dst) {
    if (src == dst || !routed_.insert({src, dst}).second) return;
    std::vector<sg::LinkInRoute> route;
    const int sc = src / cpc_, dc = dst / cpc_;
    if (sc == dc) {
      route.emplace_back(onchip_[std::size_t(src) * cpc_ + dst % cpc_]);
    } else {
      for (int id : torus_.route(sc, dc)) route.emplace_back(links_[id]);
    }
    zone_->add_route(hosts_[src]->get_netpoint(), hosts_[dst]->get_netpoint(), nullptr, nullptr, route,
                     false);
  }

  void seal() { zone_->seal(); }
  sg::Host* host(int core) const { return hosts_[core]; }
  const Torus& torus() const { return torus_; }
  int cores_per_chip() const { return cpc_; }

 private:
  Torus torus_;
  int cpc_;
  sg::NetZone* zone_ = nullptr;
  std::vector<sg::Host*> hosts_;
  std::vector<sg::Link*> links_;
  std::vector<sg::Link*> onchip_;
  std::set<std::pair<int, int>> routed_;
};

/// Memory mappings the kernel allows this process (vm.max_map_count; Linux's default when the
/// file cannot be read).
long max_memory_mappings() {
  std::ifstream in("/proc/sys/vm/max_map_count");
  long n = 0;
  return (in >> n) && n > 0 ? n : 65530;
}

/// SimGrid's and the libraries' own memory mappings, kept free of actor stacks.
constexpr long kReservedMappings = 2048;

class Runner {
 public:
  Runner(const TaskGraph& g, const HardwareSpec& hw, const SliceSpec& slice, const EngineOptions& opt)
      : g_(g), opt_(opt), platform_(hw, slice), memory_(g.cores(), hw.core.usable_hbm_bytes()) {
    // Each actor's stack is a mapping and a guard page.
    actor_limit_ = opt.max_simultaneous_actors > 0 ? opt.max_simultaneous_actors
                                                   : (max_memory_mappings() - kReservedMappings) / 2;
    const int n = g.size();
    remaining_.resize(n);
    for (int id = 0; id < n; ++id) remaining_[id] = g.in_degree(id);
    waiting_.assign(g.cores(), -1);
    for (int c = 0; c < g.cores(); ++c) semaphores_.push_back(sg::Semaphore::create(0));
    result_.tasks.assign(n, TaskTiming{});
    result_.cores.assign(g.cores(), CoreStats{});
    for (int c = 0; c < g.cores(); ++c) memory_.set_resident(c, g.resident()[c]);

    bool symmetric = opt.symmetric_collectives;
    for (int id = 0; id < n; ++id) {
      const Task& t = g.task(id);
      if (t.kind == TaskKind::Transfer) symmetric = false;
      if (t.kind == TaskKind::Collective && int(t.members().size()) != g.cores()) symmetric = false;
    }
    if (symmetric) symmetric = families_are_independent(g);
    result_.symmetric_collectives = symmetric;
    plans_.resize(n);
    for (int id = 0; id < n; ++id) {
      const Task& t = g.task(id);
      if (t.kind == TaskKind::Transfer) platform_.add_route(t.src_core, t.dst_core);
      if (t.kind != TaskKind::Collective) continue;
      // The groups of a family run together: their rings merge phase by phase.
      auto groups = t.collective_groups();
      if (symmetric) {
        std::vector<std::vector<int>> cluster;
        for (std::size_t gi : representatives_.at(groups)) cluster.push_back(groups[gi]);
        groups = std::move(cluster);
      }
      for (const auto& group : groups) {
        auto plan = plan_collective(platform_.torus(), platform_.cores_per_chip(), t.op, group, t.bytes);
        if (plans_[id].size() < plan.size()) plans_[id].resize(plan.size());
        for (std::size_t p = 0; p < plan.size(); ++p) {
          if (plans_[id][p].name.empty()) plans_[id][p].name = plan[p].name;
          for (auto& ring : plan[p].rings) plans_[id][p].rings.push_back(std::move(ring));
        }
      }
      for (auto& phase : plans_[id]) {
        if (symmetric) {
          std::erase_if(phase.rings, [](const PlannedRing& r) { return !r.representative; });
        }
        for (const auto& ring : phase.rings)
          for (std::size_t i = 0; i < ring.cores.size(); ++i)
            platform_.add_route(ring.cores[i], ring.cores[(i + 1) % ring.cores.size()]);
      }
    }
    platform_.seal();
  }

  /// What each group of a collective occupies: the links its rings use (on-chip hops as
  /// negative ids) and its shape (ring sizes, chunks, steps and hop counts), which congruent
  /// groups share.
  struct Footprints {
    std::vector<std::set<long long>> links;
    std::vector<std::vector<double>> shapes;
  };
  Footprints footprints(const Task& t, const std::vector<std::vector<int>>& groups) const {
    const Torus& torus = platform_.torus();
    const int cpc = platform_.cores_per_chip();
    Footprints f{std::vector<std::set<long long>>(groups.size()),
                 std::vector<std::vector<double>>(groups.size())};
    for (std::size_t gi = 0; gi < groups.size(); ++gi)
      for (const auto& phase : plan_collective(torus, cpc, t.op, groups[gi], t.bytes))
        for (const auto& ring : phase.rings) {
          f.shapes[gi].insert(f.shapes[gi].end(),
                              {double(ring.cores.size()), ring.chunk_bytes, double(ring.steps)});
          for (std::size_t i = 0; i < ring.cores.size(); ++i) {
            const int a = ring.cores[i], b = ring.cores[(i + 1) % ring.cores.size()];
            const auto route = torus.route(a / cpc, b / cpc);
            f.shapes[gi].push_back(double(route.size()));
            if (a / cpc == b / cpc) f.links[gi].insert(-1 - (long long)(a)*cpc - b % cpc);  // on-chip a -> b
            for (int l : route) f.links[gi].insert(l);
          }
        }
    return f;
  }

  /// Groups joined by a shared link (union-find over groups), each cluster's groups in order.
  static std::map<std::size_t, std::vector<std::size_t>> clusters(
      const std::vector<std::set<long long>>& links) {
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
  static bool congruent(const std::map<std::size_t, std::vector<std::size_t>>& clusters,
                        const std::vector<std::vector<double>>& shapes) {
    const auto& first = clusters.begin()->second;
    for (const auto& [r, members] : clusters) {
      if (members.size() != first.size()) return false;
      for (std::size_t k = 0; k < members.size(); ++k)
        if (shapes[members[k]] != shapes[first[k]]) return false;
    }
    return true;
  }

  /// The representative simulation of a collective is exact when its groups fall into
  /// clusters (groups linked by shared links: e.g. the two cores of each chip in different
  /// groups over the same column) that are congruent (the same rings, chunks and hop counts)
  /// and use disjoint links, and when collectives with different groups use disjoint links or
  /// never run at once: then every cluster runs the same, undisturbed by the others, and one
  /// cluster (its groups' first rows) stands for all. Fills `representatives_` with each
  /// family's first cluster.
  bool families_are_independent(const TaskGraph& g) {
    using Family = std::vector<std::vector<int>>;
    std::map<Family, std::set<long long>> family_links;
    std::vector<std::pair<Family, Family>> sharing;
    for (int id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      if (t.kind != TaskKind::Collective) continue;
      const auto groups = t.collective_groups();
      if (family_links.count(groups)) continue;
      const Footprints f = footprints(t, groups);
      const auto c = clusters(f.links);
      if (!congruent(c, f.shapes)) return false;
      std::set<long long> all;
      for (const auto& l : f.links) all.insert(l.begin(), l.end());
      for (const auto& [other, other_links] : family_links)
        if (std::any_of(all.begin(), all.end(), [&](long long l) { return other_links.count(l) > 0; }))
          sharing.push_back({groups, other});
      family_links[groups] = std::move(all);
      representatives_[groups] = c.begin()->second;
    }
    return sharing_families_never_overlap(g, sharing);
  }

  /// Families sharing links must never run at once: each one's collectives all before or all
  /// after each of the other's (e.g. weight-gradient reductions waiting for the whole backward,
  /// and the activations' collectives within it).
  static bool sharing_families_never_overlap(
      const TaskGraph& g,
      const std::vector<std::pair<std::vector<std::vector<int>>, std::vector<std::vector<int>>>>& sharing) {
    if (sharing.empty()) return true;
    std::map<std::vector<std::vector<int>>, std::vector<int>> tasks;
    for (int id = 0; id < g.size(); ++id)
      if (g.task(id).kind == TaskKind::Collective) tasks[g.task(id).collective_groups()].push_back(id);
    for (const auto& [x, y] : sharing)
      if (!g.ordered(tasks.at(x), tasks.at(y))) return false;
    return true;
  }

  void start_actors() {
    long first = 0;  // the actors started here, refused before any exists
    for (int c = 0; c < g_.cores(); ++c) first += g_.program(c).empty() ? 0 : 1;
    for (int id = 0; id < g_.size(); ++id)
      first += remaining_[id] == 0 && g_.task(id).kind != TaskKind::Compute;
    if (first > actor_limit_) throw out_of_actors();
    for (int c = 0; c < g_.cores(); ++c)
      if (!g_.program(c).empty())
        spawn("core" + std::to_string(c), platform_.host(c), [this, c] { run_core(c); });
    for (int id = 0; id < g_.size(); ++id)
      if (remaining_[id] == 0 && g_.task(id).kind != TaskKind::Compute) launch(id);
  }

  SimResult finish() {
    if (!error_.empty()) {
      if (out_of_actors_) throw ResourceError(error_);
      throw SimulationError(error_);
    }
    if (done_ != g_.size()) {
      std::string names;
      int shown = 0;
      for (int id = 0; id < g_.size() && shown < 5; ++id)
        if (result_.tasks[id].end_s < 0) names += (shown++ ? ", " : "") + g_.task(id).name;
      throw SimulationError("deadlock: " + std::to_string(g_.size() - done_) + " of " +
                            std::to_string(g_.size()) + " tasks never ran (first: " + names + ")");
    }
    for (int id = 0; id < g_.size(); ++id)
      result_.step_time_s = std::max(result_.step_time_s, result_.tasks[id].end_s);
    for (int c = 0; c < g_.cores(); ++c) {
      result_.cores[c].peak_hbm_bytes = memory_.peak(c);
      result_.cores[c].hbm_at_peak = memory_.at_peak(c);
      result_.cores[c].peak_at_s = memory_.peak_at(c);
      result_.cores[c].peak_task = memory_.peak_task(c);
    }
    result_.hbm_capacity_bytes = memory_.capacity();
    result_.overflow = memory_.overflow();
    result_.fits = !memory_.overflow().happened;
    return std::move(result_);
  }

 private:
  template <class F>
  void guarded(F&& body) {
    // An exception escaping an actor would abort the process: record it and stop this actor.
    try {
      body();
    } catch (const std::exception& e) {
      if (error_.empty()) error_ = e.what();
    }
  }

  ResourceError out_of_actors() {
    out_of_actors_ = true;
    return ResourceError(
        "the simulation needs more than " + std::to_string(actor_limit_) +
        " SimGrid actors at once (cores, transfers, collectives and their rings), more than " +
        "this machine's memory mappings allow (vm.max_map_count = " + std::to_string(max_memory_mappings()) +
        "): simulate fewer cores or fewer concurrent collectives, or raise vm.max_map_count");
  }

  /// An actor running `body`, unless this machine could not hold one more actor's stack.
  sg::ActorPtr spawn(const std::string& name, sg::Host* host, std::function<void()> body) {
    if (live_actors_ >= actor_limit_) throw out_of_actors();
    ++live_actors_;
    return sg::Actor::create(name, host, [this, body = std::move(body)] {
      guarded(body);
      --live_actors_;
    });
  }

  void run_core(int core) {
    for (int id : g_.program(core)) {
      if (remaining_[id] > 0) {
        waiting_[core] = id;
        semaphores_[core]->acquire();
        if (!error_.empty()) return;
      }
      begin(id);
      const Task& t = g_.task(id);
      if (t.seconds > 0) sg::this_actor::sleep_for(t.seconds);
      result_.cores[core].busy_s += t.seconds;
      end(id);
    }
  }

  void launch(int id) {
    const Task& t = g_.task(id);
    const int where = t.members().front();
    spawn(t.name, platform_.host(where), [this, id] { run_communication(id); });
  }

  void run_communication(int id) {
    const Task& t = g_.task(id);
    begin(id);
    if (t.kind == TaskKind::Transfer) {
      if (t.src_core != t.dst_core && t.bytes > 0) play_step({{t.src_core, t.dst_core, t.bytes}}, id);
    } else {
      // Each ring of a phase runs at its own pace in its own actor (a SimGrid actor handles
      // thousands of simultaneous comms poorly); the next phase waits for every ring.
      for (const Phase& phase : plans_[id]) {
        std::vector<sg::ActorPtr> rings;
        for (const auto& ring : phase.rings) {
          rings.push_back(
              spawn(t.name, platform_.host(ring.cores.front()), [this, id, &ring] { play_ring(ring, id); }));
        }
        for (auto& actor : rings) actor->join();
      }
    }
    end(id);
  }

  struct FlowSpec {
    int src, dst;
    double bytes;
  };

  void play_ring(const PlannedRing& ring, int task) {
    std::vector<FlowSpec> flows;
    for (std::size_t i = 0; i < ring.cores.size(); ++i)
      flows.push_back({ring.cores[i], ring.cores[(i + 1) % ring.cores.size()], ring.chunk_bytes});
    for (int s = 0; s < ring.steps; ++s) play_step(flows, task);
  }

  /// Starts every flow at once and returns when all have arrived.
  void play_step(const std::vector<FlowSpec>& flows, int task) {
    std::vector<sg::CommPtr> comms;
    comms.reserve(flows.size());
    const double t0 = sg::Engine::get_clock();
    for (const auto& f : flows) {
      const auto bytes = std::uint64_t(std::max(1.0, std::round(f.bytes)));
      comms.push_back(sg::Comm::sendto_async(platform_.host(f.src), platform_.host(f.dst), bytes));
    }
    result_.flows_simulated += (long long)flows.size();
    if (!opt_.record_flows) {
      sg::Comm::wait_all(comms);
      return;
    }
    std::vector<std::size_t> index(comms.size());
    for (std::size_t i = 0; i < index.size(); ++i) index[i] = i;
    while (!comms.empty()) {
      const auto k = std::size_t(sg::Comm::wait_any(comms));
      const FlowSpec& f = flows[index[k]];
      FlowRecord rec{task, f.src, f.dst, f.bytes, t0, sg::Engine::get_clock(), {}};
      const int cpc = platform_.cores_per_chip();
      if (f.src / cpc != f.dst / cpc) rec.links = platform_.torus().route(f.src / cpc, f.dst / cpc);
      result_.flows.push_back(std::move(rec));
      comms.erase(comms.begin() + std::ptrdiff_t(k));
      index.erase(index.begin() + std::ptrdiff_t(k));
    }
  }

  void begin(int id) {
    const double now = sg::Engine::get_clock();
    result_.tasks[id].start_s = now;
    for (const auto& m : g_.task(id).memory)
      if (m.when == MemoryEffect::When::Start) memory_.apply(m, id, now);
  }

  void end(int id) {
    const double now = sg::Engine::get_clock();
    const Task& t = g_.task(id);
    result_.tasks[id].end_s = now;
    for (const auto& m : t.memory)
      if (m.when == MemoryEffect::When::End) memory_.apply(m, id, now);
    if (opt_.functional) {
      if (t.host) t.host();
      result_.completion_order.push_back(id);
    }
    ++done_;
    if (opt_.progress && done_ % 256 == 0) opt_.progress(done_, g_.size(), now);
    for (int s : g_.successors(id)) {
      if (--remaining_[s] != 0) continue;
      const Task& st = g_.task(s);
      if (st.kind == TaskKind::Compute) {
        if (waiting_[st.core] == s) {
          waiting_[st.core] = -1;
          semaphores_[st.core]->release();
        }
      } else {
        launch(s);
      }
    }
  }

  const TaskGraph& g_;
  EngineOptions opt_;
  Platform platform_;
  MemoryTracker memory_;
  std::vector<int> remaining_;
  std::vector<int> waiting_;
  std::vector<sg::SemaphorePtr> semaphores_;
  std::vector<std::vector<Phase>> plans_;
  std::map<std::vector<std::vector<int>>, std::vector<std::size_t>>
      representatives_;  // family -> its first cluster
  SimResult result_;
  int done_ = 0;
  std::string error_;
  long actor_limit_ = 0, live_actors_ = 0;
  bool out_of_actors_ = false;  ///< error_ is a ResourceError
};

}  // namespace

namespace {

/// Refuses, with the estimate, a graph this machine cannot simulate: more host memory than the
/// budget, or more simultaneous actors than memory mappings allow (each SimGrid actor's stack
/// is a mapping plus a guard page; SimGrid aborts the process when it runs out).
void check_host_resources(const TaskGraph& graph) {
  check_host_memory(graph.cores(), graph.size(), true);
  long actors = 1;  // at least one communication actor besides one per core with a program
  for (int c = 0; c < graph.cores(); ++c) actors += graph.program(c).empty() ? 0 : 1;
  const long mappings = max_memory_mappings(), reserve = kReservedMappings;
  if (2 * actors + reserve > mappings) {
    throw ResourceError("simulating " + std::to_string(graph.cores()) + " cores needs at least " +
                        std::to_string(actors) +
                        " simultaneous SimGrid actors, each stack two memory mappings, " +
                        "more than this machine allows (vm.max_map_count = " + std::to_string(mappings) +
                        "): use a slice of at most about " + std::to_string((mappings - reserve) / 2 - 1) +
                        " cores, or raise vm.max_map_count");
  }
}

}  // namespace

SimResult simulate(const TaskGraph& graph, const HardwareSpec& hw, const SliceSpec& slice,
                   const EngineOptions& options) {
  if (graph.cores() != slice_cores(hw, slice)) {
    throw SimulationError("task graph is for " + std::to_string(graph.cores()) + " cores, the slice has " +
                          std::to_string(slice_cores(hw, slice)));
  }
  graph.validate();
  check_host_resources(graph);
  auto engine = make_engine();
  Runner runner(graph, hw, slice, options);
  runner.start_actors();
  engine->run();
  return runner.finish();
}

std::vector<int> simgrid_route_hops(const HardwareSpec& hw, const SliceSpec& slice,
                                    const std::vector<std::pair<int, int>>& core_pairs) {
  auto engine = make_engine();
  Platform platform(hw, slice);
  for (const auto& [a, b] : core_pairs) platform.add_route(a, b);
  platform.seal();
  std::vector<int> hops;
  for (const auto& [a, b] : core_pairs) {
    std::vector<sg::Link*> links;
    double latency = 0;
    platform.host(a)->route_to(platform.host(b), links, &latency);
    int ici = 0;
    for (auto* l : links) ici += l->get_name().rfind("ici", 0) == 0 ? 1 : 0;
    hops.push_back(ici);
  }
  return hops;
}

}  // namespace tpusim::sim
