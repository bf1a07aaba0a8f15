#include "schedules/data_parallel.hpp"

#include <cmath>

#include "models/ops/op_kind.hpp"
#include "schedules/functional_runtime.hpp"
#include "schedules/gradient_buckets.hpp"
#include "schedules/mesh.hpp"
#include "schedules/mesh_lowering.hpp"
#include "schedules/step_builder.hpp"

namespace tpusim {

DataParallel::DataParallel(Fields& f, const Study& study, Problems& problems) {
  replicas_ = int(f.integer_or("replicas", study.cores(), 1, study.cores()));
  const std::string update =
      f.string_or("weight_update", "replicated", {"replicated", "sharded", "fully_sharded"});
  fully_sharded_ = update == "fully_sharded";
  sharded_ = update != "replicated";
  wire_ = read_wire_dtypes(f, fully_sharded_);
  bucket_bytes_ =
      read_gradient_bucket_bytes(f, study.hardware.core.allreduce_combine_threshold_bytes, fully_sharded_);
  batch_norm_group_ = int(f.integer_or("batch_norm_group", 1, 1, study.cores()));
  remat_ = read_remat(f, Keep::All);
  if (problems.empty() && fully_sharded_ && batch_norm_group_ > 1)
    problems.add(
        f.path_of("weight_update"), Json("fully_sharded"),
        "\"replicated\" or \"sharded\" with batch_norm_group > 1 (cross-replica batch norm with fully "
        "sharded weights is not modelled)");
  if (problems.empty() && remat_ != Keep::All && batch_norm_group_ > 1)
    problems.add(f.path_of("remat"), remat_json(remat_),
                 "false with batch_norm_group > 1 (re-materializing a layer would all-reduce its batch-norm "
                 "statistics again: not modelled)");
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
  accumulation_steps_ =
      read_accumulation_steps(f, study.batch / replicas_, fully_sharded_, batch_norm_group_);
  read_fully_sharded_mesh(f, study, problems);
}

void DataParallel::read_fully_sharded_mesh(Fields& f, const Study& study, Problems& problems) {
  if (!fully_sharded_ || replicas_ < 2 || !problems.empty()) return;  // one replica: nothing to gather
  Json mesh{{"mesh", Json::array({Json::array({"batch", replicas_})})},
            {"layout", {{"batch", "batch"}}},
            {"weight_update", "fully_sharded"},
            {"remat", remat_json(remat_)},
            {"weight_gathers", "prefetched"}};
  add_wire_dtypes(mesh, wire_, true);
  Fields fields(mesh, f.path(), problems);
  fully_sharded_mesh_ = std::make_shared<MeshSchedule>(fields, study, problems, replicas_);
  fields.finish();
}

std::vector<CoreInput> DataParallel::input(const Study& study) const {
  std::vector<CoreInput> in(std::size_t(study.cores()));
  for (int r = 0; r < replicas_; ++r) in[std::size_t(r)] = {r, double(study.batch / replicas_), 1.0};
  return in;
}

Json DataParallel::resolved() const {
  Json j{{"kind", "data_parallel"},
         {"replicas", replicas_},
         {"weight_update", fully_sharded_ ? "fully_sharded"
                           : sharded_     ? "sharded"
                                          : "replicated"},
         {"gradient_bucket_bytes", bucket_bytes_},
         {"batch_norm_group", batch_norm_group_},
         {"remat", remat_json(remat_)}};
  add_wire_dtypes(j, wire_, fully_sharded_);
  if (accumulation_steps_ > 1) j["accumulation_steps"] = accumulation_steps_;
  return j;
}

namespace {

/// One data-parallel step played onto a task graph: the per-core chains of forward and backward,
/// the batch norms' cross-replica statistics, then each gradient bucket's reduction and update.
class DataParallelPlayer {
 public:
  struct Settings {
    int cores = 1;
    bool sharded = false;
    double bucket_bytes = 0;
    int batch_norm_group = 1;
    Keep remat = Keep::All;          ///< what the forward keeps; the rest is recomputed before the backward
    double gradient_wire_bytes = 4;  ///< bytes per gradient element on the wire (gradient_dtype)
    /// Gradient accumulation: each replica's batch run as this many micro-batches, one after
    /// another, their gradients summed before the step's reduction.
    int accumulation_steps = 1;
  };

