// Per-layer figures of a model at a given per-core batch on one core: what
// `tpusim describe model` prints.
#pragma once

#include "hardware/cost_model.hpp"
#include "models/model.hpp"

namespace tpusim {

struct LayerSummary {
  std::string name;
  std::int64_t params = 0;
  double forward_flops = 0;  ///< model FLOPs
  double backward_input_flops = 0;
  double backward_weight_flops = 0;
  double hardware_flops = 0;  ///< forward + backward as the MXU executes them (padded)
  double output_bytes = 0;
  double stash_bytes = 0;
  double stash_remat_bytes = 0;
  double workspace_bytes = 0;
  double forward_s = 0;
  double backward_s = 0;
  double compute_s = 0;  ///< time where MXU or VPU bound the op
  double memory_s = 0;   ///< time where HBM bounds the op
  bool compute_bound() const { return compute_s >= memory_s; }
};

std::vector<LayerSummary> describe_layers(const Model& model, const CostModel& cost, std::int64_t batch);

/// The whole model: sums, except output and workspace bytes (the largest layer's).
LayerSummary total_of(const std::vector<LayerSummary>& layers);

}  // namespace tpusim
