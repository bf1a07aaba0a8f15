#include "schedules/data_parallel.hpp"

#include <cmath>

#include "schedules/step_builder.hpp"

namespace tpusim {

DataParallel::DataParallel(Fields& f, const Study& study, Problems& problems) {
  replicas_ = int(f.integer_or("replicas", study.cores(), 1, study.cores()));
  sharded_ = f.string_or("weight_update", "replicated", {"replicated", "sharded"}) == "sharded";
  gradient_wire_bytes_ = f.string_or("gradient_dtype", "fp32", {"fp32", "bf16"}) == "bf16" ? 2.0 : kWeightBytes;
  bucket_bytes_ = f.positive_or("gradient_bucket_bytes", kDefaultBucketBytes);
  if (problems.empty() && study.batch % replicas_ != 0) {
    problems.add("batch", Json(study.batch),
                 "a multiple of the " + std::to_string(replicas_) + " replicas (cores) on slice " + study.slice.name +
                     " (data parallelism splits the batch evenly)");
  }
}

Json DataParallel::resolved() const {
  return Json{{"kind", "data_parallel"},
              {"replicas", replicas_},
              {"weight_update", sharded_ ? "sharded" : "replicated"},
              {"gradient_dtype", gradient_wire_bytes_ == 2.0 ? "bf16" : "fp32"},
              {"gradient_bucket_bytes", bucket_bytes_}};
}

BuiltStep DataParallel::build(const Study& study, FunctionalRuntime* functional) const {
  const int cores = replicas_;
  const std::int64_t local_batch = layer_batch(study);
  StepBuilder b(study, study.cores(), functional);
  auto& g = b.graph();
  const int layers = int(study.model.layers.size());
  std::vector<int> group(cores);
  for (int c = 0; c < cores; ++c) group[c] = c;

  // Gradient buckets in backward order: layers [first, last) each.
  std::vector<LayerRange> buckets;
  for (int l = layers - 1; l >= 0;) {
    double bytes = 0;
    const int last = l + 1;
    do {
      bytes += b.gradient_bytes(l);
      --l;
    } while (l >= 0 && bytes + b.gradient_bytes(l) <= bucket_bytes_);
    buckets.push_back({l + 1, last});
  }
  auto params_of = [&](LayerRange r) {
    double p = 0;
    for (int k = r.first; k < r.last; ++k) p += double(study.model.layers[k].params());
    return p;
  };
  // A shard is an equal piece of the bucket's flattened parameters, padded up to N pieces.
  auto shard_fraction = [&](LayerRange r) {
    const double params = params_of(r);
    return params > 0 ? std::ceil(params / cores) / params : 1.0;
  };

  // Resident state and the per-core forward/backward chains.
  std::vector<std::vector<int>> bwd(cores, std::vector<int>(layers));
  std::vector<int> last_bwd(cores);
  for (int c = 0; c < cores; ++c) {
    for (const auto& bucket : buckets) b.resident_weights(c, bucket, sharded_ && cores > 1 ? shard_fraction(bucket) : 1.0);
    int prev = -1;
    const Labels examples{-1, -1, c * local_batch};
    for (int l = 0; l < layers; ++l) prev = b.forward(c, {l, l + 1}, local_batch, prev, Keep::All, examples);
    for (int l = layers - 1; l >= 0; --l)
      bwd[c][l] = prev = b.backward(c, {l, l + 1}, local_batch, prev, Keep::All, /*allocate_gradients=*/true, examples);
    last_bwd[c] = prev;
  }


  Json bucket_json = Json::array();
  double padding_params = 0;
  for (std::size_t k = 0; k < buckets.size() && cores > 1; ++k) {
    const LayerRange r = buckets[k];
    const std::string range = "layers " + std::to_string(r.first) + "-" + std::to_string(r.last - 1);
    const double params = params_of(r);
    const double fraction = sharded_ ? shard_fraction(r) : 1.0;
    const int reduce = b.collective(sharded_ ? sim::CollectiveOp::ReduceScatter : sim::CollectiveOp::AllReduce,
                                    sharded_ ? "gradient_reduce_scatter" : "gradient_allreduce",
                                    (sharded_ ? "reduce-scatter " : "all-reduce ") + range, group, params * gradient_wire_bytes_, r);
    for (int c = 0; c < cores; ++c)
      for (int l = r.first; l < r.last; ++l) g.depend(bwd[c][l], reduce);
    int ready = reduce;
    if (sharded_) {
      // After the reduce-scatter a core keeps only its shard of the gradients.
      const double kept = b.gradient_bytes(r) * fraction;
      for (int c = 0; c < cores; ++c)
        g.task(reduce).memory.push_back({c, sim::MemoryCategory::Gradients, -(b.gradient_bytes(r) - kept), sim::MemoryEffect::When::End});
      if (study.optimizer.kind == "lars") {
        // LARS scales each layer by ||w|| / ||g||: the shards' partial norms are all-reduced.
        ready = b.collective(sim::CollectiveOp::AllReduce, "lars_norms", "lars norms " + range, group, 8.0 * r.size(), r);
        g.depend(reduce, ready);
      }
      padding_params += std::ceil(params / cores) * cores - params;
    }
    std::vector<int> updates;
    for (int c = 0; c < cores; ++c) {
      const int upd = sharded_ ? b.update(c, r, fraction, {}, c, cores) : b.update(c, r, fraction);
      g.depend(ready, upd);
      g.depend(last_bwd[c], upd);
      updates.push_back(upd);
    }
    Json bj{{"layers", {r.first, r.last - 1}}, {"params", params}, {"gradient_bytes_on_wire", params * gradient_wire_bytes_}};
    if (sharded_) {
      const int gather = b.collective(sim::CollectiveOp::AllGather, "weight_allgather", "all-gather weights " + range, group, kWeightBytes * params, r);
      for (int upd : updates) g.depend(upd, gather);
      bj["shard_params"] = std::ceil(params / cores);
    }
    bucket_json.push_back(bj);
  }
  if (cores == 1) {
    const int upd = b.update(0, {0, layers}, 1.0);
    g.depend(last_bwd[0], upd);
  }

  BuiltStep step = b.finish();
  step.details = Json{{"local_batch", local_batch},
                      {"weight_update", sharded_ ? "sharded" : "replicated"},
                      {"gradient_buckets", bucket_json}};
  if (sharded_) {
    step.details["shard_padding_params"] = padding_params;
    step.details["shard_padding_bytes"] = padding_params * kWeightBytes;
  }
  return step;
}

}  // namespace tpusim
