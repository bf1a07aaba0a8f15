// Optimizers as the step sees them. Each update rule (sgd, momentum, rmsprop, adam, adamw, lars,
// lamb, adafactor) is one registered strategy, in a file of its own under schedules/optimizers/: it
// owns its optimizer slots, the cost of its update on a core, the statistics it needs combined
// across the pieces of a split or sharded weight (LARS's norms, Adafactor's factored moments)
// and, where functional mode supports it, its math. A new optimizer is one file plus one
// registry line (optimizer.cpp); no schedule compares optimizer names.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hardware/cost_model.hpp"
#include "hardware/json_fields.hpp"
#include "models/model.hpp"

namespace tpusim {

class OptimizerRule {
 public:
  virtual ~OptimizerRule() = default;

  /// What the update does per parameter on one core, with where the figures come from.
  struct Cost {
    double vpu_ops_per_param = 0;  ///< vector operations per parameter
    /// Tensors read + written per parameter (weight, gradient, slots): each slot is read and
    /// written once, the rest are weights and gradients (each in its dtype: Optimizer::update_op).
    double tensors_moved = 0;
    std::string source;  ///< "derived: ..." from the update formula
  };
  virtual Cost cost() const = 0;
  /// Whole-tensor fp32 slots it keeps per parameter (momentum 1, Adam 2).
  virtual int slots() const = 0;
  /// Slot elements kept for one layer's weights; by default slots() x parameters.
  virtual double slot_elements(const Layer& layer) const { return slots() * double(layer.params()); }
  /// Slot elements its update reads and writes for `layer` beyond cost().tensors_moved
  /// (Adafactor's statistics).
  virtual double extra_update_elements(const Layer& layer) const { return 0; }
  /// The step size functional mode uses when the study gives none.
  virtual double default_learning_rate() const = 0;
  /// Bytes per layer of statistics that must be summed over every piece of a weight split over
  /// cores (mesh dimensions, weight-update sharding) before the update: LARS's two norms; 0: none.
  virtual double layer_statistics_bytes() const { return 0; }
  /// The phase those statistics' all-reduces are reported under ("lars_norms").
  virtual std::string layer_statistics_phase() const { return ""; }
  /// True when the rule keeps, per matrix, statistics over each of its last two dimensions
  /// (Adafactor): a dimension split over a mesh dimension has them all-reduced over it.
  virtual bool factored_statistics() const { return false; }
  /// True when functional mode can run its math (update()).
  virtual bool functional() const { return false; }
  /// The update of elements [lo, hi) of one tensor: weights `w`, gradient `g`, its slots()
  /// slot tensors, step size `lr`, step number `t` (from 1).
  virtual void update(float* w, const float* g, const std::vector<float*>& slots, std::int64_t lo,
                      std::int64_t hi, double lr, double t) const {}
};

/// Every registered rule, by its JSON kind.
const std::map<std::string, std::shared_ptr<const OptimizerRule>>& optimizer_rules();

struct Optimizer {
  std::string kind;          ///< a key of optimizer_rules()
  double learning_rate = 0;  ///< used by functional mode; default per rule
  std::shared_ptr<const OptimizerRule> rule =
      optimizer_rules().at("sgd");  ///< set from `kind` by parse_optimizer

  /// Optimizer-slot elements kept for one layer's weights.
  double slot_elements(const Layer& layer) const { return rule->slot_elements(layer); }
  /// The update of one layer's weights: vector work and HBM traffic on one core, the weights and
  /// gradients of `model.weight_bytes` per element, the slots of `model.slot_bytes`.
  /// `fraction` scales it when a core updates only a shard of the weights.
  Op update_op(const Model& model, const Layer& layer, double fraction = 1.0) const;
};

/// Names accepted for "optimizer.kind".
const std::vector<std::string>& optimizer_kinds();

/// Reads {"kind": ..., "learning_rate": ...}; records problems.
Optimizer parse_optimizer(const Json& json, const std::string& path, Problems& problems);

// Registered rules (one per file in schedules/optimizers/).
std::shared_ptr<const OptimizerRule> make_sgd();
std::shared_ptr<const OptimizerRule> make_momentum();
std::shared_ptr<const OptimizerRule> make_rmsprop();
std::shared_ptr<const OptimizerRule> make_adam();
std::shared_ptr<const OptimizerRule> make_adamw();
std::shared_ptr<const OptimizerRule> make_lars();
std::shared_ptr<const OptimizerRule> make_lamb();
std::shared_ptr<const OptimizerRule> make_adafactor();

}  // namespace tpusim