  DataParallelPlayer(const Study& study, FunctionalRuntime* functional, Settings settings,
                     std::int64_t local_batch)
      : study_(study),
        s_(settings),
        local_batch_(local_batch),
        b_(study, study.cores(), functional),
        g_(b_.graph()),
        layers_(int(study.model.layers.size())) {
    for (int c = 0; c < s_.cores; ++c) group_.push_back(c);
    for (int first = 0; first < s_.cores && s_.batch_norm_group > 1; first += s_.batch_norm_group) {
      bn_groups_.emplace_back();
      for (int c = first; c < first + s_.batch_norm_group; ++c) bn_groups_.back().push_back(c);
    }
    plan_buckets();
  }

  BuiltStep play() {
    for (int c = 0; c < s_.cores; ++c)
      for (const auto& bucket : buckets_)
        b_.resident_weights(c, bucket, s_.sharded && s_.cores > 1 ? shard_fraction(bucket) : 1.0);
    forward_and_backward();
    Json buckets = Json::array();
    for (std::size_t k = 0; k < buckets_.size() && s_.cores > 1; ++k)
      buckets.push_back(reduce_and_update(buckets_[k]));
    if (s_.cores == 1) g_.depend(last_bwd_[0], b_.update(0, {0, layers_}, 1.0));

    BuiltStep step = b_.finish();
    step.details = Json{{"local_batch", local_batch_},
                        {"weight_update", s_.sharded ? "sharded" : "replicated"},
                        {"gradient_buckets", buckets}};
    if (s_.sharded) {
      step.details["shard_padding_params"] = padding_params_;
      step.details["shard_padding_bytes"] = padding_params_ * kWeightBytes;
    }
    return step;
  }

 private:
  /// Gradient buckets in backward order: layers [first, last) each, up to the bucket size.
  void plan_buckets() {
    buckets_ = gradient_buckets(
        {0, layers_}, [&](int l) { return b_.gradient_bytes(l); }, s_.bucket_bytes);
  }
  double params_of(LayerRange r) const {
    double p = 0;
    for (int k = r.first; k < r.last; ++k) p += double(study_.model.layers[k].params());
    return p;
  }
  /// A shard is an equal piece of the bucket's flattened parameters, padded up to N pieces.
  double shard_fraction(LayerRange r) const {
    const double params = params_of(r);
    return params > 0 ? std::ceil(params / s_.cores) / params : 1.0;
  }

  /// Cross-replica batch norm: after a layer's forward (backward) on every core, one all-reduce
  /// per batch normalization of the layer, in a chain, over every group at once; the next layer
  /// waits for them. Per normalization: mean and variance (or the gradient's two sums), fp32.
  std::vector<int> bn_allreduces(int l, const std::vector<int>& after, const char* phase) {
    if (bn_groups_.empty()) return after;
    int prev = -1;
    for (const NamedOp& op : study_.model.layers[std::size_t(l)].named_ops(local_batch_)) {
      const std::int64_t channels = op_kind(op).replica_statistics_channels(op);
      if (channels == 0) continue;
      const int ar = b_.collective(sim::CollectiveOp::AllReduce, phase,
                                   std::string(phase) + " layer " + std::to_string(l), bn_groups_.front(),
                                   2.0 * 4.0 * double(channels), {l, l + 1});
      g_.task(ar).groups = bn_groups_;
      for (int c = 0; c < s_.cores && prev < 0; ++c) g_.depend(after[std::size_t(c)], ar);
      if (prev >= 0) g_.depend(prev, ar);
      prev = ar;
    }
    return prev < 0 ? after : std::vector<int>(std::size_t(s_.cores), prev);
  }

