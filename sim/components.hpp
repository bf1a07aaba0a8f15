// Union-find over 0..n-1: which items a relation joins into one component (cores joined by
// transfers in the cluster reduction, collectives joined by shared links in the engine).
#pragma once

#include <cstddef>
#include <numeric>
#include <vector>

namespace tpusim::sim {

struct Components {
  std::vector<int> parent;
  explicit Components(int n) : parent(std::size_t(n)) { std::iota(parent.begin(), parent.end(), 0); }
  int root(int i) {
    while (parent[std::size_t(i)] != i)
      i = parent[std::size_t(i)] = parent[std::size_t(parent[std::size_t(i)])];
    return i;
  }
  void join(int a, int b) { parent[std::size_t(root(a))] = root(b); }
};

}  // namespace tpusim::sim
