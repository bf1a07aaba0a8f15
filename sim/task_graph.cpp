#include "sim/task_graph.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/graph/dag_shortest_paths.hpp>
#include <boost/graph/topological_sort.hpp>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

#include "hardware/errors.hpp"

namespace tpusim::sim {

const char* to_string(MemoryCategory c) {
  static const char* names[] = {"weights", "optimizer", "gradients", "activations", "workspace"};
  return names[int(c)];
}

const char* to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::AllReduce:
      return "all_reduce";
    case CollectiveOp::ReduceScatter:
      return "reduce_scatter";
    case CollectiveOp::AllGather:
      return "all_gather";
    case CollectiveOp::AllToAll:
      return "all_to_all";
  }
  return "?";
}

const char* to_string(TaskKind k) {
  switch (k) {
    case TaskKind::Compute:
      return "compute";
    case TaskKind::Transfer:
      return "transfer";
    case TaskKind::Collective:
      return "collective";
  }
  return "?";
}

std::vector<int> Task::members() const {
  if (kind == TaskKind::Transfer) return {src_core, dst_core};
  std::vector<int> all;
  for (const auto& g : collective_groups()) all.insert(all.end(), g.begin(), g.end());
  return all;
}

const std::string& PhaseName::intern(std::string_view s) {
  // A set's elements never move; the lock lets graphs be built on several threads.
  static std::mutex lock;
  static std::set<std::string, std::less<>> names;
  const std::scoped_lock hold(lock);
  auto it = names.find(s);
  if (it == names.end()) it = names.emplace(s).first;
  return *it;
}

namespace {
double g_host_memory_budget = 0;

/// Gigabytes as a budget's messages print them: one decimal, or three digits below 0.1 GB (a
/// budget of 1e6 bytes is "0.001 GB", not "0.0 GB").
std::string gigabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, bytes >= 1e8 ? "%.1f GB" : "%.3g GB", bytes / 1e9);
  return text;
}
}  // namespace

void set_host_memory_budget(double bytes) { g_host_memory_budget = bytes; }
double host_memory_budget() { return g_host_memory_budget; }

double resident_set_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long pages = 0, resident = 0;
  const int read = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return read == 2 ? double(resident) * double(::sysconf(_SC_PAGESIZE)) : 0.0;
}

std::string host_memory_exceeded() {
  if (g_host_memory_budget <= 0) return "";
  const double resident = resident_set_bytes();
  if (resident <= g_host_memory_budget) return "";
  char text[400];
  std::snprintf(text, sizeof text,
                "the simulation holds %s of host memory, more than the budget of %s "
                "(--max-host-memory; default half of this machine's memory): it was stopped; use a smaller "
                "slice, fewer micro-batches or layers, or raise the budget",
                gigabytes(resident).c_str(), gigabytes(g_host_memory_budget).c_str());
  return text;
}

void check_host_memory(int cores, double tasks, bool complete) {
  if (g_host_memory_budget <= 0) return;
  // The estimate of what the graph and the engine will need, or what this process already holds
  // (the layers' programs and costs, which the estimate leaves out), whichever is more.
  const double need = std::max(HostFootprint::bytes(cores, tasks), resident_set_bytes());
  if (need <= g_host_memory_budget) return;
  char what[160], text[512];
  if (complete)
    std::snprintf(what, sizeof what, "%d cores and %.0f tasks", cores, tasks);
  else if (tasks > 0)
    std::snprintf(what, sizeof what, "%d cores and more than %.0f tasks (the graph was still growing)", cores,
                  tasks);
  else
    std::snprintf(what, sizeof what, "%d cores (SimGrid's routing table and per-core state alone)", cores);
  std::snprintf(text, sizeof text,
                "simulating %s needs over %s of host memory, more than the budget of %s "
                "(--max-host-memory; default half of this machine's memory): use a smaller slice, fewer "
                "micro-batches or layers, or raise the budget",
                what, gigabytes(need).c_str(), gigabytes(g_host_memory_budget).c_str());
  throw ResourceError(text);
}

TaskGraph::TaskGraph(int cores) : cores_(cores) {
  check_host_memory(cores, 0, false);
  programs_.resize(std::size_t(cores));
  resident_.resize(std::size_t(cores));
  for (auto& r : resident_) r.fill(0.0);
}

TaskGraph::TaskGraph(const TaskGraph& other)
    : cores_(other.cores_),
      dependencies_(other.dependencies_),
      adjacency_(other.adjacency_),
      tasks_(other.tasks_),
      programs_(other.programs_),
      resident_(other.resident_) {}

