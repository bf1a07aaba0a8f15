#include "hardware/topology.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>

namespace tpusim {

Topology::Topology(std::vector<int> sizes, std::vector<bool> wraparound) {
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    const bool wrap = d < wraparound.size() && wraparound[d] && sizes[d] > 2;
    dims_.push_back(TorusDimension{dimension_name(int(d)), sizes[d], wrap});
    stride_.push_back(chips_);
    chips_ *= sizes[d];
  }
}

void Topology::join_slices(int slices, std::vector<int> host_of_chip) {
  slices_ = slices;
  hosts_ = std::move(host_of_chip);
}

int host_of_chip(const SliceSpec& slice, const ChipSpec& chip, int index) {
  int host = 0, hosts_below = 1;
  for (int d = 0; d < slice.dims(); ++d) {
    const int size = slice.shape[std::size_t(d)], board = chip.host_board_chips[std::size_t(d)];
    host += (index % size) / board * hosts_below;
    index /= size;
    hosts_below *= (size + board - 1) / board;
  }
  return host;
}

int hosts_of_slice(const SliceSpec& slice, const ChipSpec& chip) {
  return host_of_chip(slice, chip, slice.chips() - 1) + 1;
}

std::vector<int> hosts_of_chips(const SliceSpec& slice, const ChipSpec& chip) {
  std::vector<int> hosts;
  for (int r = 0; r < slice.chips(); ++r) hosts.push_back(host_of_chip(slice, chip, r));
  return hosts;
}

Topology slices_topology(const SliceSpec& slice, const ChipSpec& chip, int slices) {
  Topology t(slice);
  if (slices > 1) t.join_slices(slices, hosts_of_chips(slice, chip));
  return t;
}

std::string Topology::dimension_name(int dim) {
  static const char* const names[] = {"x", "y", "z"};
  return dim < 3 ? names[dim] : "d" + std::to_string(dim);
}

std::vector<int> Topology::coord(int rank) const {
  std::vector<int> c(dims_.size());
  for (int d = 0; d < dims(); ++d) c[std::size_t(d)] = coord(rank, d);
  return c;
}

int Topology::rank(const std::vector<int>& c) const {
  int r = 0;
  for (int d = 0; d < dims(); ++d) r += c[std::size_t(d)] * stride_[std::size_t(d)];
  return r;
}

int Topology::distance(int from, int to, int dim) const {
  const int d = std::abs(to - from);
  return wraps(dim) ? std::min(d, size(dim) - d) : d;
}

int Topology::hops(int from_rank, int to_rank) const {
  int h = 0;
  for (int d = 0; d < dims(); ++d) h += distance(coord(from_rank, d), coord(to_rank, d), d);
  return h;
}

int Topology::diameter() const {
  int h = 0;
  for (int d = 0; d < dims(); ++d) h += wraps(d) ? size(d) / 2 : size(d) - 1;
  return h;
}

bool Topology::link_exists(int rank, LinkDirection d) const {
  if (size(d.dim) == 1) return false;
  if (wraps(d.dim)) return true;
  const int pos = coord(rank, d.dim);
  return d.plus ? pos + 1 < size(d.dim) : pos > 0;
}

int Topology::link_target(int rank, LinkDirection d) const {
  const int n = size(d.dim), pos = coord(rank, d.dim);
  const int next = d.plus ? (pos + 1) % n : (pos + n - 1) % n;
  return rank + (next - pos) * stride_[std::size_t(d.dim)];
}

int Topology::link_count() const {
  int n = 0;
  for (int r = 0; r < chips_; ++r)
    for (int d = 0; d < dims(); ++d)
      for (bool plus : {true, false}) n += link_exists(r, LinkDirection{d, plus}) ? 1 : 0;
  return n;
}

std::vector<int> Topology::route(int from_rank, int to_rank) const {
  std::vector<int> links;
  int at = from_rank;
  for (int dim = 0; dim < dims(); ++dim) {
    int pos = coord(at, dim);
    const int target = coord(to_rank, dim);
    if (pos == target) continue;
    const int n = size(dim);
    const int forward = (target - pos + n) % n;  // hops going +
    bool plus = target > pos;
    if (wraps(dim)) plus = forward <= n - forward;
    const LinkDirection d{dim, plus};
    while (pos != target) {
      links.push_back(link_id(at, d));
      at = link_target(at, d);
      pos = coord(at, dim);
    }
  }
  return links;
}

std::vector<Ring> Topology::rings_along(const std::vector<int>& members, int dim) const {
  const int p = int(members.size());
  if (p <= 1) return {};
  if (p == size(dim) && wraps(dim)) {
    Ring forward{members, 0.5};
    Ring backward{std::vector<int>(members.rbegin(), members.rend()), 0.5};
    return {forward, backward};
  }
  Ring folded;
  folded.share = 1.0;
  for (int i = 0; i < p; i += 2) folded.order.push_back(members[std::size_t(i)]);
  for (int i = (p % 2 == 0) ? p - 1 : p - 2; i > 0; i -= 2) folded.order.push_back(members[std::size_t(i)]);
  return {folded};
}

namespace {

/// The snake order of `chips` over dimensions 0..last: runs along `last` in increasing
/// coordinate, each run itself in snake order over the dimensions below, every other run reversed.
std::vector<int> snake(const Topology& t, const std::vector<int>& chips, int last) {
  if (last < 0 || chips.size() < 2) return chips;
  std::map<int, std::vector<int>> runs;
  for (int c : chips) runs[t.coord(c, last)].push_back(c);
  std::vector<int> order;
  bool reversed = false;
  for (const auto& [pos, run] : runs) {
    std::vector<int> sub = snake(t, run, last - 1);
    if (reversed) std::reverse(sub.begin(), sub.end());
    order.insert(order.end(), sub.begin(), sub.end());
    reversed = !reversed;
  }
  return order;
}

}  // namespace

std::vector<int> Topology::snake_order(const std::vector<int>& chips) const {
  return snake(*this, chips, dims() - 1);
}

int Topology::bisection_links() const {
  // A cut across dimension d into two halves is crossed by every line along d: once, or twice
  // where d wraps. The narrowest such cut.
  int best = -1;
  for (int d = 0; d < dims(); ++d) {
    if (size(d) < 2) continue;
    const int crossing = chips_ / size(d) * (wraps(d) ? 2 : 1);
    if (best < 0 || crossing < best) best = crossing;
  }
  return std::max(best, 0);
}

}  // namespace tpusim
