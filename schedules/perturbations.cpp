#include "schedules/perturbations.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numbers>
#include <random>
#include <string>

#include "hardware/detours.hpp"

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

/// The slowest and fastest a perturbed chip or link may be against its specification: a part a
/// thousand times slower than specified is a broken machine, not a straggler (a scale of 1e-300
/// made a step of 1e296 s), and a failed link is said with 0.
constexpr double kMinScale = 1e-3, kMaxScale = 1e3;

/// A scale in [0.001, 1000], or also 0 for a link (0: failed, routes go round it). Optional (1)
/// unless `required`.
double scale_of(Fields& f, const std::string& key, bool required = false, bool link = false) {
  const Json* v = required ? f.value(key) : f.optional(key);
  if (!v) return 1.0;
  if (v->is_number()) {
    const double x = v->get<double>();
    if ((x >= kMinScale && x <= kMaxScale) || (link && x == 0)) return x;
  }
  f.problems().add(f.path_of(key), *v,
                   link ? "a scale in [0.001, 1000] (1: as specified), or 0: the link has failed"
                        : "a scale in [0.001, 1000] (1: as specified)");
  return 1.0;
}

/// Refuses a chip or link listed twice (the last would silently win): `seen` maps each listed
/// chip's rank (or link's id) to the path that listed it first.
bool listed_once(Fields& f, std::map<int, std::string>& seen, int id, const char* what) {
  const auto [it, fresh] = seen.emplace(id, f.path());
  if (!fresh)
    f.problems().add(f.path(), std::string("a ") + what + " listed again",
                     std::string("each ") + what + " listed once (it is listed at " + it->second + ")");
  return fresh;
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

void read_chip(Fields& f, const Topology& torus, NetworkState& state, std::map<int, std::string>& seen) {
  const int chip = chip_at(f, torus);
  const double scale = scale_of(f, "compute_scale", true);
  // HBM's bandwidth apart from the compute rates; absent: the chip throttled as a whole.
  const double hbm = f.has("hbm_bandwidth_scale") ? scale_of(f, "hbm_bandwidth_scale", true) : scale;
  if (chip < 0 || !listed_once(f, seen, chip, "chip")) return;
  state.chip_speed_scale[std::size_t(chip)] = scale;
  if (hbm != scale && state.chip_hbm_scale.empty()) state.chip_hbm_scale = state.chip_speed_scale;
  if (!state.chip_hbm_scale.empty()) state.chip_hbm_scale[std::size_t(chip)] = hbm;
}

void read_link(Fields& f, const Topology& torus, NetworkState& state, std::map<int, std::string>& seen) {
  const int chip = chip_at(f, torus), dim = dimension_of(f, torus);
  const std::string direction = f.string("direction", {"+", "-"});
  const double scale = scale_of(f, "bandwidth_scale", true, true);
  if (chip < 0 || dim < 0 || direction.empty()) return;
  const LinkDirection d{dim, direction == "+"};
  if (!torus.link_exists(chip, d)) {
    f.problems().add(f.path(), std::string("a link with no neighbour there"),
                     std::string("a link between two chips of the slice"));
    return;
  }
  if (!listed_once(f, seen, torus.link_id(chip, d), "link")) return;
  state.link_bandwidth_scale[std::size_t(torus.link_id(chip, d))] = scale;
}

/// A uniform draw in [0, 1) from the generator's raw output (53 bits), the same on every platform
/// (the standard library's distributions are not).
double uniform01(std::mt19937_64& g) { return double(g() >> 11) * 0x1.0p-53; }

/// A random straggler's scale: one value, or drawn per slow chip (or link) from a named
/// distribution: {"distribution": "uniform", "low", "high"} or {"distribution": "normal", "mean",
/// "sd"} (clamped to [0.001, 1000]; a normal draw by Box-Muller from two uniform draws).
struct ScaleDraw {
  enum Kind { Fixed, Uniform, Normal } kind = Fixed;
  double a = 1, b = 0;  ///< Fixed: the scale; Uniform: low, high; Normal: mean, sd
  double operator()(std::mt19937_64& g) const {
    if (kind == Fixed) return a;
    const double u = uniform01(g);
    const double x = kind == Uniform ? a + (b - a) * u
                                     : a + b * std::sqrt(-2.0 * std::log1p(-u)) *
                                               std::cos(2 * std::numbers::pi * uniform01(g));
    return std::clamp(x, kMinScale, kMaxScale);
  }
};

/// `key`: a scale (scale_of) or a distribution of scales in [0.001, 1000].
ScaleDraw scale_draw(Fields& f, const std::string& key, bool link) {
  const Json* v = f.value(key);
  if (!v || !v->is_object()) return {ScaleDraw::Fixed, scale_of(f, key, true, link)};
  Fields d(*v, f.path_of(key), f.problems());
  const std::string kind = d.string("distribution", {"uniform", "normal"});
  ScaleDraw draw;
  if (kind == "uniform") {
    draw = {ScaleDraw::Uniform, d.number("low", kMinScale, kMaxScale),
            d.number("high", kMinScale, kMaxScale)};
    if (f.problems().empty() && draw.b < draw.a)
      f.problems().add(d.path_of("high"), Json(draw.b), "a scale at least low (" + Json(draw.a).dump() + ")");
  } else if (kind == "normal") {
    draw = {ScaleDraw::Normal, d.number("mean", kMinScale, kMaxScale), d.number("sd", 0.0, kMaxScale)};
  }
  d.finish();
  return draw;
}

/// "random": {"seed", "slow_chip_fraction", "compute_scale", "slow_link_fraction",
/// "link_bandwidth_scale"}: each chip (in rank order), then each existing directed link (in id
/// order), is slow with its probability, from one seeded Mersenne Twister; a slow one's scale is
/// drawn right after it where the scale is a distribution.
void read_random(Fields& f, const Topology& torus, NetworkState& state) {
  const auto seed = f.integer("seed", 0, std::numeric_limits<std::int64_t>::max());
  const double chips = f.has("slow_chip_fraction") ? f.number("slow_chip_fraction", 0, 1) : 0.0;
  const double links = f.has("slow_link_fraction") ? f.number("slow_link_fraction", 0, 1) : 0.0;
  const ScaleDraw chip_scale =
      chips > 0 || f.has("compute_scale") ? scale_draw(f, "compute_scale", false) : ScaleDraw{};
  const ScaleDraw link_scale =
      links > 0 || f.has("link_bandwidth_scale") ? scale_draw(f, "link_bandwidth_scale", true) : ScaleDraw{};
  if (!f.problems().empty()) return;
  std::mt19937_64 g{std::uint64_t(seed)};  // seed >= 0: read as such
  for (int chip = 0; chip < torus.chips(); ++chip)
    if (uniform01(g) < chips) state.chip_speed_scale[std::size_t(chip)] = chip_scale(g);
  for (int link = 0; link < torus.link_id_bound(); ++link) {
    const bool exists = torus.link_exists(torus.link_source(link), torus.link_direction(link));
    if (exists && uniform01(g) < links) state.link_bandwidth_scale[std::size_t(link)] = link_scale(g);
  }
}

}  // namespace

