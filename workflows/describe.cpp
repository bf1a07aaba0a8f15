#include "workflows/describe.hpp"

#include "hardware/cost_model.hpp"
#include "hardware/topology.hpp"
#include "models/describe.hpp"
#include "models/op_lowering.hpp"
#include "schedules/optimizer.hpp"
#include "schedules/study.hpp"

namespace tpusim::workflows {

/// A hardware generation's figures as JSON (the derived ones computed).
Json hardware_json(const HardwareSpec& hw) {
  const double core_peak = hw.core.peak_matmul_flops_per_s();
  Json j{{"name", hw.name},
         {"file", hw.file},
         {"cores_per_chip", hw.chip.cores},
         {"peak_bf16_flops_per_s_per_core", core_peak},
         {"peak_bf16_flops_per_s_per_chip", hw.chip.peak_bf16_flops_per_s},
         {"vector_ops_per_s_per_core", hw.core.vector_ops_per_s()},
         {"hbm_bytes_per_core", hw.core.hbm_bytes},
         {"hbm_reserved_bytes_per_core", hw.core.hbm_reserved_bytes},
         {"usable_hbm_bytes_per_core", hw.core.usable_hbm_bytes()},
         {"hbm_bandwidth_bytes_per_s_per_core", hw.core.hbm_bandwidth_bytes_per_s},
         {"hbm_sustained_bandwidth_fraction", hw.core.hbm_sustained_fraction},
         {"sustained_hbm_bandwidth_bytes_per_s_per_core", hw.core.sustained_hbm_bytes_per_s()},
         {"ridge_flops_per_byte", core_peak / hw.core.sustained_hbm_bytes_per_s()},
         {"ici_bandwidth_bytes_per_s_per_link_per_direction", hw.chip.ici_bandwidth_bytes_per_s},
         {"pod_chips", hw.pod.shape},
         {"megacore", hw.chip.megacore},
         {"collective_algorithms", hw.chip.collective_algorithms},
         {"latency_collective_max_bytes", hw.chip.latency_collective_max_bytes},
         {"slices", Json::array()},
         {"sources", hw.sources}};
  for (const auto& [n, s] : hw.slices) j["slices"].push_back(n);
  // Every sourced figure by the dotted key an override names it with: its value and source.
  const Json file = read_json_file(hw.file);
  Json figures = Json::object();
  for (const auto& [key, source] : hw.sources) {
    const Json* node = json_at(file, key);
    figures[key] = Json{
        {"value", node && node->is_object() && node->contains("value") ? (*node)["value"] : Json(nullptr)},
        {"source", source}};
    if (const auto r = hw.ranges.find(key); r != hw.ranges.end()) {
      figures[key]["range"] = Json::array({r->second.low, r->second.high});
      figures[key]["range_source"] = r->second.source;
    }
  }
  j["figures"] = figures;
  return j;
}

Json optimizers_json() {
  Json j = Json::array();
  for (const auto& [kind, rule] : optimizer_rules()) {
    const auto c = rule->cost();
    j.push_back(Json{{"kind", kind},
                     {"slots_per_param", rule->slots()},
                     {"vpu_ops_per_param", c.vpu_ops_per_param},
                     {"fp32_tensors_moved_per_param", c.tensors_moved},
                     {"layer_statistics_bytes", rule->layer_statistics_bytes()},
                     {"factored_statistics", rule->factored_statistics()},
                     {"functional", rule->functional()},
                     {"default_learning_rate", rule->default_learning_rate()},
                     {"source", c.source}});
  }
  return j;
}

/// The hardware (`hardware`, or the first shipped file) that names slice `name`.
HardwareSpec hardware_with_slice(const std::string& name, const std::string& hardware) {
  const std::vector<std::string> candidates =
      hardware.empty() ? shipped_hardware() : std::vector<std::string>{hardware};
  for (const auto& h : candidates) {
    HardwareSpec candidate = load_hardware(h);
    if (candidate.slices.count(name)) return candidate;
  }
  throw ConfigError("describe slice", "", "\"" + name + "\"",
                    "a slice named in a hardware file (e.g. v3-32, v2-512)");
}

SliceFigures slice_figures(const std::string& name, const std::string& hardware) {
  SliceFigures f;
  f.hw = hardware_with_slice(name, hardware);
  f.name = name;
  const SliceSpec& s = f.hw.slices.at(name);
  const Topology topology(s);
  f.shape = s.shape;
  f.chips = s.chips();
  f.cores = s.chips() * f.hw.chip.cores;
  f.peak_flops_per_s = f.cores * f.hw.core.peak_matmul_flops_per_s();
  f.bisection_links = topology.bisection_links();
  f.bisection_bytes_per_s = f.bisection_links * f.hw.chip.ici_bandwidth_bytes_per_s;
  f.links = topology.link_count();
  f.diameter = topology.diameter();
  for (int d = 0; d < topology.dims(); ++d) {
    f.wraps.push_back(topology.wraps(d));
    if (topology.wraps(d)) f.wrapping.push_back(topology.dimension(d).name);
  }
  return f;
}

Json SliceFigures::json() const {
  return Json{{"slice", name},
              {"hardware", hw.name},
              {"chips", shape},
              {"wraparound", wraps},
              {"cores", cores},
              {"peak_bf16_flops_per_s", peak_flops_per_s},
              {"hbm_bytes", cores * hw.core.hbm_bytes},
              {"ici_links_directed", links},
              {"diameter_hops", diameter},
              {"bisection_bytes_per_s_per_direction", bisection_bytes_per_s}};
}

namespace {

/// The layer named `name` of the study's model and its index (ConfigError naming the layers if none).
std::pair<const Layer*, std::size_t> layer_named(const Study& study, const std::string& name) {
  for (std::size_t i = 0; i < study.model.layers.size(); ++i)
    if (study.model.layers[i].name == name) return {&study.model.layers[i], i};
  std::string names;
  for (const auto& l : study.model.layers) names += (names.empty() ? "" : ", ") + l.name;
  throw ConfigError(study.file, "--ops", "\"" + name + "\"", "a layer of the model: " + names);
}

/// A layer's hardware ops, forward then backward: what each costs and what bounds it.
Json hardware_ops_json(const Layer& layer, const CostModel& cost, std::int64_t batch) {
  const LayerWork w = layer.work(batch);
  Json ops = Json::array();
  for (const auto* pass : {&w.forward, &w.backward})
    for (const Op& op : *pass) {
      const OpCost c = cost.cost(op);
      ops.push_back(Json{{"pass", pass == &w.forward ? "forward" : "backward"},
                         {"op", op.name},
                         {"seconds", c.seconds},
                         {"mxu_s", c.mxu_s},
                         {"vpu_s", c.vpu_s},
                         {"hbm_s", c.hbm_s},
                         {"bound", c.bound},
                         {"model_flops", c.model_flops},
                         {"hardware_flops", c.hardware_flops},
                         {"bytes", op.bytes}});
    }
  return ops;
}

/// What each of a layer's named ops keeps for the backward, holds while its forward runs and
/// holds in flight during its backward (layer_memory's terms, op by op).
Json named_op_memory_json(const Layer& layer, bool model_input, double act, std::int64_t batch) {
  const auto ops = layer.named_ops(batch);
  const Sharding s = Sharding::whole(layer.lanes, layer.weight_bytes);
  Json rows = Json::array();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    rows.push_back(
        Json{{"op", ops[i].name},
             {"kept_bytes", kept_bytes(ops[i], s, act)},
             {"forward_transient_bytes", forward_transient(ops, i, s) * act},
             {"backward_in_flight_bytes", gradients_in_flight(ops, i, s, model_input && i == 0) * act}});
  }
  return rows;
}

}  // namespace

