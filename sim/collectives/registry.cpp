// The registered collective algorithms: one line each (the algorithm lives in its own file).
#include "sim/collectives/collective_algorithm.hpp"

namespace tpusim::sim {

std::unique_ptr<CollectiveAlgorithm> make_all_to_all_by_dimension();
std::unique_ptr<CollectiveAlgorithm> make_dcn_rings();
std::unique_ptr<CollectiveAlgorithm> make_hierarchical_rings();
std::unique_ptr<CollectiveAlgorithm> make_parallel_rings();
std::unique_ptr<CollectiveAlgorithm> make_recursive_doubling();
std::unique_ptr<CollectiveAlgorithm> make_snake_ring();

const std::map<std::string, std::unique_ptr<CollectiveAlgorithm>>& collective_algorithms() {
  static const auto all = [] {
    std::map<std::string, std::unique_ptr<CollectiveAlgorithm>> m;
    for (auto make : {make_all_to_all_by_dimension, make_dcn_rings, make_hierarchical_rings,
                      make_parallel_rings, make_recursive_doubling, make_snake_ring}) {
      auto a = make();
      const std::string name = a->name();
      m.emplace(name, std::move(a));
    }
    return m;
  }();
  return all;
}

}  // namespace tpusim::sim
