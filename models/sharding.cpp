#include "models/sharding.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace tpusim {

const Sharding& Sharding::none() {
  static const std::map<std::string, std::string> no_layout;
  static const std::map<std::string, int> no_sizes;
  static const Sharding unsharded{no_layout, no_sizes};
  return unsharded;
}

Sharding Sharding::whole(int lanes, double weight_bytes) {
  const Sharding& n = none();
  return Sharding{n.layout, n.sizes, lanes, weight_bytes};
}

double Sharding::lane_padding(const NamedTensor& t) const {
  if (lanes <= 0 || t.weight || t.tied || t.dims.empty()) return 1.0;
  auto padding = [&](const Dim& d) {
    const double n = double(local(d));
    return n > 0 ? std::ceil(n / lanes) * lanes / n : 1.0;
  };
  double least = padding(t.dims.back());
  for (const auto& d : t.dims)
    if (d.name == "batch") least = std::min(least, padding(d));
  return least;
}

double Sharding::statistics_bytes(const NamedOp& op) const {
  if (split(op.reduce_dim) <= 1) return 0;
  for (const auto& d : op.a.dims)
    if (d.name == op.reduce_dim) return 2.0 * 4.0 * shard_elements(op.a) / double(local(d));
  return 0;
}

std::vector<std::string> Sharding::split_missing(const std::vector<const NamedTensor*>& from,
                                                 const NamedTensor& to) const {
  std::set<std::string> mesh;
  for (const NamedTensor* t : from)
    for (const auto& d : t->dims)
      if (!to.has(d.name) && layout.count(d.name)) mesh.insert(layout.at(d.name));
  return {mesh.begin(), mesh.end()};
}

}  // namespace tpusim