Json layer_ops_json(const Study& study, std::int64_t batch, const std::string& layer_name) {
  const auto [layer, index] = layer_named(study, layer_name);
  return Json{
      {"model", study.model.name},
      {"layer", layer->name},
      {"batch_per_core", batch},
      {"ops", hardware_ops_json(*layer, CostModel(study.hardware.core), batch)},
      {"named_op_memory", named_op_memory_json(*layer, index == 0, study.model.activation_bytes, batch)}};
}

Json model_table_json(const Study& study) {
  const std::int64_t batch = study.schedule->layer_batch(study);
  const auto rows = describe_layers(study.model, CostModel(study.hardware.core), batch);
  auto row_json = [](const LayerSummary& r) {
    return Json{{"name", r.name},
                {"params", r.params},
                {"forward_flops", r.forward_flops},
                {"backward_input_flops", r.backward_input_flops},
                {"backward_weight_flops", r.backward_weight_flops},
                {"hardware_flops", r.hardware_flops},
                {"output_bytes", r.output_bytes},
                {"stash_bytes", r.stash_bytes},
                {"stash_remat_bytes", r.stash_remat_bytes},
                {"workspace_bytes", r.workspace_bytes},
                {"forward_s", r.forward_s},
                {"backward_s", r.backward_s},
                {"bound", r.compute_bound() ? "compute" : "memory"}};
  };
  Json layers = Json::array();
  for (const auto& r : rows) layers.push_back(row_json(r));
  return Json{{"model", study.model.name}, {"kind", study.model.kind}, {"hardware", study.hardware.name},
              {"batch_per_core", batch},   {"layers", layers},         {"total", row_json(total_of(rows))}};
}

}  // namespace tpusim::workflows
