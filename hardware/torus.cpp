#include "hardware/torus.hpp"

#include <algorithm>
#include <cstdlib>

namespace tpusim {

Torus::Torus(int chips_x, int chips_y, bool wrap_x, bool wrap_y)
    : dims_{chips_x, chips_y}, wrap_{wrap_x && chips_x > 2, wrap_y && chips_y > 2} {}

int Torus::distance(int from, int to, int dim) const {
  const int d = std::abs(to - from);
  return wrap_[dim] ? std::min(d, dims_[dim] - d) : d;
}

int Torus::diameter() const {
  const auto extent = [&](int dim) { return wrap_[dim] ? dims_[dim] / 2 : dims_[dim] - 1; };
  return extent(0) + extent(1);
}

bool Torus::link_exists(int from, Direction d) const {
  const Coord c = coord(from);
  const int dim = (d == Direction::PlusX || d == Direction::MinusX) ? 0 : 1;
  const bool plus = (d == Direction::PlusX || d == Direction::PlusY);
  const int pos = dim == 0 ? c.x : c.y;
  if (dims_[dim] == 1) return false;
  if (wrap_[dim]) return true;
  return plus ? pos + 1 < dims_[dim] : pos > 0;
}

int Torus::link_target(int from, Direction d) const {
  Coord c = coord(from);
  switch (d) {
    case Direction::PlusX:
      c.x = (c.x + 1) % dims_[0];
      break;
    case Direction::MinusX:
      c.x = (c.x + dims_[0] - 1) % dims_[0];
      break;
    case Direction::PlusY:
      c.y = (c.y + 1) % dims_[1];
      break;
    case Direction::MinusY:
      c.y = (c.y + dims_[1] - 1) % dims_[1];
      break;
  }
  return rank(c);
}

int Torus::link_count() const {
  int n = 0;
  for (int r = 0; r < chips(); ++r)
    for (int d = 0; d < 4; ++d) n += link_exists(r, Direction(d)) ? 1 : 0;
  return n;
}

std::vector<int> Torus::route(int from_rank, int to_rank) const {
  std::vector<int> links;
  Coord at = coord(from_rank);
  const Coord to = coord(to_rank);
  for (int dim = 0; dim < 2; ++dim) {
    int& pos = dim == 0 ? at.x : at.y;
    const int target = dim == 0 ? to.x : to.y;
    if (pos == target) continue;
    const int n = dims_[dim];
    const int forward = (target - pos + n) % n;  // hops going +
    bool plus = target > pos;
    if (wrap_[dim]) plus = forward <= n - forward;
    const Direction d = dim == 0 ? (plus ? Direction::PlusX : Direction::MinusX)
                                 : (plus ? Direction::PlusY : Direction::MinusY);
    while (pos != target) {
      links.push_back(link_id(rank(at), d));
      pos = plus ? (pos + 1) % n : (pos + n - 1) % n;
    }
  }
  return links;
}

std::vector<Ring> Torus::rings_along(const std::vector<int>& members, int dim) const {
  const int p = int(members.size());
  if (p <= 1) return {};
  if (p == dims_[dim] && wrap_[dim]) {
    Ring forward{members, 0.5};
    Ring backward{std::vector<int>(members.rbegin(), members.rend()), 0.5};
    return {forward, backward};
  }
  Ring folded;
  folded.share = 1.0;
  for (int i = 0; i < p; i += 2) folded.order.push_back(members[i]);
  for (int i = (p % 2 == 0) ? p - 1 : p - 2; i > 0; i -= 2) folded.order.push_back(members[i]);
  return {folded};
}

int Torus::bisection_links() const {
  // Cut across the longer dimension (the narrowest cut into equal halves); a wrapping
  // dimension is crossed twice by every ring.
  int best = -1;
  for (int dim = 0; dim < 2; ++dim) {
    if (dims_[dim] < 2) continue;
    const int other = dims_[1 - dim];
    const int crossing = other * (wrap_[dim] ? 2 : 1);
    if (best < 0 || crossing < best) best = crossing;
  }
  return std::max(best, 0);
}

}  // namespace tpusim
