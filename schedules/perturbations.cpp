#include "schedules/perturbations.hpp"

#include <string>

namespace tpusim {

namespace {

/// The chip at `coords` ("chip": one coordinate per torus dimension), or -1 with a problem.
int chip_at(Fields& f, const Topology& torus) {
  const Json* c = f.value("chip");
  if (!c) return -1;
  bool ok = c->is_array() && int(c->size()) == torus.dims();
  std::vector<int> coords;
  for (std::size_t d = 0; ok && d < c->size(); ++d) {
    ok = (*c)[d].is_number_integer() && (*c)[d].get<std::int64_t>() >= 0 &&
         (*c)[d].get<std::int64_t>() < torus.size(int(d));
    if (ok) coords.push_back(int((*c)[d].get<std::int64_t>()));
  }
  if (ok) return torus.rank(coords);
  std::string shape;
  for (int d = 0; d < torus.dims(); ++d) shape += (d ? " x " : "") + std::to_string(torus.size(d));
  f.problems().add(f.path_of("chip"), *c,
                   "a chip's coordinates on the slice's " + shape + " torus, one per dimension from 0");
  return -1;
}

/// A scale in (0, 1000]; a failed link (0) is not modelled (its routes would not avoid it).
double scale_of(Fields& f, const std::string& key) {
  const Json* v = f.value(key);
  if (!v) return 1.0;
  if (v->is_number() && v->get<double>() > 0 && v->get<double>() <= 1000) return v->get<double>();
  f.problems().add(f.path_of(key), *v,
                   "a scale in (0, 1000] (1: as specified; a failed link, 0, is not modelled yet: routes do "
                   "not avoid it)");
  return 1.0;
}

/// "dimension": "x", "y", "z" or an index from 0.
int dimension_of(Fields& f, const Topology& torus) {
  const Json* v = f.value("dimension");
  if (!v) return -1;
  for (int d = 0; d < torus.dims(); ++d)
    if ((v->is_string() && v->get<std::string>() == torus.dimension(d).name) ||
        (v->is_number_integer() && v->get<std::int64_t>() == d))
      return d;
  f.problems().add(f.path_of("dimension"), *v,
                   "one of the torus's dimensions: a name (x, y, ...) or an index from 0 to " +
                       std::to_string(torus.dims() - 1));
  return -1;
}

void read_chip(Fields& f, const Topology& torus, NetworkState& state) {
  const int chip = chip_at(f, torus);
  const double scale = scale_of(f, "compute_scale");
  if (f.has("hbm_bandwidth_scale"))
    f.problems().add(f.path_of("hbm_bandwidth_scale"), *f.value("hbm_bandwidth_scale"),
                     "no such key yet: compute_scale scales the chip's whole speed, compute and HBM alike");
  if (chip >= 0) state.chip_speed_scale[std::size_t(chip)] = scale;
}

void read_link(Fields& f, const Topology& torus, NetworkState& state) {
  const int chip = chip_at(f, torus), dim = dimension_of(f, torus);
  const std::string direction = f.string("direction", {"+", "-"});
  const double scale = scale_of(f, "bandwidth_scale");
  if (chip < 0 || dim < 0 || direction.empty()) return;
  const LinkDirection d{dim, direction == "+"};
  if (!torus.link_exists(chip, d)) {
    f.problems().add(f.path(), std::string("a link with no neighbour there"),
                     std::string("a link between two chips of the slice"));
    return;
  }
  state.link_bandwidth_scale[std::size_t(torus.link_id(chip, d))] = scale;
}

}  // namespace

NetworkState read_perturbations(const Json& perturbations, const Topology& torus, Problems& problems) {
  NetworkState state;
  state.chip_speed_scale.assign(std::size_t(torus.chips()), 1.0);
  state.link_bandwidth_scale.assign(std::size_t(torus.link_id_bound()), 1.0);
  Fields top(perturbations, "perturbations", problems);
  if (!top.ok()) return state;
  for (const char* key : {"chips", "links"}) {
    const Json* list = top.optional(key);
    if (!list) continue;
    if (!list->is_array()) {
      problems.add(top.path_of(key), *list, "an array of objects");
      continue;
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      Fields item((*list)[i], index_path(top.path_of(key), i), problems);
      if (!item.ok()) continue;
      if (std::string(key) == "chips")
        read_chip(item, torus, state);
      else
        read_link(item, torus, state);
      item.finish();
    }
  }
  top.finish();
  return state;
}

}  // namespace tpusim
