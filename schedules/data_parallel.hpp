// Data parallelism: the weights replicated on every core, each core runs forward and backward
// on its share of the batch, gradients are all-reduced across all cores in buckets as soon as
// the layers of a bucket finish their backward (overlapping the rest of the backward), then
// every core applies the optimizer update.
#pragma once

#include "schedules/study.hpp"

namespace tpusim {

class DataParallel : public Schedule {
 public:
  /// Reads "gradient_bucket_bytes" (optional) and checks the batch divides over the cores.
  DataParallel(Fields& fields, const Study& study, Problems& problems);
  BuiltStep build(const Study& study) const override;
  Json resolved() const override;
  std::int64_t layer_batch(const Study& study) const override { return study.batch / study.cores(); }

  /// Default gradient bucket: the all-reduce combiner threshold.
  static constexpr double kDefaultBucketBytes = 32.0 * 1024 * 1024;

 private:
  double bucket_bytes_ = kDefaultBucketBytes;
};

}  // namespace tpusim