NetworkState read_perturbations(const Json& perturbations, const Topology& torus, Problems& problems) {
  NetworkState state;
  state.chip_speed_scale.assign(std::size_t(torus.chips()), 1.0);
  state.link_bandwidth_scale.assign(std::size_t(torus.link_id_bound()), 1.0);
  Fields top(perturbations, "perturbations", problems);
  if (!top.ok()) return state;
  if (const Json* random = top.optional("random")) {  // drawn first: listed chips and links override
    Fields r(*random, top.path_of("random"), problems);
    if (r.ok()) {
      read_random(r, torus, state);
      r.finish();
    }
  }
  for (const char* key : {"chips", "links"}) {
    const Json* list = top.optional(key);
    if (!list) continue;
    if (!list->is_array()) {
      problems.add(top.path_of(key), *list, "an array of objects");
      continue;
    }
    std::map<int, std::string> seen;
    for (std::size_t i = 0; i < list->size(); ++i) {
      Fields item((*list)[i], index_path(top.path_of(key), i), problems);
      if (!item.ok()) continue;
      if (std::string(key) == "chips")
        read_chip(item, torus, state, seen);
      else
        read_link(item, torus, state, seen);
      item.finish();
    }
  }
  top.finish();
  if (problems.empty()) {
    const auto cut = Detours(torus, state).cut_off();
    if (!cut.empty()) {
      Json chips = Json::array();
      for (std::size_t i = 0; i < cut.size() && i < 8; ++i) chips.push_back(torus.coord(cut[i]));
      problems.add("perturbations", Json{{"cut_off_chips", chips}, {"count", cut.size()}},
                   "failed links that leave every chip able to reach every other (a synchronous step "
                   "cannot run on a slice cut in parts)");
    }
  }
  return state;
}

}  // namespace tpusim
