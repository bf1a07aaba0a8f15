#include "models/model.hpp"

#include <cstdio>

namespace tpusim {

std::int64_t Layer::params() const {
  std::int64_t total = 0;
  for (const auto& shape : weights) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    total += n;
  }
  return total;
}

std::int64_t Model::params() const {
  std::int64_t total = 0;
  for (const auto& l : layers) total += l.params();
  return total;
}

void Model::pad_activations_to(int lanes) {
  for (auto& l : layers) l.lanes = lanes;
}

void Model::store_state_in(double weights, double slots) {
  weight_bytes = weights;
  slot_bytes = slots;
  for (auto& l : layers) l.weight_bytes = weights;
}

void Model::add(Layer layer, const std::string& call) {
  if (!call.empty()) {
    const auto [it, first] = first_of_call_.emplace(call, int(layers.size()));
    if (!first) layer.same_as = it->second;
  }
  layers.push_back(std::move(layer));
}

double Model::step_model_flops(std::int64_t batch) const {
  std::vector<double> per_layer;
  for (const auto& l : layers) {
    double flops = 0;
    if (l.same_as >= 0) {
      flops = per_layer[std::size_t(l.same_as)];
    } else {
      const LayerWork w = l.work(batch);
      for (const auto* ops : {&w.forward, &w.backward})
        for (const auto& op : *ops) flops += op.model_flops();
    }
    per_layer.push_back(flops);
  }
  double total = 0;
  for (double f : per_layer) total += f;
  return total;
}

const std::map<std::string, ModelBuilder>& model_builders() {
  static const std::map<std::string, ModelBuilder> builders = {
      {"amoebanet_d", build_amoebanet_d},
      {"bert", build_bert},
      {"mesh_lm", build_mesh_lm},
      {"mlp", build_mlp},
      {"resnet50", build_resnet50},
      {"sequential", build_sequential},
      {"ssd_resnet34", build_ssd_resnet34},
      {"transformer", build_transformer},
      {"unet", build_unet},
  };
  return builders;
}

const std::string& model_family(const std::string& kind) {
  // One line per kind: which workload family its validation cases count for.
  static const std::map<std::string, std::string> families = {
      {"amoebanet_d", "image classifiers"}, {"bert", "language models"},
      {"mesh_lm", "language models"},       {"mlp", "multilayer perceptrons"},
      {"resnet50", "image classifiers"},    {"sequential", "layer stacks"},
      {"ssd_resnet34", "object detectors"}, {"transformer", "language models"},
      {"unet", "image generators"},
  };
  static const std::string none = "unknown";
  const auto it = families.find(kind);
  return it == families.end() ? none : it->second;
}

double read_activation_bytes(Fields& fields) {
  return fields.string_or("activation_dtype", "bf16", {"bf16", "fp32"}) == "fp32" ? 4.0 : 2.0;
}

Model build_model(const Json& json, const std::string& path, Problems& problems) {
  Fields fields(json, path, problems);
  if (!fields.ok()) return {};
  std::vector<std::string> kinds;
  for (const auto& [k, _] : model_builders()) kinds.push_back(k);
  const Json* k = fields.value("kind");
  if (!k) return {};
  const std::string kind = k->is_string() ? k->get<std::string>() : std::string();
  if (!model_builders().count(kind)) {
    std::string expected = "a model kind, one of";
    for (const auto& name : kinds) expected += " \"" + name + "\"";
    problems.add(fields.path_of("kind"), *k, expected);
    return {};  // the other keys belong to a kind we do not know: do not report them
  }
  Model model = model_builders().at(kind)(fields, problems);
  fields.finish();
  model.kind = kind;
  // Sizes multiply: check in floating point that every tensor and the whole model stay far
  // inside 64-bit integers before anyone counts them as such.
  double total = 0;
  for (const auto& layer : model.layers)
    for (const auto& shape : layer.weights) {
      double n = 1;
      for (auto d : shape) n *= double(d);
      total += n;
    }
  if (problems.empty() && total > kMaxModelParams) {
    char found[64];
    std::snprintf(found, sizeof found, "%.3g parameters", total);
    problems.add(path, std::string(found),
                 "a model of at most 1e15 parameters (sizes that large overflow the arithmetic)");
  }
  return model;
}

}  // namespace tpusim