  /// The per-core forward and backward chains, layer by layer over the cores. With remat a
  /// layer's forward keeps only its input, and its forward runs again just before its backward.
  /// With gradient accumulation, each micro-batch's forward and backward in turn: the gradients
  /// allocated by the first backward, summed by the others; the reductions wait for the last.
  void forward_and_backward() {
    bwd_.assign(std::size_t(s_.cores), std::vector<int>(std::size_t(layers_)));
    std::vector<int> prev(std::size_t(s_.cores), -1);
    const std::int64_t micro = local_batch_ / s_.accumulation_steps;
    for (int a = 0; a < s_.accumulation_steps; ++a) micro_batch_pass(prev, a, micro);
    last_bwd_ = prev;
  }

  void micro_batch_pass(std::vector<int>& prev, int a, std::int64_t micro) {
    auto examples = [&](int c) { return Labels{-1, -1, c * local_batch_ + a * micro}; };
    const Keep keep = s_.remat;
    for (int l = 0; l < layers_; ++l) {
      for (int c = 0; c < s_.cores; ++c)
        prev[std::size_t(c)] = b_.forward(c, {l, l + 1}, micro, prev[std::size_t(c)], keep, examples(c));
      prev = bn_allreduces(l, prev, "batch_norm_statistics");
    }
    for (int l = layers_ - 1; l >= 0; --l) {
      for (int c = 0; c < s_.cores; ++c) {
        int& p = prev[std::size_t(c)];
        if (keep != Keep::All) p = b_.recompute(c, {l, l + 1}, micro, p, examples(c), keep);
        bwd_[c][l] = p =
            b_.backward(c, {l, l + 1}, micro, p, keep, /*allocate_gradients=*/a == 0, examples(c));
      }
      prev = bn_allreduces(l, prev, "batch_norm_gradient_statistics");
    }
  }

  /// A bucket's gradient reduction (all-reduce, or reduce-scatter with sharding, then the
  /// optimizer's per-layer statistics), every core's update and, with sharding, the all-gather
  /// of the updated weights. Returns the bucket's entry of the details.
  Json reduce_and_update(LayerRange r) {
    const std::string range = "layers " + std::to_string(r.first) + "-" + std::to_string(r.last - 1);
    const double params = params_of(r);
    const double fraction = s_.sharded ? shard_fraction(r) : 1.0;
    const int reduce = b_.collective(
        s_.sharded ? sim::CollectiveOp::ReduceScatter : sim::CollectiveOp::AllReduce,
        s_.sharded ? "gradient_reduce_scatter" : "gradient_allreduce",
        (s_.sharded ? "reduce-scatter " : "all-reduce ") + range, group_, params * s_.gradient_wire_bytes, r);
    g_.task(reduce).across_slices = true;
    // As soon as the bucket's gradients exist, or (the software stack's choice) once the whole
    // backward has finished, the combined buckets one after another.
    const bool overlap = study_.hardware.core.gradient_collectives_overlap_backward;
    for (int c = 0; c < s_.cores; ++c)
      if (overlap)
        for (int l = r.first; l < r.last; ++l) g_.depend(bwd_[c][l], reduce);
      else
        g_.depend(last_bwd_[c], reduce);
    if (!overlap && previous_reduce_ >= 0) g_.depend(previous_reduce_, reduce);
    previous_reduce_ = reduce;
    int ready = reduce;
    if (s_.sharded) ready = keep_shard(r, reduce, range, fraction, params);
    std::vector<int> updates;
    for (int c = 0; c < s_.cores; ++c) {
      const int upd = s_.sharded ? b_.update(c, r, fraction, {}, c, s_.cores) : b_.update(c, r, fraction);
      g_.depend(ready, upd);
      g_.depend(last_bwd_[c], upd);
      updates.push_back(upd);
    }
    Json bj{{"layers", {r.first, r.last - 1}},
            {"params", params},
            {"gradient_bytes_on_wire", params * s_.gradient_wire_bytes}};
    if (s_.sharded) {
      const int gather = b_.collective(sim::CollectiveOp::AllGather, "weight_allgather",
                                       "all-gather weights " + range, group_, kWeightBytes * params, r);
      for (int upd : updates) g_.depend(upd, gather);
      bj["shard_params"] = std::ceil(params / s_.cores);
    }
    return bj;
  }

