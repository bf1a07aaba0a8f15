// Recursive doubling (halving for a reduce-scatter), the latency-optimal algorithm collective
// libraries switch to for small buffers: with N = 2^m members, m steps, in each of which every
// member exchanges with the member whose index differs in one bit, instead of a ring's
// 2 (N - 1) steps. The members are indexed on the group's sub-grid (the core's index on its chip,
// then its position along each spanned torus dimension, in dimension order), so the first steps
// pair the cores of a chip, then chips 1, 2, 4, ... apart along each dimension: a step's pairs
// route over that many hops. It takes groups whose cores per chip and chips along every spanned
// dimension are powers of two, and only buffers up to the hardware's
// chip.latency_collective_max_bytes (its steps move the whole buffer over long routes).
// Without other traffic, an all-reduce of S costs the sum over its steps of
// (h_s a + S / B): h_s the step's hops (min(2^k, p - 2^k) on a wrapping dimension of p chips,
// 2^k on a line; the on-chip link's latency for the on-chip steps); a reduce-scatter moves
// S / 2^(s+1) in step s, an all-gather S 2^s / N, in reverse order.
#include <algorithm>
#include <map>

#include "sim/collectives/collective_algorithm.hpp"

namespace tpusim::sim {
namespace {

bool power_of_two(std::size_t n) { return n > 0 && (n & (n - 1)) == 0; }

/// The group's members by their digits: on-chip index, then the position along each spanned
/// dimension; and the bit sequence (digit, bit) of the steps.
struct Hypercube {
  std::vector<std::size_t> radix;                         ///< per digit: its size (a power of two)
  std::map<std::vector<std::size_t>, int> core_at;        ///< digits -> core
  std::vector<std::pair<std::size_t, std::size_t>> bits;  ///< (digit, bit) in step order
};

Hypercube hypercube(const Topology& topology, const GroupShape& shape) {
  Hypercube h;
  h.radix.push_back(shape.cores_of_chip.begin()->second.size());
  for (int d : shape.spanned) h.radix.push_back(shape.coordinates[std::size_t(d)].size());
  for (const auto& [chip, cores] : shape.cores_of_chip) {
    std::vector<std::size_t> digits(h.radix.size());
    for (std::size_t k = 0; k < shape.spanned.size(); ++k) {
      const auto& c = shape.coordinates[std::size_t(shape.spanned[k])];
      digits[k + 1] = std::size_t(
          std::lower_bound(c.begin(), c.end(), topology.coord(chip, shape.spanned[k])) - c.begin());
    }
    for (std::size_t j = 0; j < cores.size(); ++j) {
      digits[0] = j;
      h.core_at[digits] = cores[j];
    }
  }
  for (std::size_t digit = 0; digit < h.radix.size(); ++digit)
    for (std::size_t bit = 1; bit < h.radix[digit]; bit <<= 1) h.bits.emplace_back(digit, bit);
  return h;
}

class RecursiveDoubling : public CollectiveAlgorithm {
 public:
  std::string name() const override { return "recursive_doubling"; }
  std::string description() const override {
    return "for buffers up to chip.latency_collective_max_bytes: log2 N steps, each member exchanging "
           "with the member one bit away on the group's sub-grid (cores of a chip, then chips 1, 2, 4, "
           "... apart along each dimension): an all-reduce costs the sum over steps of (h_s a + S/B)";
  }
  bool latency_optimal() const override { return true; }
  bool supports(const Topology& topology, int cores_per_chip, CollectiveOp op,
                const std::vector<int>& group) const override {
    if (op == CollectiveOp::AllToAll) return false;
    const GroupShape shape = group_shape(topology, cores_per_chip, group);
    if (!shape.grid || !power_of_two(shape.cores_of_chip.begin()->second.size())) return false;
    for (int d : shape.spanned)
      if (!power_of_two(shape.coordinates[std::size_t(d)].size())) return false;
    return true;
  }
  std::vector<Phase> plan(const Topology& topology, int cores_per_chip, CollectiveOp op,
                          const std::vector<int>& group, double bytes) const override {
    std::vector<Phase> plan;
    if (group.size() < 2 || bytes <= 0) return plan;
    const Hypercube h = hypercube(topology, group_shape(topology, cores_per_chip, group));
    const double n = double(group.size());
    std::vector<std::pair<std::size_t, std::size_t>> order = h.bits;
    if (op == CollectiveOp::AllGather) std::reverse(order.begin(), order.end());
    double chunk = op == CollectiveOp::AllGather ? bytes / n : bytes;
    for (const auto& [digit, bit] : order) {
      if (op == CollectiveOp::ReduceScatter) chunk /= 2;
      plan.push_back(step(h, digit, bit, chunk, op));
      if (op == CollectiveOp::AllGather) chunk *= 2;
    }
    return plan;
  }

 private:
  /// One step: every member paired with the member whose `digit` differs in `bit`; the pairs of
  /// the first chip (on-chip steps) or the first line along the dimension are representative.
  static Phase step(const Hypercube& h, std::size_t digit, std::size_t bit, double chunk, CollectiveOp op) {
    Phase phase{std::string(to_string(op)) + " pairs " +
                    (digit == 0 ? "on-chip" : "dim " + std::to_string(digit)) + " " + std::to_string(bit),
                {}};
    for (const auto& [digits, core] : h.core_at) {
      if (digits[digit] & bit) continue;
      std::vector<std::size_t> partner = digits;
      partner[digit] |= bit;
      bool first = true;
      for (std::size_t k = 1; k < digits.size(); ++k) first = first && (k == digit || digits[k] == 0);
      phase.rings.push_back(PlannedRing{{core, h.core_at.at(partner)}, chunk, 1, first, {}, false});
    }
    return phase;
  }
};

}  // namespace

std::unique_ptr<CollectiveAlgorithm> make_recursive_doubling() {
  return std::make_unique<RecursiveDoubling>();
}

}  // namespace tpusim::sim
