#include "workflows/plan_space.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
#include <type_traits>

#include "hardware/json_fields.hpp"
#include "models/save_policies/save_policy.hpp"
#include "schedules/mesh_lowering.hpp"

namespace tpusim::workflows {

namespace {

/// Powers of two from `from` up to `to` inclusive.
std::vector<std::int64_t> powers_of_two(std::int64_t from, std::int64_t to) {
  std::vector<std::int64_t> out;
  for (std::int64_t v = from; v <= to; v *= 2) out.push_back(v);
  return out;
}

template <class T>
bool allowed(const std::optional<std::vector<T>>& list, const T& value) {
  return !list || std::find(list->begin(), list->end(), value) != list->end();
}

template <class T>
std::optional<std::vector<T>> read_list(Fields& f, const std::string& key, const char* expected) {
  const Json* v = f.optional(key);
  if (!v) return std::nullopt;
  std::vector<T> out;
  if (!v->is_array() || v->empty()) {
    f.problems().add(f.path_of(key), *v, std::string("a non-empty array of ") + expected);
    return out;
  }
  for (std::size_t i = 0; i < v->size(); ++i) {
    const Json& e = (*v)[i];
    bool ok = false;
    if constexpr (std::is_same_v<T, std::string>) ok = e.is_string();
    if constexpr (std::is_same_v<T, bool>) ok = e.is_boolean();
    if constexpr (std::is_same_v<T, Json>)
      ok = e.is_boolean() || (e.is_string() && find_save_policy(e.get<std::string>()));
    if constexpr (std::is_same_v<T, std::int64_t>) ok = e.is_number_integer() && e.get<std::int64_t>() >= 1;
    if (!ok) {
      f.problems().add(index_path(f.path_of(key), i), e, expected);
      continue;
    }
    out.push_back(e.get<T>());
  }
  return out;
}

/// A list of strings each one of `choices` ("a", "b" or "c").
std::optional<std::vector<std::string>> read_choices(Fields& f, const std::string& key,
                                                     const std::vector<std::string>& choices) {
  std::string expected;
  for (std::size_t i = 0; i < choices.size(); ++i)
    expected += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + ("\"" + choices[i] + "\"");
  auto list = read_list<std::string>(f, key, expected.c_str());
  for (std::size_t i = 0; list && i < list->size(); ++i)
    if (std::find(choices.begin(), choices.end(), (*list)[i]) == choices.end())
      f.problems().add(index_path(f.path_of(key), i), Json((*list)[i]), expected);
  return list;
}

/// Named dimensions of the model's ops (empty when a layer has no named ops: no mesh layout).
std::set<std::string> named_dimensions(const Model& model) {
  std::set<std::string> dims;
  for (const auto& layer : model.layers) {
    if (!layer.named_ops) return {};
    for (const auto& op : layer.named_ops(1))
      for (const auto* t : {&op.a, &op.b, &op.out})
        for (const auto& d : t->dims) dims.insert(d.name);
  }
  return dims;
}

/// Re-materialization policies, in the order candidates list them (`base`), then the other save
/// policies the space names (MaxText's "save_qkv_proj", say), in its order.
std::vector<Json> remat_policies(const PlanSpace& space,
                                 std::vector<Json> base = {false, true, "save_dots"}) {
  if (space.remat)
    for (const Json& r : *space.remat)
      if (std::find(base.begin(), base.end(), r) == base.end()) base.push_back(r);
  return base;
}

/// A candidate's re-materialization: anything but false.
bool rematerialized(const Json& c) { return c.contains("remat") && c.at("remat") != false; }

/// The gradient accumulation steps data parallelism is tried with: 1, 2, 4 and 8 (or the
/// space's list) where they divide the examples each replica takes; 1 alone for fully sharded
/// weights (gathered per micro-batch: not modelled).
std::vector<std::int64_t> accumulation_steps(const Study& study, const PlanSpace& space,
                                             const std::string& update) {
  const std::int64_t per_replica = study.batch / std::max(1, study.cores());
  std::vector<std::int64_t> out;
  for (const std::int64_t a : space.accumulation_steps.value_or(std::vector<std::int64_t>{1, 2, 4, 8}))
    if (a == 1 || (update != "fully_sharded" && per_replica % a == 0)) out.push_back(a);
  return out;
}

/// The groups of replicas weight-update sharding cuts pieces over (schedule.shard_group): every
/// replica, or the space's list where it divides them. Absent, every replica alone: a smaller
/// group carries more bytes per core (a reduce-scatter within it and an all-reduce of the pieces
/// across the groups) and holds more, so it only pays where latency rules, and a space asks.
std::vector<std::int64_t> shard_groups(const Study& study, const PlanSpace& space,
                                       const std::string& update) {
  const std::int64_t replicas = study.cores();
  if (update == "replicated" || !space.shard_group) return {replicas};
  std::vector<std::int64_t> out;
  for (const std::int64_t g : *space.shard_group)
    if (g <= replicas && replicas % g == 0 && std::find(out.begin(), out.end(), g) == out.end())
      out.push_back(g);
  return out;
}

/// Whether to offload each layer's input to host memory (false, and true where the space asks,
/// the layers are re-materialized whole and the hosts' memory is known).
std::vector<bool> offload_choices(const Study& study, const PlanSpace& space, const Json& remat) {
  std::vector<bool> choices;
  if (allowed(space.offload, false)) choices.push_back(false);
  if (space.offload && allowed(space.offload, true) && remat == true &&
      study.hardware.chip.host_memory_bytes_per_host > 0)
    choices.push_back(true);
  return choices;
}

/// Data parallelism: the update replicated, sharded or fully sharded, fp32 or bf16 gradients,
/// gradient buckets of a quarter, one and four times the hardware's all-reduce combine threshold
/// (fully sharded: one layer each), each layer's activations kept, re-materialized or
/// re-materialized but for the matmuls' outputs, and the replica's batch in one micro-batch or
/// accumulated over several.
void data_parallel(const Study& study, const PlanSpace& space, std::vector<Json>& out) {
  const double combine = study.hardware.core.allreduce_combine_threshold_bytes;
  for (const std::string update : {"replicated", "sharded", "fully_sharded"}) {
    if (!allowed(space.weight_update, update)) continue;
    for (const std::string dtype : {"fp32", "bf16"}) {
      if (!allowed(space.gradient_dtype, dtype)) continue;
      if (dtype == "fp32" && study.model.weight_bytes < kFp32Bytes) continue;  // bf16 weights: bf16 gradients
      for (const Json& remat : remat_policies(space)) {
        if (!allowed(space.remat, remat)) continue;
        // Fully sharded reduces each layer on its own: one bucket size stands for all.
        const std::vector<double> buckets = update == "fully_sharded"
                                                ? std::vector<double>{combine}
                                                : std::vector<double>{combine / 4, combine, combine * 4};
        for (double bucket : buckets)
          for (const std::int64_t accumulate : accumulation_steps(study, space, update))
            for (const bool offload : offload_choices(study, space, remat))
              for (const std::int64_t group : shard_groups(study, space, update)) {
                Json c{{"kind", "data_parallel"}, {"weight_update", update}, {"gradient_dtype", dtype}};
                if (group < study.cores()) c["shard_group"] = group;
                if (update != "fully_sharded") c["gradient_bucket_bytes"] = std::max(1.0, std::round(bucket));
                if (remat != false) c["remat"] = remat;
                if (accumulate > 1) c["accumulation_steps"] = accumulate;
                if (offload) c["offload"] = Json::array({"layer_input"});
                out.push_back(std::move(c));
              }
      }
    }
  }
}

/// Model chunks per stage a pipeline of K stages and M micro-batches is tried with: 1, and under
/// one_f_one_b Megatron's interleaving, V = 2 and 4 where M is a multiple of K and the layers
/// give every one of the K x V chunks one (or the space's list).
std::vector<std::int64_t> virtual_stages(const Study& study, const PlanSpace& space, const std::string& kind,
                                         std::int64_t k, std::int64_t m) {
  std::vector<std::int64_t> out;
  for (const std::int64_t v : {1, 2, 4})
    if (allowed(space.virtual_stages, v) &&
        (v == 1 || (kind == "one_f_one_b" && m % k == 0 && k * v <= std::int64_t(study.model.layers.size()))))
      out.push_back(v);
  return out;
}

/// The replicas and micro-batches of K stages of T cores each.
void pipeline_shapes(const Study& study, const PlanSpace& space, const std::string& kind, std::int64_t k,
                     std::int64_t t, std::vector<Json>& out) {
  for (std::int64_t r : powers_of_two(1, study.cores() / (k * t))) {
    if (!allowed(space.replicas, r) || study.batch % r != 0) continue;
    const std::int64_t per_replica = study.batch / r;
    for (std::int64_t m : powers_of_two(1, std::min(per_replica, space.max_microbatches))) {
      if (!allowed(space.microbatches, m) || per_replica % m != 0) continue;
      // With one replica every placement is auto's: one candidate, whichever the space lists.
      std::vector<std::string> placements = space.placement.value_or(std::vector<std::string>{"auto"});
      if (r == 1) placements = {"auto"};
      // With replicas, the update replicated or sharded over them (one replica: nothing to shard).
      std::vector<std::string> updates;
      for (const std::string update : {"replicated", "sharded"})
        if (allowed(space.weight_update, update) && (r > 1 || update == "replicated"))
          updates.push_back(update);
      for (const auto& update : updates)
        for (const Json& remat : remat_policies(space, {true, false, "save_dots"}))
          for (const std::int64_t v : virtual_stages(study, space, kind, k, m))
            for (const auto& cut : v > 1 ? std::vector<std::string>{"balanced"}
                                         : space.partition.value_or(std::vector<std::string>{"memory_aware"}))
              for (const auto& place : placements)
                if (allowed(space.remat, remat)) {
                  Json s{{"kind", kind},      {"stages", k},    {"replicas", r},
                         {"microbatches", m}, {"remat", remat}, {"partition", cut}};
                  if (t > 1) s["tensor_parallel"] = t;
                  if (v > 1) s["virtual_stages"] = v;
                  if (place != "auto") s["placement"] = place;
                  if (update == "sharded") s["weight_update"] = "sharded";
                  out.push_back(std::move(s));
                }
    }
  }
}

/// Pipelines: K stages x R replicas x M micro-batches, with each re-materialization policy, each
/// stage on T cores that split its layers (tensor parallelism, for models with d_ff or heads
/// dimensions).
void pipelines(const Study& study, const PlanSpace& space, std::vector<Json>& out) {
  const std::int64_t cores = study.cores(), layers = std::int64_t(study.model.layers.size());
  const auto dims = named_dimensions(study.model);
  const bool splittable = dims.count("d_ff") || dims.count("heads");
  for (const std::string kind : {"gpipe", "one_f_one_b"}) {
    if (!allowed(space.kinds, kind)) continue;
    for (std::int64_t k : powers_of_two(2, std::min(cores, layers))) {
      if (!allowed(space.stages, k)) continue;
      for (std::int64_t t : powers_of_two(1, splittable ? std::min<std::int64_t>(4, cores / k) : 1)) {
        if (!allowed(space.tensor_parallel, t)) continue;
        pipeline_shapes(study, space, kind, k, t, out);
      }
    }
  }
}

/// The model-axis layouts of a model's meshes: the image height of a convolutional net (spatial
/// partitioning); otherwise Megatron's (the feed-forward width, the heads and the vocabulary:
/// every layer's weights split), the model width (weights split along d_model, the
/// normalizations' statistics combined) and the sequence (attention gathers keys and values).
std::vector<std::vector<std::string>> model_axis_layouts(const std::set<std::string>& dims) {
  if (dims.count("height")) return {{"height"}};
  std::vector<std::vector<std::string>> out;
  std::vector<std::string> megatron;
  for (const char* d : {"d_ff", "heads", "vocab"})
    if (dims.count(d)) megatron.push_back(d);
  if (!megatron.empty()) out.push_back(megatron);
  for (const char* d : {"d_model", "seq"})
    if (dims.count(d)) out.push_back({d});
  return out;
}

/// Whether a layout's model axis leaves every layer's input whole, so that re-materialization may
/// keep it split over that axis (schedule.layer_input_split).
bool inputs_whole_on_model(const Study& study, const Json& layout) {
  return std::all_of(study.model.layers.begin(), study.model.layers.end(),
                     [](const Layer& l) { return bool(l.named_ops); }) &&
         mesh::input_split_over(study, layout.get<std::map<std::string, std::string>>(), "model").empty();
}

/// A mesh with each weight update and re-materialization policy (a mixture of experts' split over
/// the batch's axis: expert parallelism, the experts' tokens exchanged by all-to-all), and where
/// the space asks, re-materialized with the layers' inputs split over the model axis.
void push_mesh(const Study& study, const PlanSpace& space, Json mesh, Json layout, std::vector<Json>& out) {
  if (study.model.mixture_of_experts) layout["experts"] = "batch";
  const auto& splits = space.layer_input_split;
  const bool whole = !splits || std::find(splits->begin(), splits->end(), false) != splits->end();
  const bool on_model =
      std::any_of(layout.begin(), layout.end(), [](const Json& axis) { return axis == "model"; });
  const bool split = splits && std::find(splits->begin(), splits->end(), true) != splits->end() && on_model &&
                     inputs_whole_on_model(study, layout);
  for (const std::string update : {"replicated", "sharded", "fully_sharded"}) {
    for (const Json& remat : remat_policies(space)) {
      if (!allowed(space.weight_update, update) || !allowed(space.remat, remat)) continue;
      for (const bool split_inputs : {false, true}) {
        if (split_inputs ? !split || remat == false : !whole) continue;
        for (const bool offload : offload_choices(study, space, remat)) {
          out.push_back({{"kind", "mesh"}, {"mesh", mesh}, {"layout", layout}, {"weight_update", update}});
          if (remat != false) out.back()["remat"] = remat;
          if (split_inputs) out.back()["layer_input_split"] = "model";
          if (offload) out.back()["offload"] = Json::array({"layer_input"});
        }
      }
    }
  }
}

/// Three-dimensional meshes batch x model2 x model: Megatron's dimensions on the model axis
/// (innermost: its partial sums are the most frequent) and d_model or the sequence on a second
/// model axis, every power-of-two pair of sizes.
void meshes_3d(const Study& study, const PlanSpace& space, const std::set<std::string>& dims,
               std::vector<Json>& out) {
  const auto layouts = model_axis_layouts(dims);
  if (layouts.empty() || dims.count("height") || !dims.count("d_ff")) return;
  const std::int64_t cores = study.cores();
  for (std::size_t second = 1; second < layouts.size(); ++second) {
    Json layout{{"batch", "batch"}};
    for (const auto& d : layouts[0]) layout[d] = "model";
    for (const auto& d : layouts[second]) layout[d] = "model2";
    for (std::int64_t m : powers_of_two(2, cores / 2)) {
      if (!allowed(space.model_axis, m)) continue;
      for (std::int64_t m2 : powers_of_two(2, cores / m))
        if (study.batch % (cores / (m * m2)) == 0)
          push_mesh(study, space,
                    Json::array({Json::array({"batch", cores / (m * m2)}), Json::array({"model2", m2}),
                                 Json::array({"model", m})}),
                    layout, out);
    }
  }
}

/// Two-dimensional meshes (batch x model) for every power-of-two model axis and every
/// model-axis layout, and three-dimensional ones unless the space turns them off; the update
/// replicated, sharded or fully sharded.
void meshes(const Study& study, const PlanSpace& space, std::vector<Json>& out) {
  const auto dims = named_dimensions(study.model);
  const std::int64_t cores = study.cores();
  // Experts need a mesh to split them: the batch over every core, the experts with it.
  if (study.model.mixture_of_experts && study.batch % cores == 0 &&
      allowed(space.model_axis, std::int64_t(1)))
    push_mesh(study, space, Json::array({Json::array({"batch", cores})}), Json{{"batch", "batch"}}, out);
  if (space.meshes_3d) meshes_3d(study, space, dims, out);
  for (const auto& on_model : space.model_axis_dims.value_or(model_axis_layouts(dims))) {
    Json layout{{"batch", "batch"}};
    bool present = true;
    for (const auto& d : on_model) {
      present = present && dims.count(d);
      layout[d] = "model";
    }
    if (!present || on_model.empty()) continue;
    for (std::int64_t m : powers_of_two(2, cores))
      if (allowed(space.model_axis, m) && study.batch % (cores / m) == 0)
        push_mesh(study, space, Json::array({Json::array({"batch", cores / m}), Json::array({"model", m})}),
                  layout, out);
  }
}

/// "model_axis_dims": the sets of tensor dimensions a mesh's model axis may split.
void read_model_axis_dims(Fields& f, Problems& problems, PlanSpace& s) {
  if (const Json* v = f.optional("model_axis_dims")) {
    const auto& known = named_dims();
    s.model_axis_dims.emplace();
    if (!v->is_array() || v->empty())
      problems.add(f.path_of("model_axis_dims"), *v, "a non-empty array of arrays of tensor dimensions");
    for (std::size_t i = 0; v->is_array() && i < v->size(); ++i) {
      const Json& set = (*v)[i];
      std::vector<std::string> dims;
      for (std::size_t k = 0; set.is_array() && k < set.size(); ++k)
        if (set[k].is_string() &&
            std::find(known.begin(), known.end(), set[k].get<std::string>()) != known.end())
          dims.push_back(set[k].get<std::string>());
      if (!set.is_array() || set.empty() || dims.size() != set.size())
        problems.add(
            index_path(f.path_of("model_axis_dims"), i), set,
            "a non-empty array of tensor dimensions (batch excluded): seq, d_model, d_ff, heads, d_kv, "
            "vocab, height, width");
      else if (std::find(dims.begin(), dims.end(), "batch") != dims.end())
        problems.add(index_path(f.path_of("model_axis_dims"), i), set, "dimensions other than batch");
      else
        s.model_axis_dims->push_back(dims);
    }
  }
}

}  // namespace

PlanSpace read_plan_space(const std::string& file) {
  const Json j = read_json_file(file);
  Problems problems(file);
  Fields f(j, "", problems);
  PlanSpace s;
  if (f.ok()) {
    f.string("schema", {"tpusim.plan_space/1"});
    std::vector<std::string> kinds;
    for (const auto& [kind, factory] : schedule_registry()) kinds.push_back(kind);
    s.kinds = read_choices(f, "kinds", kinds);
    s.stages = read_list<std::int64_t>(f, "stages", "an integer >= 1");
    s.replicas = read_list<std::int64_t>(f, "replicas", "an integer >= 1");
    s.microbatches = read_list<std::int64_t>(f, "microbatches", "an integer >= 1");
    s.model_axis =
        read_list<std::int64_t>(f, "model_axis", "an integer >= 1 (cores on the mesh's model axis)");
    s.tensor_parallel =
        read_list<std::int64_t>(f, "tensor_parallel", "an integer >= 1 (cores per pipeline stage)");
    s.virtual_stages = read_list<std::int64_t>(
        f, "virtual_stages", "an integer >= 1 (model chunks per one_f_one_b stage: 1, 2 or 4 are searched)");
    s.remat = read_list<Json>(f, "remat",
                              ("true, false or a save policy (" + save_policy_names(false) + ")").c_str());
    s.accumulation_steps = read_list<std::int64_t>(
        f, "accumulation_steps", "an integer >= 1 (data parallelism's micro-batches per replica)");
    s.shard_group = read_list<std::int64_t>(
        f, "shard_group", "an integer >= 1 (replicas data parallelism's sharded pieces are cut over)");
    s.weight_update = read_choices(f, "weight_update", {"replicated", "sharded", "fully_sharded"});
    s.gradient_dtype = read_choices(f, "gradient_dtype", {"fp32", "bf16"});
    s.attention = read_choices(f, "attention", {"standard", "flash"});
    s.partition = read_choices(f, "partition", {"balanced", "memory_aware"});
    s.placement = read_choices(f, "placement", {"auto", "by_stage"});
    read_model_axis_dims(f, problems, s);
    s.layer_input_split = read_list<bool>(f, "layer_input_split", "true or false");
    s.offload = read_list<bool>(f, "offload", "true or false");
    s.max_microbatches = f.integer_or("max_microbatches", s.max_microbatches, 1, 1 << 20);
    s.meshes_3d = f.boolean_or("meshes_3d", true);
    if (const Json* d = f.optional("description"); d && !d->is_string())
      problems.add(f.path_of("description"), *d, "a string");
    f.finish();
  }
  problems.throw_if_any();
  return s;
}

/// The study's cross-replica batch norm (its schedule's batch_norm_group; 1 when it has none).
std::int64_t batch_norm_group(const Study& study) {
  const Json& schedule = study.json.value("schedule", Json::object());
  return schedule.is_object() ? schedule.value("batch_norm_group", std::int64_t(1)) : 1;
}

/// Keeps the study's batch-norm groups in every candidate: a training setting, not a way to
/// split the work. Candidates that cannot honour them are left out: pipelines (each stage keeps
/// its micro-batches' statistics), re-materialized or accumulating data parallelism and layouts
/// whose batch replicas they do not divide.
std::vector<Json> with_batch_norm_group(std::vector<Json> candidates, std::int64_t group) {
  if (group <= 1) return candidates;
  std::vector<Json> out;
  for (auto& c : candidates) {
    const std::string kind = c.at("kind").get<std::string>();
    if (kind == "mesh") {
      std::int64_t replicas = 1;
      for (const auto& axis : c.at("mesh"))
        if (c.at("layout").value("batch", "") == axis[0].get<std::string>())
          replicas = axis[1].get<std::int64_t>();
      if (replicas % group != 0) continue;
    } else if (kind != "data_parallel" || rematerialized(c) ||
               c.value("weight_update", "") == "fully_sharded" || c.contains("accumulation_steps")) {
      continue;  // not modelled with cross-replica batch norm
    }
    c["batch_norm_group"] = group;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Json> plan_candidates(const Study& study, const PlanSpace& space) {
  std::vector<Json> out;
  if (allowed(space.kinds, std::string("data_parallel"))) data_parallel(study, space, out);
  pipelines(study, space, out);
  if (allowed(space.kinds, std::string("mesh"))) meshes(study, space, out);
  return with_batch_norm_group(std::move(out), batch_norm_group(study));
}

namespace {

/// " remat", " save_dots" or nothing.
std::string remat_label(const Json& s) {
  if (!rematerialized(s)) return "";
  return s.at("remat") == true ? " remat" : " " + s.at("remat").get<std::string>();
}

}  // namespace

std::string plan_label(const Json& s) {
  const std::string kind = s.at("kind").get<std::string>();
  if (kind == "data_parallel") {
    const double bucket = s.value("gradient_bucket_bytes", 0.0);
    char mib[32];
    std::snprintf(mib, sizeof mib, "%g", bucket / (1 << 20));
    const std::int64_t accumulate = s.value("accumulation_steps", std::int64_t(1));
    const std::int64_t group = s.value("shard_group", std::int64_t(0));
    return "data_parallel " + s.value("weight_update", "replicated") + " " +
           s.value("gradient_dtype", "fp32") + (group > 0 ? " group " + std::to_string(group) : "") +
           (bucket > 0 ? std::string(" bucket ") + mib + " MiB" : "") +
           (accumulate > 1 ? " accum " + std::to_string(accumulate) : "") + remat_label(s) +
           (s.contains("offload") ? " offload" : "");
  }
  if (kind == "mesh") {
    std::string mesh, on_model, on_second;
    for (const auto& axis : s.at("mesh"))
      mesh += (mesh.empty() ? "" : "x") + axis[0].get<std::string>() + ":" + axis[1].dump();
    for (auto it = s.at("layout").begin(); it != s.at("layout").end(); ++it) {
      if (it.value() == "model") on_model += (on_model.empty() ? "" : "+") + it.key();
      if (it.value() == "model2") on_second += (on_second.empty() ? "" : "+") + it.key();
    }
    if (!on_second.empty()) on_model += "; model2: " + on_second;
    const bool experts = s.at("layout").value("experts", "") == "batch";
    return "mesh " + mesh + (on_model.empty() ? "" : " (" + on_model + ")") + (experts ? " experts" : "") +
           " " + s.value("weight_update", "replicated") + remat_label(s) +
           (s.contains("layer_input_split") ? " split-inputs" : "") +
           (s.contains("offload") ? " offload" : "");
  }
  return kind + " K=" + s.at("stages").dump() + " R=" + s.value("replicas", Json(1)).dump() +
         " M=" + s.at("microbatches").dump() +
         (s.contains("tensor_parallel") ? " T=" + s.at("tensor_parallel").dump() : "") +
         (s.contains("virtual_stages") ? " V=" + s.at("virtual_stages").dump() : "") + remat_label(s) +
         (s.value("partition", "memory_aware") == "balanced" ? " cost-cut" : "") +
         (s.value("placement", "auto") == "by_stage" ? " by-stage" : "") +
         (s.value("weight_update", "replicated") == "sharded" ? " sharded" : "");
}

}  // namespace tpusim::workflows

namespace tpusim::workflows {

namespace {

/// The label's words, a parenthesized group (a mesh's model-axis dimensions) kept as one word.
std::vector<std::string> label_words(const std::string& label) {
  std::vector<std::string> words;
  std::string word;
  int depth = 0;
  for (const char ch : label) {
    depth += ch == '(' ? 1 : ch == ')' ? -1 : 0;
    if (ch == ' ' && depth == 0) {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word += ch;
    }
  }
  if (!word.empty()) words.push_back(word);
  return words;
}

/// "K=4" -> 4 when `word` starts with `key`=; -1 otherwise.
std::int64_t keyed(const std::string& word, const std::string& key) {
  if (word.rfind(key + "=", 0) != 0) return -1;
  try {
    std::size_t used = 0;
    const std::int64_t v = std::stoll(word.substr(key.size() + 1), &used);
    return used == word.size() - key.size() - 1 && v >= 1 ? v : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

/// A trailing "offload": each layer's input offloaded to host memory.
void read_offload_word(std::vector<std::string>& words, Json& s) {
  if (words.empty() || words.front() != "offload") return;
  s["offload"] = Json::array({"layer_input"});
  words.erase(words.begin());
}

/// A trailing remat word ("remat", or a save policy's name: "save_dots") into `s` (`fallback`
/// when there is none).
void read_remat_word(std::vector<std::string>& words, Json& s, const Json& fallback) {
  if (!words.empty() && (words.front() == "remat" || find_save_policy(words.front()))) {
    s["remat"] = words.front() == "remat" ? Json(true) : Json(words.front());
    words.erase(words.begin());
  } else if (!fallback.is_null()) {
    s["remat"] = fallback;
  }
}

/// Leading words "`word` N" into `s[key]` (N an integer >= `min` written as such); false when
/// they are there but N is not.
bool read_counted_word(std::vector<std::string>& w, const char* word, const char* key, long long min,
                       Json& s) {
  if (w.size() < 2 || w[0] != word) return true;
  std::size_t used = 0;
  const long long n = std::stoll(w[1], &used);
  if (used != w[1].size() || n < min) return false;
  s[key] = n;
  w.erase(w.begin(), w.begin() + 2);
  return true;
}

Json data_parallel_of(std::vector<std::string> w) {
  if (w.size() < 2) return nullptr;
  Json s{{"kind", "data_parallel"}, {"weight_update", w[0]}, {"gradient_dtype", w[1]}};
  w.erase(w.begin(), w.begin() + 2);
  if (!read_counted_word(w, "group", "shard_group", 1, s)) return nullptr;
  if (w.size() >= 3 && w[0] == "bucket" && w[2] == "MiB") {
    const double mib = std::stod(w[1]);
    if (!(std::isfinite(mib) && mib > 0)) return nullptr;
    s["gradient_bucket_bytes"] = std::max(1.0, std::round(mib * double(1 << 20)));
    w.erase(w.begin(), w.begin() + 3);
  }
  if (!read_counted_word(w, "accum", "accumulation_steps", 2, s)) return nullptr;
  read_remat_word(w, s, nullptr);
  read_offload_word(w, s);
  return w.empty() ? s : Json(nullptr);
}

Json mesh_of(std::vector<std::string> w) {
  if (w.empty()) return nullptr;
  Json s{{"kind", "mesh"}, {"mesh", Json::array()}, {"layout", {{"batch", "batch"}}}};
  std::string axes = w.front() + "x";
  for (std::size_t at; (at = axes.find('x')) != std::string::npos; axes.erase(0, at + 1)) {
    const std::string axis = axes.substr(0, at);
    const auto colon = axis.find(':');
    if (colon == std::string::npos) return nullptr;
    s["mesh"].push_back(Json::array({axis.substr(0, colon), std::stoll(axis.substr(colon + 1))}));
  }
  w.erase(w.begin());
  if (!w.empty() && w.front().front() == '(') {
    std::string dims = w.front().substr(1, w.front().size() - 2), on = "model";
    const auto second = dims.find("; model2: ");
    std::string model2 = second == std::string::npos ? "" : dims.substr(second + 10);
    if (second != std::string::npos) dims.erase(second);
    for (const auto& [list, axis] :
         {std::pair{dims, std::string("model")}, std::pair{model2, std::string("model2")}})
      for (std::string rest = list + "+"; rest.size() > 1;) {
        const auto plus = rest.find('+');
        s["layout"][rest.substr(0, plus)] = axis;
        rest.erase(0, plus + 1);
      }
    w.erase(w.begin());
  }
  if (!w.empty() && w.front() == "experts") {  // expert parallelism over the batch's axis
    s["layout"]["experts"] = "batch";
    w.erase(w.begin());
  }
  if (w.empty()) return nullptr;
  s["weight_update"] = w.front();
  w.erase(w.begin());
  read_remat_word(w, s, nullptr);
  if (!w.empty() && w.front() == "split-inputs") {
    s["layer_input_split"] = "model";
    w.erase(w.begin());
  }
  read_offload_word(w, s);
  return w.empty() ? s : Json(nullptr);
}

Json pipeline_of(const std::string& kind, std::vector<std::string> w) {
  Json s{{"kind", kind}};
  for (const auto& [key, field] :
       {std::pair{"K", "stages"}, std::pair{"R", "replicas"}, std::pair{"M", "microbatches"}}) {
    if (w.empty() || keyed(w.front(), key) < 1) return nullptr;
    s[field] = keyed(w.front(), key);
    w.erase(w.begin());
  }
  for (const auto& [key, field] : {std::pair{"T", "tensor_parallel"}, std::pair{"V", "virtual_stages"}})
    if (!w.empty() && keyed(w.front(), key) >= 1) {
      s[field] = keyed(w.front(), key);
      w.erase(w.begin());
    }
  read_remat_word(w, s, false);
  s["partition"] = "memory_aware";
  const std::vector<std::pair<std::string, std::function<void()>>> flags = {
      {"cost-cut", [&] { s["partition"] = "balanced"; }},
      {"by-stage", [&] { s["placement"] = "by_stage"; }},
      {"sharded", [&] { s["weight_update"] = "sharded"; }}};
  for (const auto& [word, apply] : flags)
    if (!w.empty() && w.front() == word) {
      apply();
      w.erase(w.begin());
    }
  return w.empty() ? s : Json(nullptr);
}

}  // namespace

std::vector<std::string> plan_label_sets(const std::string& label, const std::string& study,
                                         const std::vector<std::string>& sets) {
  LabeledPlan plan = schedule_of_plan_label(label);
  Json base = read_json_file(study);
  for (const auto& s : sets) apply_override(base, s);
  const Json* schedule = base.is_object() && base.contains("schedule") ? &base["schedule"] : nullptr;
  if (schedule && schedule->is_object() && schedule->contains("batch_norm_group") &&
      !plan.schedule.contains("batch_norm_group"))
    plan.schedule["batch_norm_group"] = (*schedule)["batch_norm_group"];
  std::vector<std::string> out = {"schedule=" + plan.schedule.dump()};
  if (!plan.attention.empty()) out.push_back("model.attention=\"" + plan.attention + "\"");
  return out;
}

LabeledPlan schedule_of_plan_label(const std::string& label) {
  std::vector<std::string> w = label_words(label);
  LabeledPlan plan;
  if (!w.empty() && (w.back() == "flash" || w.back() == "standard")) {
    plan.attention = w.back();
    w.pop_back();
  }
  Json s;
  try {
    const std::string kind = w.empty() ? "" : w.front();
    const std::vector<std::string> rest(w.begin() + (w.empty() ? 0 : 1), w.end());
    s = kind == "data_parallel"                    ? data_parallel_of(rest)
        : kind == "mesh"                           ? mesh_of(rest)
        : kind == "gpipe" || kind == "one_f_one_b" ? pipeline_of(kind, rest)
                                                   : Json(nullptr);
  } catch (const std::exception&) {
    s = nullptr;
  }
  // Only a label plan prints names a plan: read back, it prints as given (a number written
  // otherwise, "nan", "-128", "0x10" or "8junk", is no label of any candidate).
  if (!s.is_null()) {
    std::string as_given;
    for (const auto& word : w) as_given += (as_given.empty() ? "" : " ") + word;
    if (plan_label(s) != as_given) s = nullptr;
  }
  if (s.is_null())
    throw ConfigError("command line", "--plan-label", "\"" + label + "\"",
                      "a plan's label as tpusim plan prints it, e.g. \"one_f_one_b K=4 R=16 M=64 V=4 "
                      "cost-cut sharded flash\" or \"data_parallel fully_sharded bf16 save_dots\"");
  plan.schedule = std::move(s);
  return plan;
}

}  // namespace tpusim::workflows
