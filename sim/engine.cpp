#include "sim/engine.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <simgrid/s4u.hpp>

#include "hardware/detours.hpp"
#include "hardware/errors.hpp"
#include "hardware/topology.hpp"
#include "sim/cluster_reduction.hpp"
#include "sim/ring_shortcuts.hpp"
#include "sim/symmetry.hpp"

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
  // SimGrid installs a SIGINT handler of its own that exits 1 without a word (shared/SIMGRID.md):
  // the program's disposition stands instead (tpusim's commands say what an interrupt kept).
  struct sigaction program_sigint {};
  sigaction(SIGINT, nullptr, &program_sigint);
  auto engine = std::make_unique<sg::Engine>(&argc, argv);
  sigaction(SIGINT, &program_sigint, nullptr);
  sg::Engine::set_config("network/model:CM02");
  sg::Engine::set_config("network/crosstraffic:0");
  sg::Engine::set_config("network/TCP-gamma:0");
  // Actors run shallow code (a core's program, a ring's steps, functional mode's host math on
  // heap buffers): 1 MiB stacks instead of SimGrid's 8 MiB cost less to map and fault in (a
  // spatially partitioned SSD on v3-1024: 10.9 -> 9.2 s); the guard page stays.
  sg::Engine::set_config("contexts/stack-size:1024");
  return engine;
}

/// The slice as a SimGrid platform: hosts per core, directed ICI links (the hardware's bandwidth
/// times the network state's scale of each) and on-chip links, and routes for the core pairs
/// that will talk.
class Platform {
 public:
  Platform(const HardwareSpec& hw, const SliceSpec& slice, const NetworkState& network, int slices)
      : topology_(slices_topology(slice, hw.chip, slices)),
        cpc_(hw.chip.cores),
        detours_(topology_, network) {
    zone_ = sg::create_full_zone("ici");
    const int cores = topology_.chips() * cpc_;
    hosts_.resize(std::size_t(cores));
    for (int c = 0; c < cores; ++c)
      hosts_[std::size_t(c)] = zone_->create_host("core" + std::to_string(c), 1e12)->seal();
    links_.assign(std::size_t(topology_.link_id_bound()), nullptr);
    for (int id = 0; id < topology_.link_id_bound(); ++id) {
      const int r = topology_.link_source(id);
      const LinkDirection d = topology_.link_direction(id);
      if (!topology_.link_exists(r, d)) continue;
      links_[std::size_t(id)] =
          zone_
              ->create_link(
                  "ici" + std::to_string(r) + "_" + std::to_string(id % topology_.links_per_chip()),
                  hw.chip.ici_bandwidth_bytes_per_s *
                      (network.link_scale(id) > 0 ? network.link_scale(id) : 1.0))  // failed: unused
              ->set_latency(hw.chip.ici_latency_s)
              ->seal();
    }
    onchip_.assign(std::size_t(cores) * std::size_t(cpc_), nullptr);
    for (int r = 0; r < topology_.chips(); ++r)
      for (int i = 0; i < cpc_; ++i)
        for (int j = 0; j < cpc_; ++j)
          if (i != j) {
            onchip_[std::size_t(r * cpc_ + i) * std::size_t(cpc_) + std::size_t(j)] =
                zone_
                    ->create_link(
                        "chip" + std::to_string(r) + "_" + std::to_string(i) + "to" + std::to_string(j),
                        hw.chip.onchip_bandwidth_bytes_per_s)
                    ->set_latency(hw.chip.onchip_latency_s)
                    ->seal();
          }
    if (slices > 1) add_dcn(hw.dcn);
  }

  /// Each host's network card to the data-center network (out and in, latency on the way out)
  /// and its DCN endpoint: the same host of the neighbouring slices (dcn_endpoint).
  void add_dcn(const DcnSpec& dcn) {
    int hosts = 0;
    for (int r = 0; r < topology_.chips(); ++r) hosts = std::max(hosts, topology_.host(r) + 1);
    for (int h = 0; h < hosts; ++h) {
      const std::string name = "host" + std::to_string(h);
      dcn_hosts_.push_back(zone_->create_host(name + "_dcn", 1e12)->seal());
      nic_out_.push_back(zone_->create_link(name + "_nic_out", dcn.nic_bandwidth_bytes_per_s)
                             ->set_latency(dcn.latency_s)
                             ->seal());
      nic_in_.push_back(zone_->create_link(name + "_nic_in", dcn.nic_bandwidth_bytes_per_s)->seal());
    }
  }

