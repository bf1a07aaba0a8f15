#include "schedules/optimizer.hpp"

namespace tpusim {

const std::map<std::string, std::shared_ptr<const OptimizerRule>>& optimizer_rules() {
  static const std::map<std::string, std::shared_ptr<const OptimizerRule>> rules = {
      {"adafactor", make_adafactor()}, {"adam", make_adam()}, {"adamw", make_adamw()},
      {"lamb", make_lamb()},           {"lars", make_lars()}, {"momentum", make_momentum()},
      {"rmsprop", make_rmsprop()},     {"sgd", make_sgd()},
  };
  return rules;
}

const std::vector<std::string>& optimizer_kinds() {
  static const std::vector<std::string> kinds = [] {
    std::vector<std::string> k;
    for (const auto& [kind, rule] : optimizer_rules()) k.push_back(kind);
    return k;
  }();
  return kinds;
}

Op Optimizer::update_op(const Model& model, const Layer& layer, double fraction) const {
  const OptimizerRule::Cost c = rule->cost();
  const double params = double(layer.params()) * fraction;
  Op op = vector_op("update_" + layer.name, params, c.vpu_ops_per_param, model.weight_bytes, false);
  const double slot_moves = 2.0 * rule->slots();
  op.bytes = params * ((c.tensors_moved - slot_moves) * model.weight_bytes + slot_moves * model.slot_bytes) +
             rule->extra_update_elements(layer) * fraction * model.slot_bytes;
  return op;
}

Optimizer parse_optimizer(const Json& json, const std::string& path, Problems& problems) {
  Optimizer o;
  Fields f(json, path, problems);
  if (!f.ok()) return o;
  o.kind = f.string("kind", optimizer_kinds());
  if (optimizer_rules().count(o.kind)) o.rule = optimizer_rules().at(o.kind);
  o.learning_rate = f.positive_or("learning_rate", o.rule->default_learning_rate());
  f.finish();
  return o;
}

}  // namespace tpusim
