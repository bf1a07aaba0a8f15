// Helpers shared by the tests: shipped hardware, custom slices, tiny graphs.
#pragma once

#include <catch2/catch.hpp>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "hardware/hardware_spec.hpp"
#include "sim/task_graph.hpp"

namespace tpusim::test {

/// The JSON paths of the problems of the ConfigError `f` throws (the test fails if it throws none).
inline std::vector<std::string> problem_paths(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    std::vector<std::string> paths;
    for (const auto& p : e.problems()) paths.push_back(p.path);
    return paths;
  }
  FAIL("no ConfigError thrown");
  return {};
}

inline HardwareSpec v3() { return load_hardware("tpu-v3"); }

inline SliceSpec slice(int x, int y, bool wrap_x, bool wrap_y) {
  SliceSpec s;
  s.name = "test";
  s.shape = {x, y};
  s.wraparound = {wrap_x, wrap_y};
  return s;
}

/// A slice of any shape (wrap-around per dimension).
inline SliceSpec slice(std::vector<int> shape, std::vector<bool> wraparound) {
  SliceSpec s;
  s.name = "test";
  s.shape = std::move(shape);
  s.wraparound = std::move(wraparound);
  return s;
}

inline sim::Task compute(int core, double seconds, std::string name = "c") {
  sim::Task t;
  t.kind = sim::TaskKind::Compute;
  t.core = core;
  t.seconds = seconds;
  t.name = std::move(name);
  t.phase = "forward";
  return t;
}

inline sim::Task transfer(int src, int dst, double bytes) {
  sim::Task t;
  t.kind = sim::TaskKind::Transfer;
  t.src_core = src;
  t.dst_core = dst;
  t.bytes = bytes;
  t.name = "xfer " + std::to_string(src) + "->" + std::to_string(dst);
  t.phase = "transfer";
  return t;
}

inline sim::Task collective(sim::CollectiveOp op, std::vector<int> group, double bytes) {
  sim::Task t;
  t.kind = sim::TaskKind::Collective;
  t.op = op;
  t.group = std::move(group);
  t.bytes = bytes;
  t.name = "collective";
  t.phase = "allreduce";
  return t;
}

/// Whether task `id` of `g` waits for every core's last backward task (in its program): it
/// starts only once the whole backward has finished.
inline bool waits_for_whole_backward(const sim::TaskGraph& g, int id) {
  std::set<int> last;
  for (int c = 0; c < g.cores(); ++c) {
    int l = -1;
    for (int t : g.program(c))
      if (g.task(t).phase == "backward") l = t;
    if (l >= 0) last.insert(l);
  }
  int waits = 0;
  for (int p : g.predecessors(id)) waits += last.count(p) ? 1 : 0;
  return waits == int(last.size());
}

}  // namespace tpusim::test