  void add_route(int src, int dst) {
    if (src == dst || !routed_.insert({src, dst}).second) return;
    std::vector<sg::LinkInRoute> route;
    const int sc = src / cpc_, dc = dst / cpc_;
    if (is_dcn_endpoint(dst)) {
      route.emplace_back(nic_out_[std::size_t(dcn_endpoint_host(dst))]);
    } else if (is_dcn_endpoint(src)) {
      route.emplace_back(nic_in_[std::size_t(dcn_endpoint_host(src))]);
    } else if (sc == dc) {
      route.emplace_back(onchip_[std::size_t(src) * std::size_t(cpc_) + std::size_t(dst % cpc_)]);
    } else {
      for (int id : this->route(sc, dc)) route.emplace_back(links_[std::size_t(id)]);
    }
    zone_->add_route(host(src)->get_netpoint(), host(dst)->get_netpoint(), nullptr, nullptr, route, false);
  }

  /// The links between two chips: the dimension-order route, or a detour round failed links.
  std::vector<int> route(int from_chip, int to_chip) {
    bool detoured = false, reachable = true;
    auto links = detours_.route(from_chip, to_chip, &detoured, &reachable);
    if (!reachable)
      throw SimulationError("no route from chip " + std::to_string(from_chip) + " to chip " +
                            std::to_string(to_chip) + " avoids the failed links");
    if (detoured && detoured_.insert({from_chip, to_chip}).second) ++detoured_routes_;
    return links;
  }
  /// Routes between chips that go round a failed link.
  long long detoured_routes() const { return detoured_routes_; }

  void seal() { zone_->seal(); }
  /// The host of a core, or of a DCN endpoint.
  sg::Host* host(int core) const {
    return is_dcn_endpoint(core) ? dcn_hosts_[std::size_t(dcn_endpoint_host(core))]
                                 : hosts_[std::size_t(core)];
  }
  const Topology& topology() const { return topology_; }
  int cores_per_chip() const { return cpc_; }

 private:
  Topology topology_;
  int cpc_;
  sg::NetZone* zone_ = nullptr;
  std::vector<sg::Host*> hosts_;
  std::vector<sg::Link*> links_;
  std::vector<sg::Link*> onchip_;
  std::vector<sg::Host*> dcn_hosts_;  ///< per host: its DCN endpoint
  std::vector<sg::Link*> nic_out_, nic_in_;
  std::set<std::pair<int, int>> routed_;
  Detours detours_;
  std::set<std::pair<int, int>> detoured_;
  long long detoured_routes_ = 0;
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

/// Adds each name of `added` ("a+b": a group's algorithms) to a task's "a+b" list of the
/// algorithms its groups ran, once.
void add_algorithm_names(std::string& names, const std::string& added) {
  auto split = [](const std::string& list) {
    std::vector<std::string> parts;
    for (std::size_t at = 0; at <= list.size() && !list.empty();) {
      const std::size_t end = std::min(list.find('+', at), list.size());
      parts.push_back(list.substr(at, end - at));
      at = end + 1;
    }
    return parts;
  };
  auto listed = split(names);
  for (const auto& name : split(added))
    if (std::find(listed.begin(), listed.end(), name) == listed.end()) {
      names += (names.empty() ? "" : "+") + name;
      listed.push_back(name);
    }
}

class Runner {
 public:
  /// `transfer_links`: the links each transfer of `g` stands for (the cluster reduction's), or null.
  Runner(const TaskGraph& g, const HardwareSpec& hw, const SliceSpec& slice, const EngineOptions& opt,
         const std::map<int, std::set<long long>>* transfer_links)
      : g_(g),
        opt_(opt),
        platform_(hw, slice, opt.network, opt.slices),
        planner_(platform_.topology(), hw.chip.cores, hw.chip.collective_algorithms,
                 hw.chip.latency_collective_max_bytes),
        memory_(g.cores(), hw.core.usable_hbm_bytes()) {
    // Each actor's stack is a mapping and a guard page.
    actor_limit_ = opt.max_simultaneous_actors > 0 ? opt.max_simultaneous_actors
                                                   : (max_memory_mappings() - kReservedMappings) / 2;
    const int n = g.size();
    remaining_.resize(std::size_t(n));
    for (int id = 0; id < n; ++id) remaining_[std::size_t(id)] = g.in_degree(id);
    waiting_.assign(std::size_t(g.cores()), -1);
    for (int c = 0; c < g.cores(); ++c) semaphores_.push_back(sg::Semaphore::create(0));
    result_.tasks.assign(std::size_t(n), TaskTiming{});
    result_.cores.assign(std::size_t(g.cores()), CoreStats{});
    for (int c = 0; c < g.cores(); ++c) memory_.set_resident(c, g.resident()[std::size_t(c)]);
    speed_.resize(std::size_t(g.cores()));
    hbm_speed_.resize(std::size_t(g.cores()));
    for (int c = 0; c < g.cores(); ++c) {
      speed_[std::size_t(c)] = opt.network.chip_scale(c / hw.chip.cores);
      hbm_speed_[std::size_t(c)] = opt.network.hbm_scale(c / hw.chip.cores);
      result_.cores[std::size_t(c)].compute_scale = speed_[std::size_t(c)];
      result_.cores[std::size_t(c)].hbm_scale = hbm_speed_[std::size_t(c)];
    }

    SymmetryProof proof;
    if (opt.symmetric_collectives)
      proof = prove_symmetry(g, planner_, opt.network, transfer_links, opt.approximate_sharing);
    else
      proof.reason = "none: asked for the full simulation";
    const bool symmetric = proof.exact || proof.approximate;
    result_.symmetric_collectives = symmetric;
    result_.approximate_collectives = proof.approximate;
    result_.symmetry = proof.exact ? "representative rings" : proof.reason;
    plan_collectives(proof);
    if (symmetric && !opt.record_flows) {
      const RingGeometry geometry{platform_.topology(), platform_.cores_per_chip()};
      mark_repeating_rings(play_lone_flows_once(g_, plans_, geometry), plans_, geometry);
    }
    platform_.seal();
    result_.routes_detoured = platform_.detoured_routes();
  }