  /// After a reduce-scatter a core keeps only its shard of the gradients (and the optimizer's
  /// per-layer statistics are combined); the shards' padding is counted. Returns the task the
  /// updates wait for.
  int keep_shard(LayerRange r, int reduce, const std::string& range, double fraction, double params) {
    padding_params_ += std::ceil(params / s_.cores) * s_.cores - params;
    return b_.keep_gradient_shard(reduce, group_, group_, r, fraction, range);
  }

  const Study& study_;
  Settings s_;
  std::int64_t local_batch_;
  StepBuilder b_;
  sim::TaskGraph& g_;
  int layers_;
  std::vector<int> group_;
  std::vector<std::vector<int>> bn_groups_;
  std::vector<LayerRange> buckets_;
  std::vector<std::vector<int>> bwd_;  ///< per core, per layer: its backward task
  std::vector<int> last_bwd_;          ///< per core: its last backward (or batch-norm statistics) task
  int previous_reduce_ = -1;
  double padding_params_ = 0;
};

}  // namespace

BuiltStep DataParallel::build(const Study& study, FunctionalRuntime* functional) const {
  if (fully_sharded_mesh_) return build_fully_sharded(study, functional);
  DataParallelPlayer player(study, functional,
                            {replicas_, sharded_, bucket_bytes_, batch_norm_group_, remat_,
                             wire_.gradient_bytes, accumulation_steps_},
                            study.batch / replicas_);
  BuiltStep step = player.play();
  if (fully_sharded_) step.details["weight_update"] = "fully_sharded";  // one replica: nothing sharded
  return step;
}

/// The mesh's step, with data parallelism's details: per layer with weights, in backward order,
/// its gradients' reduce-scatter and its two gathers; each weight padded to an equal piece per
/// replica (FSDP pads its flat parameter once per layer: the difference is below a piece per weight).
BuiltStep DataParallel::build_fully_sharded(const Study& study, FunctionalRuntime* functional) const {
  BuiltStep step = fully_sharded_mesh_->build(study, functional);
  const auto programs = fully_sharded_mesh_->programs(study);
  Json buckets = Json::array();
  double padding = 0;
  for (int l = int(programs.size()) - 1; l >= 0; --l) {
    double params = 0, shard = 0;
    for (const mesh::Event& ev : programs[std::size_t(l)].backward)
      if (ev.kind == mesh::Event::GradientAllReduce) {
        params += ev.bytes / kWeightBytes;
        shard += mesh::piece_elements(ev.bytes / kWeightBytes, replicas_);
      }
    if (params <= 0) continue;
    padding += shard * replicas_ - params;
    buckets.push_back({{"layers", {l, l}},
                       {"params", params},
                       {"gradient_bytes_on_wire", params * wire_.gradient_bytes},
                       {"shard_params", shard},
                       {"weight_bytes_gathered", 2.0 * wire_.gathered_weight_bytes * params}});
  }
  step.details = Json{{"local_batch", layer_batch(study)},
                      {"weight_update", "fully_sharded"},
                      {"gradient_buckets", buckets},
                      {"shard_padding_params", padding},
                      {"shard_padding_bytes", padding * kWeightBytes}};
  return step;
}

}  // namespace tpusim