TaskGraph::TaskGraph(TaskGraph&& other)
    : cores_(other.cores_),
      dependencies_(std::move(other.dependencies_)),
      adjacency_(std::move(other.adjacency_)),
      tasks_(std::move(other.tasks_)),
      programs_(std::move(other.programs_)),
      resident_(std::move(other.resident_)) {
  other.dependencies_.clear();
  other.adjacency_.reset();
  other.tasks_.clear();
  other.programs_.assign(std::size_t(other.cores_), {});
  other.resident_.assign(std::size_t(other.cores_), {});
}

TaskGraph& TaskGraph::operator=(TaskGraph&& other) {
  std::swap(cores_, other.cores_);
  dependencies_.swap(other.dependencies_);
  adjacency_.swap(other.adjacency_);
  tasks_.swap(other.tasks_);
  programs_.swap(other.programs_);
  resident_.swap(other.resident_);
  return *this;
}

TaskGraph& TaskGraph::operator=(const TaskGraph& other) {
  if (this != &other) *this = TaskGraph(other);
  return *this;
}

int TaskGraph::add(Task task) {
  // Checked every 16,384 tasks: a graph that keeps growing stops at the budget, not past it.
  if (tasks_.size() % 16384 == 16383) check_host_memory(cores_, double(tasks_.size()), false);
  const int id = size();
  adjacency_.reset();
  if (task.kind == TaskKind::Compute && task.core >= 0 && task.core < cores_)
    programs_[std::size_t(task.core)].push_back(id);
  tasks_.push_back(std::move(task));
  return id;
}

void TaskGraph::depend(int before, int after) {
  if (before < 0 || before >= size() || after < 0 || after >= size())
    throw SimulationError("invalid task graph: a dependency " + std::to_string(before) + " -> " +
                          std::to_string(after) + " names a task that does not exist (" +
                          std::to_string(size()) + " tasks)");
  adjacency_.reset();
  dependencies_.emplace_back(Vertex(before), Vertex(after));
}

const TaskGraph::Adjacency& TaskGraph::adjacency() const {
  if (adjacency_) return *adjacency_;
  auto built = std::make_shared<Adjacency>();
  const auto n = Vertex(tasks_.size());
  built->dependencies =
      Dependencies(boost::edges_are_unsorted_multi_pass, dependencies_.begin(), dependencies_.end(), n);
  // Sized once: a pod's step has tens of millions of edges, and growing a copy would hold three
  // times their bytes at once.
  std::size_t program_edges = 0;
  for (const auto& program : programs_) program_edges += program.empty() ? 0 : program.size() - 1;
  std::vector<std::pair<Vertex, Vertex>> order;
  order.reserve(dependencies_.size() + program_edges);
  order.assign(dependencies_.begin(), dependencies_.end());
  for (const auto& program : programs_)
    for (std::size_t k = 1; k < program.size(); ++k)
      order.emplace_back(Vertex(program[k - 1]), Vertex(program[k]));
  built->order = Order(boost::edges_are_unsorted_multi_pass, order.begin(), order.end(), n);
  adjacency_ = std::move(built);
  return *adjacency_;
}

std::vector<std::size_t> TaskGraph::topological_order() const {
  std::vector<std::size_t> reversed;  // boost writes the last task first
  try {
    boost::topological_sort(adjacency().order, std::back_inserter(reversed));
  } catch (const boost::not_a_dag&) {
    return {};
  }
  return {reversed.rbegin(), reversed.rend()};
}

void TaskGraph::resident(int core, MemoryCategory category, double bytes) {
  resident_.at(core)[int(category)] += bytes;
}

std::vector<int> TaskGraph::successors(int id) const {
  std::vector<int> out;
  for (auto [it, end] = boost::adjacent_vertices(Vertex(id), adjacency().dependencies); it != end; ++it)
    out.push_back(int(*it));
  return out;
}

std::vector<int> TaskGraph::predecessors(int id) const {
  std::vector<int> out;
  const auto& g = adjacency().dependencies;
  for (auto [it, end] = boost::in_edges(Vertex(id), g); it != end; ++it)
    out.push_back(int(boost::source(*it, g)));
  return out;
}

int TaskGraph::in_degree(int id) const { return int(boost::in_degree(Vertex(id), adjacency().dependencies)); }

namespace {

[[noreturn]] void invalid(const std::string& msg) { throw SimulationError("invalid task graph: " + msg); }

}  // namespace