  static bool plays(const PlannedRing& ring, std::size_t i) {
    return ring.played.empty() ||
           std::find(ring.played.begin(), ring.played.end(), int(i)) != ring.played.end();
  }

  /// Each collective's phases and rings, its groups merged phase by phase (a symmetric step:
  /// only the representative groups' and rings'), and the routes its flows take.
  void plan_collectives(const SymmetryProof& proof) {
    const bool symmetric = proof.exact || proof.approximate;
    const int n = g_.size();
    plans_.resize(std::size_t(n));
    result_.collective_algorithms.clear();
    for (int id = 0; id < n; ++id) {
      const Task& t = g_.task(id);
      if (t.kind == TaskKind::Transfer) platform_.add_route(t.src_core, t.dst_core);
      if (t.kind != TaskKind::Collective) continue;
      // The groups of a family run together: their rings merge phase by phase.
      auto groups = t.collective_groups();
      if (symmetric) {
        std::vector<std::vector<int>> cluster;
        for (std::size_t gi : proof.representatives.at(groups)) cluster.push_back(groups[gi]);
        groups = std::move(cluster);
      }
      auto& plan = plans_[std::size_t(id)];
      for (const auto& group : groups) {
        add_algorithm_names(result_.collective_algorithms[id], planner_.algorithm_names(t, group));
        auto group_plan = planner_.plan(t, group);
        if (plan.size() < group_plan.size()) plan.resize(group_plan.size());
        for (std::size_t p = 0; p < group_plan.size(); ++p) {
          if (plan[p].name.empty()) plan[p].name = group_plan[p].name;
          // Only the representative rings are simulated: the others are never kept (a pod's
          // family of groups would hold gigabytes of rings it then drops).
          for (auto& ring : group_plan[p].rings)
            if (!symmetric || ring.representative) plan[p].rings.push_back(std::move(ring));
        }
      }
      for (auto& phase : plan) {
        for (const auto& ring : phase.rings)
          for (std::size_t i = 0; i < ring.cores.size(); ++i)
            platform_.add_route(ring.cores[i], ring.cores[(i + 1) % ring.cores.size()]);
      }
    }
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
      if (resource_error_) throw ResourceError(error_);
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
    result_.worst_overflow = memory_.worst_overflow();
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
    resource_error_ = true;
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
      const double seconds = t.run_seconds(speed_[std::size_t(core)], hbm_speed_[std::size_t(core)]);
      if (seconds > 0) sg::this_actor::sleep_for(seconds);
      result_.cores[std::size_t(core)].busy_s += seconds;
      end(id);
      if (++since_memory_check_ >= kMemoryCheckEvery && over_host_memory()) return;
    }
  }

