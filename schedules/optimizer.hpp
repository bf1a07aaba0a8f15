// Optimizers as the step sees them: how many fp32 slots per parameter they keep in HBM and
// what their update costs on the VPU and HBM.
#pragma once

#include <string>
#include <vector>

#include "hardware/cost_model.hpp"
#include "hardware/json_fields.hpp"
#include "models/model.hpp"

namespace tpusim {

struct Optimizer {
  std::string kind;  ///< sgd | momentum | rmsprop | adam | lars | adafactor
  double learning_rate = 0;  ///< used by functional mode; default per kind (see optimizer.cpp)

  /// Optimizer-slot elements kept for one layer's weights (Adafactor factors matrices into
  /// row and column statistics; the others keep whole tensors).
  double slot_elements(const Layer& layer) const;
  /// The update of one layer's weights: vector work and HBM traffic on one core.
  /// `fraction` scales it when a core updates only a shard of the weights.
  Op update_op(const Layer& layer, double fraction = 1.0) const;
};

/// Names accepted for "optimizer.kind".
const std::vector<std::string>& optimizer_kinds();

/// Reads {"kind": ...}; records problems.
Optimizer parse_optimizer(const Json& json, const std::string& path, Problems& problems);

}  // namespace tpusim
