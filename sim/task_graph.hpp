// The program of a training step as the engine plays it: a DAG (Boost.Graph) of compute
// tasks on cores, core-to-core transfers and collectives over groups of cores, with the order
// in which each core runs its compute tasks, memory effects, and optional host closures
// (functional mode). Schedules build it; the engine knows nothing about the schedule.
#pragma once

#include <array>
#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <concepts>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tpusim::sim {

enum class TaskKind : std::uint8_t { Compute, Transfer, Collective };
/// AllToAll: each member's buffer holds a piece for every member (mixture-of-experts dispatch).
enum class CollectiveOp : std::uint8_t { AllReduce, ReduceScatter, AllGather, AllToAll };

/// HBM categories tracked per core.
enum class MemoryCategory : std::uint8_t { Weights = 0, Optimizer, Gradients, Activations, Workspace };
inline constexpr int kMemoryCategories = 5;
const char* to_string(MemoryCategory c);
const char* to_string(CollectiveOp op);
const char* to_string(TaskKind k);

/// Allocate (bytes > 0) or free (bytes < 0) HBM on a core when a task starts or ends.
struct MemoryEffect {
  enum class When : std::uint8_t { Start, End };
  MemoryEffect() = default;
  MemoryEffect(int core, MemoryCategory category, double bytes, When when = When::Start)
      : bytes(bytes), core(core), category(category), when(when) {}
  double bytes = 0;
  int core = 0;
  MemoryCategory category = MemoryCategory::Workspace;
  When when = When::Start;
};

/// A name from a small set, such as a task's phase ("forward", "update", ...): a pointer to
/// its one interned copy, as a pod's step holds millions of them.
class PhaseName {
 public:
  PhaseName() : s_(&intern({})) {}
  PhaseName(const char* s) : s_(&intern(s)) {}
  PhaseName(const std::string& s) : s_(&intern(s)) {}
  PhaseName(std::string_view s) : s_(&intern(s)) {}
  operator const std::string&() const { return *s_; }
  const std::string& str() const { return *s_; }
  bool empty() const { return s_->empty(); }
  friend bool operator==(const PhaseName& a, const PhaseName& b) { return a.s_ == b.s_; }
  friend bool operator==(const PhaseName& a, std::string_view b) { return *a.s_ == b; }
  friend bool operator==(const PhaseName& a, const char* b) { return *a.s_ == b; }
  friend bool operator==(const PhaseName& a, const std::string& b) { return *a.s_ == b; }
  friend bool operator<(const PhaseName& a, const PhaseName& b) { return *a.s_ < *b.s_; }

 private:
  static const std::string& intern(std::string_view s);
  const std::string* s_;
};

/// Functional mode's host work for a task (the real math, run when the task completes): behind
/// a pointer, as a step of millions of tasks carries none.
class HostWork {
 public:
  HostWork() = default;
  template <class F>
  requires(!std::same_as<std::decay_t<F>, HostWork>) HostWork(F f)
      : f_(std::make_unique<std::function<void()>>(std::move(f))) {}
  HostWork(const HostWork& o) : f_(o.f_ ? std::make_unique<std::function<void()>>(*o.f_) : nullptr) {}
  HostWork(HostWork&&) noexcept = default;
  HostWork& operator=(const HostWork& o) { return *this = HostWork(o); }
  HostWork& operator=(HostWork&&) noexcept = default;
  ~HostWork() = default;
  explicit operator bool() const { return f_ && *f_; }
  void operator()() const { (*f_)(); }

 private:
  std::unique_ptr<std::function<void()>> f_;
};

/// A task of the step. Its fields are ordered to pack it (a pod's step holds millions).
struct Task {
  TaskKind kind = TaskKind::Compute;
  /// Collective: its operation over `group` (or `groups`).
  CollectiveOp op = CollectiveOp::AllReduce;
  /// Compute: the part of `seconds` its matmuls' grid steps add, for the reports' split only (a
  /// float beside the one-byte kinds: tasks stay packed).
  float grid_s = 0;
  std::string name;  ///< unique-ish, for traces and messages ("fwd L3 core 5")
  PhaseName phase;   ///< what it counts as in breakdowns: forward, backward, update, allreduce, ...
  // Compute: on `core`, `seconds` long.  Transfer: src_core -> dst_core, `bytes`; from a core
  // to itself, a DMA between its HBM and its host's memory (host offload), `seconds` long over
  // the chip's host link (the schedule orders a link's DMAs one after another).
  int core = -1;
  int src_core = -1;
  int dst_core = -1;
  /// A reduction of gradients over data-parallel replicas: when the study spans several slices
  /// (Topology::slices), the same group in every other slice holds replicas too, and the
  /// reduction continues across the slices over the data-center network (a reduce-scatter inside
  /// the slice, an all-reduce of each piece across slices, then for an all-reduce the all-gather
  /// inside the slice: CollectivePlanner::plan).
  bool across_slices = false;
  // Labels for reports (-1 when not applicable).
  std::int16_t chunk = -1;  ///< an interleaved pipeline's model chunk on its stage (0 .. V-1)
  int layer = -1;
  int stage = -1;
  int micro_batch = -1;
  /// Compute: the MXU time its 8-bit matmuls save against the bf16 peak its hardware FLOPs would
  /// take (precision.matmul), for the split only (a float beside the labels: tasks stay packed).
  float mxu_saved_s = 0;
  double seconds = 0;         ///< duration on its core, from the cost model
  double hbm_s = 0;           ///< the part of `seconds` HBM bandwidth sets (a slower HBM stretches it)
  double model_flops = 0;     ///< the math it performs
  double hardware_flops = 0;  ///< what the MXU executes (padding, recomputation)
  /// Transfer: its bytes.  Collective: the full buffer each member holds before an all-reduce /
  /// reduce-scatter, after an all-gather.
  double bytes = 0;
  std::vector<int> group;
  /// Instead of `group`: a family of disjoint groups each running the same collective at the
  /// same time (an SPMD collective over the sub-groups of a mesh dimension).
  std::vector<std::vector<int>> groups;
  std::vector<MemoryEffect> memory;
  HostWork host;  ///< functional mode: run when the task completes in simulated order