  /// The host-memory budget checked against what the process holds as the simulation runs: past
  /// it every actor is stopped and the run ends in ResourceError.
  bool over_host_memory() {
    since_memory_check_ = 0;
    std::string why = host_memory_exceeded();
    if (why.empty()) return false;
    if (error_.empty()) error_ = std::move(why);
    resource_error_ = true;
    sg::Actor::kill_all();
    return true;
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
      // A core's own DMA to or from its host (host offload): its time, on a link the schedule
      // keeps to one such transfer at a time.
      if (t.src_core == t.dst_core && t.seconds > 0) sg::this_actor::sleep_for(t.seconds);
    } else {
      // Phase after phase, the next waiting for every ring of the last; the one over the
      // data-center network (a reduction across slices) is timed apart for the breakdown.
      for (const Phase& phase : plans_[id]) {
        const bool dcn = !phase.rings.empty() && crosses_slices(phase.rings.front());
        const double start = sg::Engine::get_clock();
        play_phase(phase, id);
        if (dcn) result_.dcn_phases.push_back({id, start, sg::Engine::get_clock()});
      }
    }
    end(id);
  }

  /// The rings of one phase of collective `id`. Each ring runs at its own pace in its own actor (a
  /// SimGrid actor handles thousands of simultaneous comms poorly); a phase of one ring, or of
  /// rings of one step, plays here: an actor's stack costs more than a small collective's flows.
  void play_phase(const Phase& phase, int id) {
    if (phase.rings.size() == 1) {
      play_ring(phase.rings.front(), id);
      return;
    }
    if (std::all_of(phase.rings.begin(), phase.rings.end(),
                    [](const PlannedRing& r) { return r.steps == 1; })) {
      // One step each (the on-chip rings of two cores): every flow at once, as the rings would.
      std::vector<FlowSpec> flows;
      for (const auto& ring : phase.rings)
        for (std::size_t i = 0; i < ring.cores.size(); ++i)
          if (plays(ring, i))
            flows.push_back({ring.cores[i], ring.cores[(i + 1) % ring.cores.size()], ring.chunk_bytes});
      play_step(flows, id);
      return;
    }
    std::vector<sg::ActorPtr> rings;
    for (const auto& ring : phase.rings)
      rings.push_back(spawn(g_.task(id).name, platform_.host(ring.cores.front()),
                            [this, id, &ring] { play_ring(ring, id); }));
    for (auto& actor : rings) actor->join();
  }

  struct FlowSpec {
    int src, dst;
    double bytes;
  };

  void play_ring(const PlannedRing& ring, int task) {
    std::vector<FlowSpec> flows;
    for (std::size_t i = 0; i < ring.cores.size(); ++i)
      if (plays(ring, i))
        flows.push_back({ring.cores[i], ring.cores[(i + 1) % ring.cores.size()], ring.chunk_bytes});
    if (ring.repeats && ring.steps > 1) {
      const double t0 = sg::Engine::get_clock();
      play_step(flows, task);
      sg::this_actor::sleep_for((sg::Engine::get_clock() - t0) * double(ring.steps - 1));
      return;
    }
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
      if (!is_dcn_endpoint(f.src) && !is_dcn_endpoint(f.dst) && f.src / cpc != f.dst / cpc)
        rec.links = platform_.route(f.src / cpc, f.dst / cpc);
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
  CollectivePlanner planner_;
  MemoryTracker memory_;
  std::vector<double> speed_;      ///< per core: its chip's speed scale
  std::vector<double> hbm_speed_;  ///< per core: its chip's HBM scale (Task::hbm_s)
  std::vector<int> remaining_;
  std::vector<int> waiting_;
  std::vector<sg::SemaphorePtr> semaphores_;
  std::vector<std::vector<Phase>> plans_;
  SimResult result_;
  int done_ = 0;
  std::string error_;
  long actor_limit_ = 0, live_actors_ = 0;
  bool resource_error_ = false;                   ///< error_ is a ResourceError (actors, host memory)
  static constexpr int kMemoryCheckEvery = 4096;  ///< compute tasks between two looks at the host memory
  int since_memory_check_ = 0;
};

}  // namespace

