#include "schedules/data_parallel.hpp"

#include "schedules/step_builder.hpp"

namespace tpusim {

DataParallel::DataParallel(Fields& f, const Study& study, Problems& problems) {
  bucket_bytes_ = f.positive_or("gradient_bucket_bytes", kDefaultBucketBytes);
  if (study.batch % study.cores() != 0) {
    problems.add("batch", Json(study.batch),
                 "a multiple of the " + std::to_string(study.cores()) + " cores of slice " + study.slice.name +
                     " (data parallelism splits the batch evenly)");
  }
}

Json DataParallel::resolved() const {
  return Json{{"kind", "data_parallel"}, {"gradient_bucket_bytes", bucket_bytes_}};
}

BuiltStep DataParallel::build(const Study& study) const {
  const int cores = study.cores();
  const std::int64_t local_batch = study.batch / cores;
  StepBuilder b(study, cores);
  const int layers = int(study.model.layers.size());
  std::vector<int> group(cores);
  for (int c = 0; c < cores; ++c) group[c] = c;

  // Resident state and the per-core forward/backward chains.
  std::vector<std::vector<int>> bwd(cores, std::vector<int>(layers));
  std::vector<int> last_bwd(cores);
  for (int c = 0; c < cores; ++c) {
    b.resident_weights(c, {0, layers}, 1.0);
    int prev = -1;
    for (int l = 0; l < layers; ++l) prev = b.forward(c, {l, l + 1}, local_batch, prev, Keep::All);
    for (int l = layers - 1; l >= 0; --l)
      bwd[c][l] = prev = b.backward(c, {l, l + 1}, local_batch, prev, Keep::All, /*allocate_gradients=*/true);
    last_bwd[c] = prev;
  }

  // Gradient buckets in backward order; each all-reduce waits for its layers on every core.
  std::vector<int> allreduces;
  Json buckets = Json::array();
  int l = layers - 1;
  while (l >= 0 && cores > 1) {
    double bytes = 0;
    const int hi = l;
    do {
      bytes += b.gradient_bytes(l);
      --l;
    } while (l >= 0 && bytes + b.gradient_bytes(l) <= bucket_bytes_);
    sim::Task t;
    t.kind = sim::TaskKind::Collective;
    t.op = sim::CollectiveOp::AllReduce;
    t.name = "allreduce layers " + std::to_string(l + 1) + "-" + std::to_string(hi);
    t.phase = "gradient_allreduce";
    t.group = group;
    t.bytes = bytes;
    const int id = b.graph().add(std::move(t));
    for (int c = 0; c < cores; ++c)
      for (int k = l + 1; k <= hi; ++k) b.graph().depend(bwd[c][k], id);
    allreduces.push_back(id);
    buckets.push_back(Json{{"layers", {l + 1, hi}}, {"bytes", bytes}});
  }

  for (int c = 0; c < cores; ++c) {
    const int upd = b.update(c, {0, layers}, 1.0);
    b.graph().depend(last_bwd[c], upd);
    for (int id : allreduces) b.graph().depend(id, upd);
  }
  BuiltStep step = b.finish();
  step.details = Json{{"local_batch", local_batch}, {"gradient_buckets", buckets}};
  return step;
}

}  // namespace tpusim
