#include "schedules/data_parallel.hpp"

#include <algorithm>
#include <cmath>

#include "schedules/batch_problem.hpp"
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
  wire_ = read_wire_dtypes(f, fully_sharded_, study.model.weight_bytes);
  bucket_bytes_ =
      read_gradient_bucket_bytes(f, study.hardware.core.allreduce_combine_threshold_bytes, fully_sharded_);
  batch_norm_group_ = int(f.integer_or("batch_norm_group", 1, 1, study.cores()));
  remat_ = read_remat(f, Keep::All, saves_);
  if (problems.empty() && fully_sharded_ && batch_norm_group_ > 1)
    problems.add(
        f.path_of("weight_update"), Json("fully_sharded"),
        "\"replicated\" or \"sharded\" with batch_norm_group > 1 (cross-replica batch norm with fully "
        "sharded weights is not modelled)");
  if (problems.empty() && remat_ != Keep::All && batch_norm_group_ > 1)
    problems.add(f.path_of("remat"), remat_json(remat_, *saves_),
                 "false with batch_norm_group > 1 (re-materializing a layer would all-reduce its batch-norm "
                 "statistics again: not modelled)");
  if (problems.empty() && replicas_ % batch_norm_group_ != 0) {
    problems.add(
        f.path_of("batch_norm_group"), Json(batch_norm_group_),
        "a divisor of the " + std::to_string(replicas_) + " replicas (groups of consecutive replicas)");
  }
  if (problems.empty())
    check_batch_multiple(study, replicas_,
                         "the " + std::to_string(replicas_) + " replicas (" + devices_noun(study) +
                             ") on slice " + study.slice.name + ": data parallelism splits the batch evenly",
                         problems);
  accumulation_steps_ =
      read_accumulation_steps(f, study.batch / replicas_, fully_sharded_, batch_norm_group_);
  read_shard_group(f, problems);
  read_mesh(f, study, problems);
}

void DataParallel::read_shard_group(Fields& f, Problems& problems) {
  shard_group_ = int(f.integer_or("shard_group", replicas_, 1, replicas_));
  if (!problems.empty() || shard_group_ == replicas_) return;
  if (!sharded_)
    problems.add(f.path_of("shard_group"), Json(shard_group_),
                 "no shard_group with weight_update \"replicated\" (nothing is cut into pieces)");
  else if (replicas_ % shard_group_ != 0)
    problems.add(
        f.path_of("shard_group"), Json(shard_group_),
        "a divisor of the " + std::to_string(replicas_) + " replicas (groups of consecutive replicas)");
  else if (batch_norm_group_ > 1)
    problems.add(f.path_of("shard_group"), Json(shard_group_),
                 std::to_string(replicas_) + " (every replica) with batch_norm_group > 1 (not modelled)");
}

/// The step as a mesh splitting only the batch over the replicas (the first `replicas_` cores),
/// with the schedule's options; fully sharded weights gathered as FSDP gathers them.
void DataParallel::read_mesh(Fields& f, const Study& study, Problems& problems) {
  const Json* offload = f.optional("offload");  // the mesh reads it (schedules/offload.hpp)
  if (!problems.empty()) return;
  Json mesh{{"mesh", Json::array({Json::array({"batch", replicas_})})},
            {"layout", {{"batch", "batch"}}},
            {"weight_update", weight_update()},
            {"remat", remat_json(remat_, *saves_)}};
  if (shard_group_ < replicas_) {  // the groups innermost: consecutive replicas
    mesh["mesh"] =
        Json::array({Json::array({"data", replicas_ / shard_group_}), Json::array({"batch", shard_group_})});
    mesh["data_parallel_dim"] = "data";
  }
  add_wire_dtypes(mesh, wire_, fully_sharded_);
  if (fully_sharded_)
    mesh["weight_gathers"] = "prefetched";
  else
    mesh["gradient_bucket_bytes"] = bucket_bytes_;
  if (batch_norm_group_ > 1) mesh["batch_norm_group"] = batch_norm_group_;
  if (accumulation_steps_ > 1) mesh["accumulation_steps"] = accumulation_steps_;
  if (offload) mesh["offload"] = *offload;
  Fields fields(mesh, f.path(), problems);
  mesh_ = std::make_shared<MeshSchedule>(fields, study, problems, replicas_);
  fields.finish();
}