  /// The groups of a collective (`groups`, or `group` alone).
  std::vector<std::vector<int>> collective_groups() const {
    return groups.empty() ? std::vector<std::vector<int>>{group} : groups;
  }
  /// Every core a communication task involves.
  std::vector<int> members() const;
  /// Compute: how long it runs on a core whose compute runs at `compute_scale` of its
  /// specification and its HBM at `hbm_scale` (perturbations; 1, 1: `seconds`). Each part of
  /// `seconds` is stretched by its own scale.
  double run_seconds(double compute_scale, double hbm_scale) const {
    return hbm_scale == compute_scale ? seconds / compute_scale
                                      : (seconds - hbm_s) / compute_scale + hbm_s / hbm_scale;
  }
};

/// Host memory a simulation needs, estimated from its size: SimGrid's full routing table (a
/// pointer per ordered pair of hosts), per-core platform and actor state, and per-task graph and
/// engine state. Figures of this program measured on this machine (run -v, /usr/bin/time), since
/// tasks are packed (200 bytes, phases interned, functional closures behind a pointer) and the
/// collective plans keep only the rings simulated: a 175B Transformer's batch:512 x model:8 mesh
/// on v4-8192 (4,096 devices, 96 layers) peaks at 1.63 GB with 2.78 M tasks, 494 bytes per task
/// beyond the rest (a mesh's run of compute pieces is one task and its arrivals are dependencies,
/// so it has more dependencies per task than it had at 8.70 M tasks, 426 bytes per task,
/// 3.82 GB); a GPipe step grows by less (172 bytes per task: 78,344 ->
/// 311,816 tasks on v3-512, 163 -> 203 MB); an 8,192-core data-parallel step takes 706 MB of
/// which 537 MB is the routing table. kBytesPerTask is the larger per-task figure, rounded up.
struct HostFootprint {
  static constexpr double kBaseBytes = 40e6;
  static constexpr double kBytesPerTask = 512;
  static constexpr double kBytesPerCore = 20e3;
  static double bytes(double cores, double tasks) {
    return kBaseBytes + 8 * cores * cores + kBytesPerCore * cores + kBytesPerTask * tasks;
  }
};

/// The process's budget of host memory for a simulation (bytes; 0: none), set once by `main`.
/// Building a task graph that would need more throws ResourceError as soon as it passes the
/// budget, before it has used it.
void set_host_memory_budget(double bytes);
double host_memory_budget();
/// Throws ResourceError, with the estimate, when `cores` and `tasks` need more host memory than
/// the budget, or this process already holds more (its resident set); `complete`: the graph is
/// whole (otherwise it may still grow, or has no tasks yet).
void check_host_memory(int cores, double tasks, bool complete);
/// This process's resident set (bytes, from /proc/self/statm; 0 where unreadable).
double resident_set_bytes();
/// Why the process is over its budget (its resident set above it), or "" while it is not: the
/// engine asks as it runs and stops the simulation.
std::string host_memory_exceeded();

class TaskGraph {
 public:
  /// `cores` cores in the slice, numbered chip * cores_per_chip + index.
  explicit TaskGraph(int cores);
  // A move hands over the graphs' storage (leaving the other an empty graph); a copy copies them.
  TaskGraph(TaskGraph&& other);
  TaskGraph& operator=(TaskGraph&& other);
  TaskGraph(const TaskGraph& other);
  TaskGraph& operator=(const TaskGraph& other);
  ~TaskGraph() = default;

  /// Adds a task; a compute task is appended to its core's program. Returns its id.
  int add(Task task);
  /// `after` may start only once `before` has finished.
  void depend(int before, int after);
  /// Memory already held when the step starts (weights, optimizer slots).
  void resident(int core, MemoryCategory category, double bytes);