void TaskGraph::validate_task(const Task& t) const {
  auto core_ok = [&](int c) { return c >= 0 && c < cores_; };
  switch (t.kind) {
    case TaskKind::Compute:
      if (!core_ok(t.core))
        invalid("task '" + t.name + "' runs on core " + std::to_string(t.core) + " of " +
                std::to_string(cores_));
      if (!(t.seconds >= 0) || !std::isfinite(t.seconds))
        invalid("task '" + t.name + "' has duration " + std::to_string(t.seconds));
      break;
    case TaskKind::Transfer:
      if (!core_ok(t.src_core) || !core_ok(t.dst_core))
        invalid("transfer '" + t.name + "' names a core outside the slice");
      if (!(t.bytes >= 0)) invalid("transfer '" + t.name + "' moves a negative byte count");
      break;
    case TaskKind::Collective: {
      std::set<int> seen;
      for (const auto& group : t.collective_groups()) {
        if (group.empty()) invalid("collective '" + t.name + "' has an empty group");
        for (int c : group) {
          if (!core_ok(c))
            invalid("collective '" + t.name + "' names core " + std::to_string(c) + " outside the slice");
          if (!seen.insert(c).second)
            invalid("collective '" + t.name + "' lists core " + std::to_string(c) + " twice");
        }
      }
      if (!(t.bytes >= 0)) invalid("collective '" + t.name + "' has a negative payload");
      break;
    }
  }
  for (const auto& m : t.memory)
    if (!core_ok(m.core))
      invalid("task '" + t.name + "' has a memory effect on core " + std::to_string(m.core));
}

void TaskGraph::validate_acyclic() const {
  // Dependencies plus program order must be acyclic, or some core would wait forever.
  if (topological_order().size() != tasks_.size())
    invalid("the dependencies together with the per-core program order contain a cycle");
}

void TaskGraph::validate_memory_balance() const {
  // A step leaves memory as it found it.
  std::vector<std::array<double, kMemoryCategories>> net(cores_);
  for (auto& n : net) n.fill(0.0);
  double largest = 1.0;
  for (const auto& t : tasks_)
    for (const auto& m : t.memory) {
      net[m.core][int(m.category)] += m.bytes;
      largest = std::max(largest, std::fabs(m.bytes));
    }
  for (int c = 0; c < cores_; ++c)
    for (int k = 0; k < kMemoryCategories; ++k)
      if (std::fabs(net[c][k]) > 1e-9 * largest) {
        invalid("core " + std::to_string(c) + " ends the step with " + std::to_string(net[c][k]) +
                " bytes of " + to_string(MemoryCategory(k)) +
                " allocated and not freed (or freed and not allocated)");
      }
}

void TaskGraph::validate() const {
  for (const auto& t : tasks_) validate_task(t);
  validate_acyclic();
  validate_memory_balance();
}

int TaskGraph::most_resident_core() const {
  int best = -1;
  for (int c = 0; c < cores_; ++c)
    if (resident_bytes(c) > (best < 0 ? 0.0 : resident_bytes(best))) best = c;
  return best;
}

double TaskGraph::resident_bytes(int core) const {
  double bytes = 0;
  for (double b : resident_[std::size_t(core)]) bytes += b;
  return bytes;
}

int TaskGraph::floor_slot(int id, const MemoryEffect& m, const std::vector<int>& place) const {
  const Task& t = tasks_[std::size_t(id)];
  if (t.kind == TaskKind::Compute && t.core == m.core)
    return 2 * place[std::size_t(id)] + (m.when == MemoryEffect::When::Start ? 1 : 2);
  const auto own = [&](int other) {
    const Task& o = tasks_[std::size_t(other)];
    return o.kind == TaskKind::Compute && o.core == m.core;
  };
  if (m.bytes > 0) {  // made by the start of the first of the core's tasks that waits for it
    int first = -1;
    for_each_successor(id, [&](int s) {
      if (own(s) && (first < 0 || place[std::size_t(s)] < first)) first = place[std::size_t(s)];
    });
    return first < 0 ? -1 : 2 * first + 1;
  }
  int last = -1;  // a release: possibly made as soon as the last of the core's tasks it waits for ends
  for (int p : predecessors(id))
    if (own(p)) last = std::max(last, place[std::size_t(p)]);
  return last < 0 ? 0 : 2 * last + 2;
}