const char* DataParallel::weight_update() const {
  return fully_sharded_ ? "fully_sharded" : sharded_ ? "sharded" : "replicated";
}

std::int64_t DataParallel::layer_batch(const Study& study) const { return mesh_->layer_batch(study); }

std::vector<CoreInput> DataParallel::input(const Study& study) const { return mesh_->input(study); }

Json DataParallel::resolved() const {
  Json j{{"kind", "data_parallel"},
         {"replicas", replicas_},
         {"weight_update", weight_update()},
         {"gradient_bucket_bytes", bucket_bytes_},
         {"batch_norm_group", batch_norm_group_},
         {"remat", remat_json(remat_, *saves_)}};
  add_wire_dtypes(j, wire_, fully_sharded_);
  if (shard_group_ < replicas_) j["shard_group"] = shard_group_;
  if (accumulation_steps_ > 1) j["accumulation_steps"] = accumulation_steps_;
  if (mesh_ && !mesh_->offload().empty()) j["offload"] = mesh_->offload().json();
  return j;
}

BuiltStep DataParallel::build(const Study& study, FunctionalRuntime* functional) const {
  if (functional && shard_group_ < replicas_)
    throw ConfigError(study.file, "schedule.shard_group", std::to_string(shard_group_),
                      "no shard_group in functional mode (its host math does not split the batch over groups "
                      "yet)");
  BuiltStep step = mesh_->build(study, functional);
  const auto programs = mesh_->programs(study);
  Json buckets = Json::array();
  double padding = 0;
  for (const auto& chunk : gradient_chunks(programs)) buckets.push_back(bucket_json(chunk, padding));
  step.details = Json{{"local_batch", study.batch / replicas_},
                      {"weight_update", weight_update()},
                      {"gradient_buckets", buckets}};
  if (sharded_) {
    step.details["shard_padding_params"] = padding;
    step.details["shard_padding_bytes"] = padding * wire_.weight_bytes;
  }
  return step;
}

/// The combined gradient reductions in backward order: as XLA's combiner combines them up to the
/// bucket (mesh::gradient_chunks), or fully sharded one per layer with weights.
std::vector<mesh::GradientChunk> DataParallel::gradient_chunks(
    const std::vector<mesh::LayerProgram>& programs) const {
  if (!fully_sharded_) return mesh::gradient_chunks(programs, bucket_bytes_);
  std::vector<mesh::GradientChunk> chunks;
  for (int l = int(programs.size()) - 1; l >= 0; --l) {
    mesh::GradientChunk layer;
    for (const mesh::Event& ev : programs[std::size_t(l)].backward)
      if (ev.kind == mesh::Event::GradientAllReduce) {
        layer.reductions.push_back({&ev, l});
        layer.bytes += ev.bytes;
      }
    if (layer.bytes > 0) chunks.push_back(std::move(layer));
  }
  return chunks;
}

/// A combined reduction's entry of the details: the layers it spans (first, last), its
/// parameters and bytes on the wire; sharded, each replica's piece of it, each weight padded to
/// an equal piece per replica (adding the padding to `padding`); fully sharded, the bytes its
/// layer's two gathers bring.
Json DataParallel::bucket_json(const mesh::GradientChunk& chunk, double& padding) const {
  int first = chunk.reductions.front().second, last = first;
  double shard = 0;
  for (const auto& [ev, l] : chunk.reductions) {
    first = std::min(first, l);
    last = std::max(last, l);
    shard += mesh::piece_elements(ev->bytes / wire_.weight_bytes, shard_group_);
  }
  const double params = chunk.bytes / wire_.weight_bytes;
  Json j{{"layers", {first, last}},
         {"params", params},
         {"gradient_bytes_on_wire", params * wire_.gradient_bytes}};
  if (sharded_) {
    j["shard_params"] = shard;
    padding += shard * shard_group_ - params;
  }
  if (fully_sharded_) j["weight_bytes_gathered"] = 2.0 * wire_.gathered_weight_bytes * params;
  return j;
}

}  // namespace tpusim
