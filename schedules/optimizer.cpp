#include "schedules/optimizer.hpp"

namespace tpusim {

namespace {

/// Per-parameter cost of each update rule: element operations, and fp32 tensors read and
/// written (weight, gradient, slots). LARS also reads weight and gradient once more for its
/// per-layer norms.
struct Rule {
  const char* kind;
  double slots;           // whole-tensor slots (Adafactor: see slot_elements)
  double ops_per_param;   // VPU element operations
  double tensors_moved;   // fp32 tensors read + written per parameter
};

constexpr Rule kRules[] = {
    {"sgd", 0, 2, 3},        // read w, g; write w
    {"momentum", 1, 4, 5},   // read w, g, m; write w, m
    {"rmsprop", 1, 7, 5},    // read w, g, ms; write w, ms (square, scale, add, sqrt, divide)
    {"adam", 2, 12, 7},      // read w, g, m, v; write w, m, v
    {"lars", 1, 8, 7},       // momentum + norms of w and g (two extra reads)
    {"adafactor", 0, 12, 3}, // read w, g; write w; factored statistics are small
};

const Rule& rule(const std::string& kind) {
  for (const auto& r : kRules)
    if (kind == r.kind) return r;
  return kRules[0];
}

}  // namespace

const std::vector<std::string>& optimizer_kinds() {
  static const std::vector<std::string> kinds = [] {
    std::vector<std::string> k;
    for (const auto& r : kRules) k.push_back(r.kind);
    return k;
  }();
  return kinds;
}

double Optimizer::slot_elements(const Layer& layer) const {
  if (kind != "adafactor") return rule(kind).slots * double(layer.params());
  double total = 0;
  for (const auto& shape : layer.weights) {
    if (shape.size() >= 2) {
      double lead = 1;
      for (std::size_t i = 0; i + 2 < shape.size(); ++i) lead *= double(shape[i]);
      total += lead * double(shape[shape.size() - 2] + shape.back());
    } else {
      double n = 1;
      for (auto d : shape) n *= double(d);
      total += n;
    }
  }
  return total;
}

Op Optimizer::update_op(const Layer& layer, double fraction) const {
  const Rule& r = rule(kind);
  const double params = double(layer.params()) * fraction;
  Op op = vector_op("update_" + layer.name, params, r.ops_per_param, kWeightBytes, false);
  op.bytes = params * r.tensors_moved * kWeightBytes + slot_elements(layer) * fraction * (kind == "adafactor" ? 8.0 : 0.0);
  return op;
}

Optimizer parse_optimizer(const Json& json, const std::string& path, Problems& problems) {
  Optimizer o;
  Fields f(json, path, problems);
  if (!f.ok()) return o;
  o.kind = f.string("kind", optimizer_kinds());
  // Functional mode's step size; the defaults are the usual starting points for each rule.
  const double fallback = o.kind == "adam" || o.kind == "rmsprop" ? 1e-3 : o.kind == "momentum" ? 0.01 : 0.1;
  o.learning_rate = f.positive_or("learning_rate", fallback);
  f.finish();
  return o;
}

}  // namespace tpusim