std::vector<double> TaskGraph::memory_floors() const {
  std::vector<int> place(tasks_.size(), -1);  // a compute task's index in its core's program
  // Per core, the change of what it holds at each slot of its program: 0 before its first task,
  // 2k + 1 the start of its k-th, 2k + 2 its end.
  std::vector<std::vector<double>> change(static_cast<std::size_t>(cores_));
  for (int core = 0; core < cores_; ++core) {
    const auto& program = programs_[std::size_t(core)];
    for (std::size_t k = 0; k < program.size(); ++k) place[std::size_t(program[k])] = int(k);
    change[std::size_t(core)].assign(2 * program.size() + 1, 0.0);
  }
  for (int id = 0; id < size(); ++id)
    for (const auto& m : tasks_[std::size_t(id)].memory)
      if (const int slot = floor_slot(id, m, place); slot >= 0)
        change[std::size_t(m.core)][std::size_t(slot)] += m.bytes;
  std::vector<double> floors(static_cast<std::size_t>(cores_), 0.0);
  for (int core = 0; core < cores_; ++core) {
    double held = 0, most = 0;
    for (double d : change[std::size_t(core)]) most = std::max(most, held += d);
    floors[std::size_t(core)] = resident_bytes(core) + most;
  }
  return floors;
}

double TaskGraph::critical_path(const std::vector<double>& seconds) const {
  // Each task ends no sooner than its start, the latest end of what precedes it; in topological
  // order every predecessor is done first.
  std::vector<double> start(tasks_.size(), 0.0);
  double longest = 0;
  for (std::size_t v : topological_order()) {
    const double end = start[v] + seconds[v];
    longest = std::max(longest, end);
    for (auto [it, stop] = boost::adjacent_vertices(Vertex(v), adjacency().order); it != stop; ++it)
      start[*it] = std::max(start[*it], end);
  }
  return longest;
}

bool TaskGraph::chain(const std::vector<int>& tasks) const {
  if (tasks.size() < 2) return true;
  const std::vector<std::size_t> topological = topological_order();
  std::vector<int> rank(std::size_t(size()), -1);  // a member's place in the chain
  for (int id : tasks) rank[std::size_t(id)] = 0;
  int next = 0;
  for (std::size_t v : topological)
    if (rank[v] == 0) rank[v] = next++;
  // Per task, the latest member among its ancestors: a member's must be the one just before it.
  std::vector<int> latest(std::size_t(size()), -1);
  const auto& g = adjacency().order;
  for (std::size_t v : topological) {
    if (rank[v] > 0 && latest[v] != rank[v] - 1) return false;
    const int passed = rank[v] >= 0 ? rank[v] : latest[v];
    for (auto [it, end] = boost::adjacent_vertices(Vertex(v), g); it != end; ++it)
      latest[*it] = std::max(latest[*it], passed);
  }
  return true;
}

bool TaskGraph::ordered(const std::vector<int>& a, const std::vector<int>& b, double max_bytes) const {
  const std::size_t n = std::size_t(size());
  const std::size_t words_a = (a.size() + 63) / 64, words_b = (b.size() + 63) / 64;
  if (double(n) * double(words_a + words_b) * 8.0 > max_bytes) return false;
  const auto& g = adjacency().order;
  const std::vector<std::size_t> topological = topological_order();
  // Per task, a bit per member of `set` among its ancestors, carried forward in topological order.
  auto ancestors_in = [&](const std::vector<int>& set, std::size_t words) {
    std::vector<std::uint64_t> bits(n * words, 0);
    std::vector<int> index(n, -1);
    for (std::size_t k = 0; k < set.size(); ++k) index[std::size_t(set[k])] = int(k);
    for (std::size_t v : topological) {
      const std::uint64_t* from = &bits[v * words];
      for (auto [it, end] = boost::adjacent_vertices(Vertex(v), g); it != end; ++it) {
        std::uint64_t* to = &bits[std::size_t(*it) * words];
        for (std::size_t w = 0; w < words; ++w) to[w] |= from[w];
        if (const int k = index[v]; k >= 0) to[std::size_t(k) / 64] |= std::uint64_t(1) << (k % 64);
      }
    }
    return bits;
  };
  const auto above_a = ancestors_in(a, words_a), above_b = ancestors_in(b, words_b);
  auto has = [](const std::vector<std::uint64_t>& bits, std::size_t words, int task, std::size_t k) {
    return (bits[std::size_t(task) * words + k / 64] >> (k % 64)) & 1;
  };
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < b.size(); ++j)
      if (!has(above_a, words_a, b[j], i) && !has(above_b, words_b, a[i], j)) return false;
  return true;
}

}  // namespace tpusim::sim
