#include "models/describe.hpp"

#include <string_view>

namespace tpusim {

std::vector<LayerSummary> describe_layers(const Model& model, const CostModel& cost, std::int64_t batch) {
  std::vector<LayerSummary> out;
  out.reserve(model.layers.size());
  for (const auto& layer : model.layers) {
    const LayerWork w = layer.work(batch);
    LayerSummary s;
    s.name = layer.name;
    s.params = layer.params();
    s.output_bytes = w.output_bytes;
    s.stash_bytes = w.stash_bytes;
    s.stash_remat_bytes = w.stash_remat_bytes();
    s.workspace_bytes = w.workspace_bytes;
    auto account = [&](const Op& op, double& seconds) {
      const OpCost c = cost.cost(op);
      seconds += c.seconds;
      s.hardware_flops += c.hardware_flops;
      (std::string_view(c.bound) == "hbm" ? s.memory_s : s.compute_s) += c.seconds;
    };
    for (const auto& op : w.forward) {
      s.forward_flops += op.model_flops();
      account(op, s.forward_s);
    }
    for (const auto& op : w.backward) {
      (op.weight_gradient ? s.backward_weight_flops : s.backward_input_flops) += op.model_flops();
      account(op, s.backward_s);
    }
    out.push_back(std::move(s));
  }
  return out;
}

LayerSummary total_of(const std::vector<LayerSummary>& layers) {
  LayerSummary total;
  total.name = "total";
  for (const auto& r : layers) {
    total.params += r.params;
    total.forward_flops += r.forward_flops;
    total.backward_input_flops += r.backward_input_flops;
    total.backward_weight_flops += r.backward_weight_flops;
    total.hardware_flops += r.hardware_flops;
    total.output_bytes = std::max(total.output_bytes, r.output_bytes);
    total.stash_bytes += r.stash_bytes;
    total.stash_remat_bytes += r.stash_remat_bytes;
    total.workspace_bytes = std::max(total.workspace_bytes, r.workspace_bytes);
    total.forward_s += r.forward_s;
    total.backward_s += r.backward_s;
    total.compute_s += r.compute_s;
    total.memory_s += r.memory_s;
  }
  return total;
}

}  // namespace tpusim
