#include "schedules/data_parallel.hpp"

#include <cmath>

#include "schedules/step_builder.hpp"

namespace tpusim {

DataParallel::DataParallel(Fields& f, const Study& study, Problems& problems) {
  replicas_ = int(f.integer_or("replicas", study.cores(), 1, study.cores()));
  sharded_ = f.string_or("weight_update", "replicated", {"replicated", "sharded"}) == "sharded";
  gradient_wire_bytes_ =
      f.string_or("gradient_dtype", "fp32", {"fp32", "bf16"}) == "bf16" ? 2.0 : kWeightBytes;
  bucket_bytes_ =
      f.positive_or("gradient_bucket_bytes", study.hardware.core.allreduce_combine_threshold_bytes);
  batch_norm_group_ = int(f.integer_or("batch_norm_group", 1, 1, study.cores()));
  if (problems.empty() && replicas_ % batch_norm_group_ != 0) {
    problems.add(
        f.path_of("batch_norm_group"), Json(batch_norm_group_),
        "a divisor of the " + std::to_string(replicas_) + " replicas (groups of consecutive replicas)");
  }
  if (problems.empty() && study.batch % replicas_ != 0) {
    problems.add("batch", Json(study.batch),
                 "a multiple of the " + std::to_string(replicas_) + " replicas (cores) on slice " +
                     study.slice.name + " (data parallelism splits the batch evenly)");
  }
}

std::vector<CoreInput> DataParallel::input(const Study& study) const {
  std::vector<CoreInput> in(std::size_t(study.cores()));
  for (int r = 0; r < replicas_; ++r) in[std::size_t(r)] = {r, double(layer_batch(study)), 1.0};
  return in;
}

Json DataParallel::resolved() const {
  return Json{{"kind", "data_parallel"},
              {"replicas", replicas_},
              {"weight_update", sharded_ ? "sharded" : "replicated"},
              {"gradient_dtype", gradient_wire_bytes_ == 2.0 ? "bf16" : "fp32"},
              {"gradient_bucket_bytes", bucket_bytes_},
              {"batch_norm_group", batch_norm_group_}};
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

  // Cross-replica batch norm: after a layer's forward (backward) on every core, one all-reduce
  // per batch normalization of the layer, in a chain, over every group at once; the next layer
  // waits for them. Per normalization: mean and variance (or the gradient's two sums), fp32.
  std::vector<std::vector<int>> bn_groups;
  for (int first = 0; first < cores && batch_norm_group_ > 1; first += batch_norm_group_) {
    bn_groups.emplace_back();
    for (int c = first; c < first + batch_norm_group_; ++c) bn_groups.back().push_back(c);
  }
  auto bn_allreduces = [&](int l, const std::vector<int>& after, const char* phase) {
    if (bn_groups.empty()) return after;
    int prev = -1;
    for (const std::int64_t channels :
         study.model.layers[std::size_t(l)].work(local_batch).batch_norm_channels) {
      const int ar = b.collective(sim::CollectiveOp::AllReduce, phase,
                                  std::string(phase) + " layer " + std::to_string(l), bn_groups.front(),
                                  2.0 * 4.0 * double(channels), {l, l + 1});
      g.task(ar).groups = bn_groups;
      for (int c = 0; c < cores && prev < 0; ++c) g.depend(after[std::size_t(c)], ar);
      if (prev >= 0) g.depend(prev, ar);
      prev = ar;
    }
    return prev < 0 ? after : std::vector<int>(std::size_t(cores), prev);
  };

  // Resident state and the per-core forward/backward chains, layer by layer over the cores.
  std::vector<std::vector<int>> bwd(cores, std::vector<int>(layers));
  std::vector<int> prev(std::size_t(cores), -1), last_bwd(cores);
  auto examples = [&](int c) { return Labels{-1, -1, c * local_batch}; };
  for (int c = 0; c < cores; ++c)
    for (const auto& bucket : buckets)
      b.resident_weights(c, bucket, sharded_ && cores > 1 ? shard_fraction(bucket) : 1.0);
  for (int l = 0; l < layers; ++l) {
    for (int c = 0; c < cores; ++c)
      prev[std::size_t(c)] =
          b.forward(c, {l, l + 1}, local_batch, prev[std::size_t(c)], Keep::All, examples(c));
    prev = bn_allreduces(l, prev, "batch_norm_statistics");
  }
  for (int l = layers - 1; l >= 0; --l) {
    for (int c = 0; c < cores; ++c)
      bwd[c][l] = prev[std::size_t(c)] = b.backward(c, {l, l + 1}, local_batch, prev[std::size_t(c)],
                                                    Keep::All, /*allocate_gradients=*/true, examples(c));
    prev = bn_allreduces(l, prev, "batch_norm_gradient_statistics");
  }
  for (int c = 0; c < cores; ++c) last_bwd[c] = prev[std::size_t(c)];

  Json bucket_json = Json::array();
  double padding_params = 0;
  int previous_reduce = -1;
  for (std::size_t k = 0; k < buckets.size() && cores > 1; ++k) {
    const LayerRange r = buckets[k];
    const std::string range = "layers " + std::to_string(r.first) + "-" + std::to_string(r.last - 1);
    const double params = params_of(r);
    const double fraction = sharded_ ? shard_fraction(r) : 1.0;
    const int reduce = b.collective(
        sharded_ ? sim::CollectiveOp::ReduceScatter : sim::CollectiveOp::AllReduce,
        sharded_ ? "gradient_reduce_scatter" : "gradient_allreduce",
        (sharded_ ? "reduce-scatter " : "all-reduce ") + range, group, params * gradient_wire_bytes_, r);
    // As soon as the bucket's gradients exist, or (the software stack's choice) once the whole
    // backward has finished, the combined buckets one after another.
    const bool overlap = study.hardware.core.gradient_collectives_overlap_backward;
    for (int c = 0; c < cores; ++c)
      if (overlap)
        for (int l = r.first; l < r.last; ++l) g.depend(bwd[c][l], reduce);
      else
        g.depend(last_bwd[c], reduce);
    if (!overlap && previous_reduce >= 0) g.depend(previous_reduce, reduce);
    previous_reduce = reduce;
    int ready = reduce;
    if (sharded_) {
      // After the reduce-scatter a core keeps only its shard of the gradients.
      const double kept = b.gradient_bytes(r) * fraction;
      for (int c = 0; c < cores; ++c)
        g.task(reduce).memory.push_back(
            {c, sim::MemoryCategory::Gradients, -(b.gradient_bytes(r) - kept), sim::MemoryEffect::When::End});
      if (const double norms = study.optimizer.rule->layer_statistics_bytes(); norms > 0) {
        // Per-layer statistics over the whole weights (LARS's ||w|| and ||g||): the shards'
        // partial sums are all-reduced.
        const std::string phase = study.optimizer.rule->layer_statistics_phase();
        ready = b.collective(sim::CollectiveOp::AllReduce, phase, phase + " " + range, group,
                             norms * r.size(), r);
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
    Json bj{{"layers", {r.first, r.last - 1}},
            {"params", params},
            {"gradient_bytes_on_wire", params * gradient_wire_bytes_}};
    if (sharded_) {
      const int gather = b.collective(sim::CollectiveOp::AllGather, "weight_allgather",
                                      "all-gather weights " + range, group, kWeightBytes * params, r);
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
