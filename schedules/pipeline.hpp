// Pipeline parallelism (GPipe, and PipeDream-flush "1F1B" for comparison): the layers split
// into K contiguous stages on K cores, the mini-batch into M micro-batches that flow through
// the stages; boundary activations and their gradients cross between stage cores as
// transfers; optional re-materialization keeps only each stage's input per micro-batch and
// recomputes the rest before the backward; gradients accumulate over the micro-batches, are
// all-reduced across R replicas of the pipeline, then one optimizer update.
#pragma once

#include "schedules/step_builder.hpp"

namespace tpusim {

class Pipeline : public Schedule {
 public:
  enum class Order {
    GPipe,     ///< all forwards, then all backwards (last micro-batch first)
    OneFOneB,  ///< warm-up forwards, then one forward / one backward, then drain
  };

  /// Reads "stages", "microbatches", "remat", "replicas", "partition", "placement".
  Pipeline(Order order, Fields& fields, const Study& study, Problems& problems);
  BuiltStep build(const Study& study, FunctionalRuntime* functional = nullptr) const override;
  Json resolved() const override;
  std::int64_t layer_batch(const Study& study) const override { return study.batch / (replicas_ * microbatches_); }

  /// Layers per stage: the explicit partition, or balanced on the estimated stage cost
  /// (forward + recomputation + backward of one micro-batch on the study's hardware).
  std::vector<int> partition(const Study& study) const;
  /// Core of each (replica, stage).
  std::vector<std::vector<int>> placement(const Study& study) const;

 private:
  Order order_;
  int stages_ = 1;
  int microbatches_ = 1;
  int replicas_ = 1;
  bool remat_ = true;
  std::vector<int> partition_;                ///< explicit, or empty for "balanced"
  std::vector<std::vector<int>> placement_;   ///< explicit, or empty for "auto"
};

/// Cores in the order "auto" placement fills them: the torus tiled by rectangles of
/// `chips_per_pipeline` chips (as wide as the slice allows), each walked as a snake so that
/// consecutive cores are on the same or neighbouring chips, both cores of a chip first.
std::vector<int> pipeline_core_order(const SliceSpec& slice, int cores_per_chip, int chips_per_pipeline);

}  // namespace tpusim