namespace {

/// Refuses, with the estimate, a graph this machine cannot simulate: more host memory than the
/// budget, or more simultaneous actors than memory mappings allow (each SimGrid actor's stack
/// is a mapping plus a guard page; SimGrid aborts the process when it runs out).
void check_host_resources(const TaskGraph& graph) {
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

namespace {

/// The step's result from its representative cluster's: every task times as the task it runs as,
/// every core as the core it runs as.
SimResult expand(const ClusterReduction& r, const TaskGraph& step, SimResult sim) {
  SimResult out = std::move(sim);
  std::vector<TaskTiming> tasks(std::size_t(step.size()));
  std::map<int, std::string> algorithms;
  for (int id = 0; id < step.size(); ++id) {
    const int s = r.simulated_task[std::size_t(id)];
    tasks[std::size_t(id)] = out.tasks[std::size_t(s)];
    if (auto a = out.collective_algorithms.find(s); a != out.collective_algorithms.end())
      algorithms.emplace(id, a->second);
  }
  // A core's peak task is the one of its own cluster that the simulated core's peak task stands for.
  std::vector<CoreStats> cores(std::size_t(step.cores()));
  for (int c = 0; c < step.cores(); ++c) {
    CoreStats stats = out.cores[std::size_t(r.simulated_core[std::size_t(c)])];
    if (stats.peak_task >= 0) {
      const auto& orbit = r.orbit[std::size_t(stats.peak_task)];
      const int k = r.cluster_of_core[std::size_t(c)];
      stats.peak_task =
          orbit.size() == 1 || k < 0 ? r.step_task[std::size_t(stats.peak_task)] : orbit[std::size_t(k)];
    }
    cores[std::size_t(c)] = stats;
  }
  for (Overflow* o : {&out.overflow, &out.worst_overflow})
    if (o->happened && o->task >= 0) o->task = r.step_task[std::size_t(o->task)];
  for (auto& f : out.flows) f.task = r.step_task[std::size_t(f.task)];
  for (auto& p : out.dcn_phases) p.task = r.step_task[std::size_t(p.task)];
  out.tasks = std::move(tasks);
  out.collective_algorithms = std::move(algorithms);
  out.cores = std::move(cores);
  out.simulation = (r.kinds == 1 ? "one of " + std::to_string(r.clusters)
                                 : "one of each of " + std::to_string(r.kinds) +
                                       " kinds (by chip speed) of " + std::to_string(r.clusters)) +
                   " congruent clusters of " + std::to_string(r.cores_per_cluster) +
                   " cores; collectives: " + out.symmetry;
  return out;
}

}  // namespace

SimResult simulate(const TaskGraph& graph, const HardwareSpec& hw, const SliceSpec& slice,
                   const EngineOptions& options) {
  if (graph.cores() != slice_cores(hw, slice)) {
    throw SimulationError("task graph is for " + std::to_string(graph.cores()) + " cores, the slice has " +
                          std::to_string(slice_cores(hw, slice)));
  }
  graph.validate();
  check_host_memory(graph.cores(), graph.size(), true);
  // Functional mode runs every task's math and a trace records every flow: both want every task.
  ClusterReduction reduction;
  reduction.reason = "none: asked for the full simulation";
  if (options.symmetric_collectives && !options.functional && !options.record_flows) {
    const CollectivePlanner planner(slices_topology(slice, hw.chip, options.slices), hw.chip.cores,
                                    hw.chip.collective_algorithms, hw.chip.latency_collective_max_bytes);
    reduction = reduce_to_one_cluster(graph, planner, options.network);
  }
  // The step's own adjacency was for the checks and the reduction; only its tasks are read after.
  if (reduction.applied) graph.release_queries();
  const TaskGraph& simulated = reduction.applied ? reduction.graph : graph;
  check_host_resources(simulated);
  auto engine = make_engine();
  Runner runner(simulated, hw, slice, options, reduction.applied ? &reduction.orbit_links : nullptr);
  runner.start_actors();
  engine->run();
  SimResult result = runner.finish();
  result.tasks_simulated = simulated.size();
  if (reduction.applied) return expand(reduction, graph, std::move(result));
  result.simulation = "every core (clusters: " + reduction.reason + "); collectives: " + result.symmetry;
  return result;
}

std::vector<int> simgrid_route_hops(const HardwareSpec& hw, const SliceSpec& slice,
                                    const std::vector<std::pair<int, int>>& core_pairs) {
  auto engine = make_engine();
  Platform platform(hw, slice, NetworkState{}, 1);
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