  int cores() const { return cores_; }
  int size() const { return int(tasks_.size()); }
  const Task& task(int id) const { return tasks_[id]; }
  Task& task(int id) { return tasks_[id]; }
  const std::vector<int>& program(int core) const { return programs_[core]; }
  std::vector<int> successors(int id) const;
  /// Calls `f(successor)` for each successor of `id` (no allocation: for passes over every task).
  template <class F>
  void for_each_successor(int id, F&& f) const {
    for (auto [it, end] = boost::adjacent_vertices(Vertex(id), adjacency().dependencies); it != end; ++it)
      f(int(*it));
  }
  std::vector<int> predecessors(int id) const;
  int in_degree(int id) const;
  const std::vector<std::array<double, kMemoryCategories>>& resident() const { return resident_; }
  /// The core holding the most resident state (the first of equals; -1 when none holds any).
  int most_resident_core() const;
  /// What `core` holds all step, over every category.
  double resident_bytes(int core) const;
  /// Per core, no run of the graph peaks lower: its resident state plus the most it must hold at
  /// once besides, walked in its program order (its compute tasks run one at a time). Another
  /// task's change of what the core holds is placed where it has surely happened (an allocation,
  /// by the start of the first of the core's tasks that waits for it; none waits: left out) or
  /// may first have (a release, at the end of the last of the core's tasks it waits for; none:
  /// before the first), so that the walk never holds more than a run does: a pipeline stage's
  /// received activations, the micro-batches it keeps and the gradients it accumulates count.
  std::vector<double> memory_floors() const;

  /// Drops what the queries below walk (rebuilt on the next query): a pod's step frees hundreds
  /// of MB once it has been checked and reduced.
  void release_queries() const { adjacency_.reset(); }

  /// The longest chain of task durations (`seconds`, one per task) through the dependencies and
  /// every core's program order: no run of the graph ends sooner, whatever its contention.
  double critical_path(const std::vector<double>& seconds) const;

  /// Whether every task of `a` and every task of `b` are ordered: one of the two is an
  /// ancestor of the other through the dependencies and the cores' program order, so no run of
  /// the graph has them running at once. False also when proving it would take more than
  /// `max_bytes` of memory.
  bool ordered(const std::vector<int>& a, const std::vector<int>& b, double max_bytes = 256e6) const;
  /// Whether `tasks` run one after another: each one's successor in topological order depends
  /// on it (so every two of them are ordered). One pass over the graph.
  bool chain(const std::vector<int>& tasks) const;

  /// Throws SimulationError unless: every task is well formed (cores in range, groups of
  /// distinct cores, non-negative sizes), the dependencies with each core's program order form
  /// a DAG (otherwise the engine would deadlock), and every core's memory effects over the
  /// step sum to zero per category (a step leaves memory as it found it).
  void validate() const;

 private:
  /// memory_floors: where effect `m` of task `id` falls in its core's program (-1: left out);
  /// `place`, each compute task's index in its core's program.
  int floor_slot(int id, const MemoryEffect& m, const std::vector<int>& place) const;
  using Vertex = std::uint32_t;
  /// A graph in compressed sparse row form (Boost.Graph): 4 bytes per edge, built once from the
  /// edges as they were added (each task's edges in the order they were added).
  using Dependencies =
      boost::compressed_sparse_row_graph<boost::bidirectionalS, boost::no_property, boost::no_property,
                                         boost::no_property, Vertex, Vertex>;
  using Order = boost::compressed_sparse_row_graph<boost::directedS, boost::no_property, boost::no_property,
                                                   boost::no_property, Vertex, Vertex>;
  /// What the queries walk, built on the first query after the last add or depend: the
  /// dependencies (successors and predecessors), and the dependencies with every core's program
  /// order together (what orders tasks in any run).
  struct Adjacency {
    Dependencies dependencies;
    Order order;
  };
  const Adjacency& adjacency() const;
  /// Tasks in an order every dependency and program order respects (empty: there is a cycle).
  std::vector<std::size_t> topological_order() const;
  void validate_task(const Task& t) const;  ///< its cores, duration and sizes
  void validate_acyclic() const;            ///< dependencies plus program order form a DAG
  void validate_memory_balance() const;     ///< each core's memory effects sum to zero
  int cores_;
  /// The dependencies (before, after) as added: 8 bytes each while the graph is built (a step of
  /// millions of tasks is built once and then only read).
  std::vector<std::pair<Vertex, Vertex>> dependencies_;
  /// Null until queried, and after a change. Built on the first query: a graph is built by one
  /// thread and may then be read by several only once it has been queried once.
  mutable std::shared_ptr<const Adjacency> adjacency_;
  std::deque<Task> tasks_;  ///< a deque: a graph of millions of tasks grows without copying itself
  std::vector<std::vector<int>> programs_;
  std::vector<std::array<double, kMemoryCategories>> resident_;
};

}  // namespace tpusim::sim
