// Parallel rings: the hierarchical rings with the payload split into one part per spanned torus
// dimension, part i taking the dimensions in rotated order (i, i + 1, ...), so that in every
// phase each dimension's links carry a different part and all of a chip's links are busy at
// once (the way collectives use every axis of a 3D torus together; on a torus of equal sizes it
// meets the all-reduce lower bound of 2 S (N - 1) / N bytes sent over each chip's 2D links).
// The on-chip halves are the hierarchical ones. Without other traffic, with k spanned dimensions:
// each phase j lasts the slowest of its parts, (p - 1) (a + S_ij / (2 p B)) on a whole wrapping
// dimension of p chips, S_ij = (S / k) divided by the ring sizes part i has already reduced over.
#include "sim/collectives/ring_phases.hpp"

namespace tpusim::sim {
namespace {

class ParallelRings : public rings::GridRings {
 public:
  std::string name() const override { return "parallel_rings"; }
  std::string description() const override {
    return "hierarchical rings with the payload split over the k spanned dimensions, part i in "
           "dimension order rotated by i, so every dimension's rings run at once: per phase the "
           "slowest part's (p - 1)(a + S_ij/(2 p B))";
  }

 protected:
  void torus_phases(const Topology& topology, int cores_per_chip, rings::Half half, const GroupShape& shape,
                    double bytes, std::vector<Phase>& plan) const override {
    const std::size_t k = shape.spanned.size();
    // payload[j][i]: what part i moves in step j, along dimension spanned[(i + j) % k].
    std::vector<std::vector<double>> payload(k, std::vector<double>(k));
    for (std::size_t i = 0; i < k; ++i) {
      double part = bytes / double(k);
      for (std::size_t j = 0; j < k; ++j) {
        payload[j][i] = part;
        part /= double(shape.coordinates[std::size_t(shape.spanned[(i + j) % k])].size());
      }
    }
    std::vector<std::vector<std::vector<int>>> lines;  // per spanned dimension
    for (int d : shape.spanned) lines.push_back(rings::lines_along(topology, shape, d));
    auto step = [&](std::size_t j) {
      Phase phase{
          rings::half_name(half) + " every dimension " + std::to_string(j + 1) + "/" + std::to_string(k), {}};
      for (std::size_t i = 0; i < k; ++i) {
        const std::size_t s = (i + j) % k;
        rings::add_line_rings(phase, topology, cores_per_chip, lines[s], shape.spanned[s], payload[j][i]);
      }
      plan.push_back(std::move(phase));
    };
    if (half == rings::Half::ReduceScatter)
      for (std::size_t j = 0; j < k; ++j) step(j);
    else
      for (std::size_t j = k; j-- > 0;) step(j);
  }
};

}  // namespace

std::unique_ptr<CollectiveAlgorithm> make_parallel_rings() { return std::make_unique<ParallelRings>(); }

}  // namespace tpusim::sim
