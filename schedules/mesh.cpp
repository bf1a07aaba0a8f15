#include "schedules/mesh.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "hardware/errors.hpp"
#include "hardware/topology.hpp"
#include "schedules/batch_problem.hpp"
#include "schedules/gradient_buckets.hpp"
#include "schedules/mesh_lowering.hpp"
#include "schedules/step_tail.hpp"
#include "sim/collectives/collective_algorithm.hpp"
#include "sim/task_graph.hpp"

namespace tpusim {

using namespace mesh;

MeshSchedule::MeshSchedule(Fields& f, const Study& study, Problems& problems, int cores)
    : cores_(cores > 0 ? cores : study.cores()) {
  if (const Json* mesh = f.value("mesh")) read_mesh(*mesh, f.path_of("mesh"), study, problems);
  axis_sizes_ = {study.hardware.chip.cores};
  axis_names_ = {"core"};
  for (int d = 0; d < study.slice.dims(); ++d) {
    axis_sizes_.push_back(study.slice.shape[std::size_t(d)]);
    axis_names_.push_back(Topology::dimension_name(d));
  }
  if (const Json* placement = f.optional("placement"))
    read_placement(*placement, f.path_of("placement"), study, problems);
  weight_update_ = f.string_or("weight_update", "replicated", {"replicated", "sharded", "fully_sharded"});
  wire_ = read_wire_dtypes(f, fully_sharded(), study.model.weight_bytes);
  read_weight_gathers(f, study, problems);
  bucket_bytes_ =
      read_gradient_bucket_bytes(f, study.hardware.core.allreduce_combine_threshold_bytes, fully_sharded());
  remat_ = read_remat(f, Keep::All, saves_);
  offload_ = read_offload(f, remat_, study, problems);
  for (const auto& [name, size] : mesh_) sizes_[name] = size;
  if (const Json* layout = f.value("layout")) read_layout(*layout, f.path_of("layout"), sizes_, problems);
  batch_norm_group_ = int(f.integer_or("batch_norm_group", 1, 1, cores_));
  read_data_parallel_dim(f, problems);
  if (!problems.empty()) return;
  if (batch_norm_group_ > 1 && split("batch") % batch_norm_group_ != 0) {
    problems.add(f.path_of("batch_norm_group"), Json(batch_norm_group_),
                 "a divisor of the " + std::to_string(split("batch")) +
                     " replicas the layout splits the batch over (groups of consecutive replicas)");
    return;
  }
  if (check_batch_multiple(study, examples_split(),
                           "the " + std::to_string(examples_split()) + " " + devices_noun(study) +
                               " the layout" + (data_dim_.empty() ? "" : " and its data dimension") +
                               " split the batch over",
                           problems))
    return;
  if (!read_experts_layout(study, f.path_of("layout"), problems)) return;
  // Every op of every layer must have a legal, evenly divisible layout.
  check_layout(study, layout_, sizes_, f.path_of("layout"), *f.value("layout"), problems);
  read_layer_input_split(f, study, problems);
  read_accumulation(f, study, problems);
}

std::vector<std::pair<std::string, int>>::const_iterator MeshSchedule::named_dimension(
    const Json& given, const std::string& path, Problems& problems) const {
  const auto dim = given.is_string()
                       ? std::find_if(mesh_.begin(), mesh_.end(),
                                      [&](const auto& d) { return d.first == given.get<std::string>(); })
                       : mesh_.end();
  if (dim != mesh_.end()) return dim;
  std::string names;
  for (const auto& [name, size] : mesh_) names += (names.empty() ? "\"" : ", \"") + name + "\"";
  problems.add(path, given, "the name of a mesh dimension (one of " + names + ")");
  return dim;
}

void MeshSchedule::read_data_parallel_dim(Fields& f, Problems& problems) {
  const Json* given = f.optional("data_parallel_dim");
  if (!given || !problems.empty()) return;
  const std::string path = f.path_of("data_parallel_dim");
  const auto dim = named_dimension(*given, path, problems);
  if (dim == mesh_.end()) return;
  for (const auto& [tensor_dim, mesh_dim] : layout_)
    if (mesh_dim == dim->first)
      return problems.add(path, *given,
                          "a mesh dimension the layout maps no tensor dimension to (layout." + tensor_dim +
                              " is split over it): the data dimension replicates the whole layout");
  if (batch_norm_group_ > 1)
    return problems.add(path, *given,
                        "no data_parallel_dim with batch_norm_group > 1 (batch-norm groups across it are "
                        "not modelled)");
  data_dim_ = dim->first;
  data_cores_ = dim->second;
}

Sharding MeshSchedule::sharding(const Study& study) const {
  Sharding s{layout_, sizes_, study.hardware.core.activation_tile_lanes(), study.model.weight_bytes};
  s.data_dim = data_dim_;
  return s;
}

void MeshSchedule::read_accumulation(Fields& f, const Study& study, Problems& problems) {
  accumulation_steps_ =
      read_accumulation_steps(f, study.batch / examples_split(), fully_sharded(), batch_norm_group_);
  if (problems.empty() && accumulation_steps_ > 1 && study.model.mixture_of_experts)
    problems.add(f.path_of("accumulation_steps"), Json(accumulation_steps_),
                 "1 with a mixture of experts (its capacity per micro-batch is not modelled)");
}

void MeshSchedule::read_layer_input_split(Fields& f, const Study& study, Problems& problems) {
  const Json* given = f.optional("layer_input_split");
  if (!given) return;
  const std::string path = f.path_of("layer_input_split");
  const auto dim = named_dimension(*given, path, problems);
  if (dim == mesh_.end()) return;
  if (remat_ == Keep::All) {
    problems.add(path, *given,
                 "no layer_input_split without re-materialization (schedule.remat true or \"save_dots\"): "
                 "without it a layer keeps every activation, not only its input");
    return;
  }
  if (dim->first == data_dim_) {
    problems.add(path, *given,
                 "a mesh dimension other than data_parallel_dim (its cores hold other examples, not pieces "
                 "of one input)");
    return;
  }
  // The layer's input must be whole along it: a dimension already split over it leaves nothing
  // more to split.
  if (const std::string split = input_split_over(study, layout_, dim->first); !split.empty()) {
    problems.add(path, *given,
                 "a mesh dimension that does not already split a layer's input (" + split + ")");
    return;
  }
  layer_input_split_ = dim->first;
}

void MeshSchedule::read_weight_gathers(Fields& f, const Study& study, Problems& problems) {
  const bool overlap = study.hardware.core.gradient_collectives_overlap_backward;
  prefetch_gathers_ = f.string_or("weight_gathers", overlap ? "prefetched" : "in_program_order",
                                  {"prefetched", "in_program_order"}) == "prefetched";
  if (problems.empty() && !fully_sharded() && f.has("weight_gathers"))
    problems.add(
        f.path_of("weight_gathers"), Json(prefetch_gathers_ ? "prefetched" : "in_program_order"),
        "no weight_gathers unless weight_update is \"fully_sharded\" (only then are weights gathered "
        "per layer)");
}

int MeshSchedule::input_split_cores() const {
  for (const auto& [name, size] : mesh_)
    if (name == layer_input_split_) return size;
  return 1;
}

bool MeshSchedule::read_experts_layout(const Study& study, const std::string& path, Problems& problems) {
  const auto experts = layout_.find("experts"), batch = layout_.find("batch");
  if (experts == layout_.end()) {
    // Each core routes its own tokens to its own copy of every expert: the expert slots are
    // split as the tokens are.
    if (study.model.mixture_of_experts && batch != layout_.end()) layout_["capacity"] = batch->second;
    return true;
  }
  if (!study.model.mixture_of_experts) {
    problems.add(path + ".experts", Json(experts->second),
                 "no \"experts\" in the layout of a model without experts (a transformer's model.moe)");
    return false;
  }
  // Each core holds its experts' slots for every core's tokens: the tokens travel along the mesh
  // dimension that splits them (an all-to-all), so the experts are split by the batch's.
  if (batch == layout_.end() || batch->second != experts->second) {
    problems.add(path + ".experts", Json(experts->second),
                 "the mesh dimension that splits batch (" +
                     (batch == layout_.end() ? std::string("none does") : "\"" + batch->second + "\"") +
                     "): the experts' cores exchange the tokens the batch's split spreads");
    return false;
  }
  return true;
}

void MeshSchedule::read_mesh(const Json& mesh, const std::string& path, const Study& study,
                             Problems& problems) {
  if (mesh.is_object()) {
    for (auto it = mesh.begin(); it != mesh.end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<std::int64_t>() < 1 ||
          it.value().get<std::int64_t>() > cores_)
        problems.add(path + "." + it.key(), it.value(),
                     "a mesh dimension size: an integer in [1, " + std::to_string(cores_) + "]");
      else
        mesh_.emplace_back(it.key(), int(it.value().get<std::int64_t>()));
    }
  } else if (mesh.is_array()) {
    for (std::size_t i = 0; i < mesh.size(); ++i) {
      const Json& e = mesh[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number_integer() ||
          e[1].get<std::int64_t>() < 1 || e[1].get<std::int64_t>() > cores_)
        problems.add(index_path(path, i), e,
                     "[\"name\", size]: a mesh dimension size in [1, " + std::to_string(cores_) + "]");
      else if (std::any_of(mesh_.begin(), mesh_.end(),
                           [&](const auto& d) { return d.first == e[0].get<std::string>(); }))
        problems.add(index_path(path, i) + "[0]", e[0], "a mesh dimension name not used before in the mesh");
      else
        mesh_.emplace_back(e[0].get<std::string>(), int(e[1].get<std::int64_t>()));
    }
  } else {
    problems.add(path, mesh, "an object of mesh dimension sizes, e.g. {\"batch\": 16, \"model\": 32}");
  }
  read_dcn_dimension(path, study, problems);
  if (problems.empty()) {
    std::int64_t product = 1;
    for (const auto& [name, size] : mesh_) product *= size;
    if (mesh_.empty() || product != cores_)
      problems.add(
          path, mesh,
          "mesh sizes multiplying to the " + std::to_string(cores_) + " cores of slice " + study.slice.name);
  }
}

void MeshSchedule::read_dcn_dimension(const std::string& path, const Study& study, Problems& problems) {
  const auto dcn = std::find_if(mesh_.begin(), mesh_.end(), [](const auto& d) { return d.first == "dcn"; });
  if (dcn == mesh_.end()) return;
  if (dcn->second != study.slices)
    problems.add(path + ".dcn", Json(dcn->second),
                 "the study's slices (" + std::to_string(study.slices) +
                     "): the \"dcn\" dimension is data parallelism across the slices the data-center network "
                     "joins");
  dcn_ = dcn->second;
  mesh_.erase(dcn);
}

void MeshSchedule::read_placement(const Json& placement, const std::string& path, const Study& study,
                                  Problems& problems) {
  if (placement.is_string() && placement.get<std::string>() == "auto") {
  } else if (placement.is_object()) {
    if (problems.empty()) read_axes(placement, path, study, problems);
  } else if (placement.is_array() && placement.size() == mesh_.size()) {
    std::vector<std::pair<std::string, int>> ordered;
    for (const auto& name : placement) {
      auto it = std::find_if(mesh_.begin(), mesh_.end(), [&](const auto& m) {
        return name.is_string() && m.first == name.get<std::string>();
      });
      if (it == mesh_.end() || std::count(placement.begin(), placement.end(), name) > 1) {
        problems.add(
            path, placement,
            "\"auto\", every mesh dimension once (outermost first), or {mesh dimension: [torus axes]}");
        break;
      }
      ordered.push_back(*it);
    }
    if (ordered.size() == mesh_.size()) mesh_ = ordered;
  } else {
    problems.add(path, placement,
                 "\"auto\", every mesh dimension once (outermost first), or {mesh dimension: [torus axes]}");
  }
}

void MeshSchedule::read_layout(const Json& layout, const std::string& path,
                               const std::map<std::string, int>& sizes, Problems& problems) {
  Fields l(layout, path, problems);
  if (l.ok()) {
    for (auto it = layout.begin(); it != layout.end(); ++it) {
      l.allow(it.key());
      const auto& dims = named_dims();
      if (std::find(dims.begin(), dims.end(), it.key()) == dims.end()) {
        std::string names;
        for (const auto& d : dims) names += (names.empty() ? "" : ", ") + d;
        problems.add(l.path_of(it.key()), std::string("an unknown tensor dimension"), "one of " + names);
      } else if (it.value() == "dcn") {
        problems.add(
            l.path_of(it.key()), it.value(),
            "a mesh dimension inside the slice (the batch is split across the slices, \"dcn\", already)");
      } else if (!it.value().is_string() || !sizes.count(it.value().get<std::string>())) {
        problems.add(l.path_of(it.key()), it.value(), "the name of a mesh dimension");
      } else {
        layout_[it.key()] = it.value().get<std::string>();
      }
    }
  }
}

/// One part of a mesh dimension's placement: an axis name (all of what is left of it) or [axis,
/// part size], starting at the axis's next stride; none (a problem at `at`) when it does not fit.
std::optional<MeshSchedule::AxisPart> MeshSchedule::read_axis_part(const Json& e, const std::string& at,
                                                                   const std::vector<std::string>& names,
                                                                   const std::vector<int>& sizes,
                                                                   const std::vector<int>& next_stride,
                                                                   const std::string& expected,
                                                                   Problems& problems) {
  const bool pair = e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_number_integer();
  const std::string axis_name = e.is_string() ? e.get<std::string>() : pair ? e[0].get<std::string>() : "";
  const auto axis = std::size_t(std::find(names.begin(), names.end(), axis_name) - names.begin());
  // A part larger than its axis cannot fit (and must not be narrowed to an int first).
  if (axis == names.size() ||
      (pair && (e[1].get<std::int64_t>() < 1 || e[1].get<std::int64_t>() > sizes[axis]))) {
    problems.add(at, e, expected);
    return std::nullopt;
  }
  AxisPart part{int(axis), next_stride[axis], pair ? int(e[1].get<std::int64_t>()) : sizes[axis]};
  if (std::int64_t(part.stride) * part.size > sizes[axis] || sizes[axis] % (part.stride * part.size) != 0) {
    problems.add(at, e,
                 "a part of axis " + axis_name + " that fits: " + std::to_string(sizes[axis] / part.stride) +
                     " positions of its " + std::to_string(sizes[axis]) +
                     " are left, in parts dividing them");
    return std::nullopt;
  }
  return part;
}

void MeshSchedule::read_axes(const Json& placement, const std::string& path, const Study& study,
                             Problems& problems) {
  std::string expected = "the torus axes this mesh dimension spans, fastest first: \"core\" (the " +
                         std::to_string(axis_sizes_[0]) + " cores of a chip)";
  for (std::size_t a = 1; a < axis_sizes_.size(); ++a)
    expected += ", \"" + axis_names_[a] + "\" (" + std::to_string(axis_sizes_[a]) + " chips)";
  expected += ", or [axis, part size]";
  for (auto it = placement.begin(); it != placement.end(); ++it)
    if (std::none_of(mesh_.begin(), mesh_.end(), [&](const auto& m) { return m.first == it.key(); }))
      problems.add(path + "." + it.key(), it.value(),
                   "a mesh dimension's torus axes (no mesh dimension " + it.key() + ")");
  const int axes = int(axis_sizes_.size());
  std::vector<int> next_stride(axis_sizes_.size(), 1);
  for (const auto& [name, size] : mesh_) {
    const std::string at = path + "." + name;
    auto it = placement.find(name);
    if (it == placement.end() || !it->is_array() || it->empty()) {
      problems.add(at, it == placement.end() ? Json("nothing") : *it, expected);
      continue;
    }
    std::vector<AxisPart> parts;
    std::int64_t product = 1;
    for (std::size_t i = 0; i < it->size(); ++i) {
      const auto part = read_axis_part((*it)[i], index_path(at, i), axis_names_, axis_sizes_, next_stride,
                                       expected, problems);
      if (!part) return;
      next_stride[std::size_t(part->axis)] *= part->size;
      product *= part->size;
      parts.push_back(*part);
    }
    if (product != size) {
      problems.add(at, *it,
                   "torus axes spanning the " + std::to_string(size) + " positions of mesh dimension " +
                       name + " (these span " + std::to_string(product) + ")");
      return;
    }
    axes_.push_back(std::move(parts));
  }
  for (int a = 0; a < axes && problems.empty(); ++a)
    if (next_stride[a] != axis_sizes_[a])
      problems.add(path, placement,
                   "a placement using all of axis " + axis_names_[a] + " (" + std::to_string(axis_sizes_[a]) +
                       " positions; it uses " + std::to_string(next_stride[a]) + ") on slice " +
                       study.slice.name);
}

int MeshSchedule::split(const std::string& dim) const {
  auto it = layout_.find(dim);
  if (it == layout_.end()) return 1;
  for (const auto& [name, size] : mesh_)
    if (name == it->second) return size;
  return 1;
}

std::vector<int> MeshSchedule::coords(int core) const {
  std::vector<int> c(mesh_.size());
  if (!axes_.empty()) {
    std::vector<int> physical(axis_sizes_.size());
    for (std::size_t a = 0, rest = std::size_t(core); a < axis_sizes_.size();
         rest /= std::size_t(axis_sizes_[a]), ++a)
      physical[a] = int(rest % std::size_t(axis_sizes_[a]));
    for (std::size_t m = 0; m < mesh_.size(); ++m) {
      int radix = 1;
      for (const auto& part : axes_[m]) {
        c[m] += (physical[part.axis] / part.stride) % part.size * radix;
        radix *= part.size;
      }
    }
    return c;
  }
  for (std::size_t i = mesh_.size(); i-- > 0;) {
    c[i] = core % mesh_[i].second;
    core /= mesh_[i].second;
  }
  return c;
}

int MeshSchedule::core_at(const std::vector<int>& c) const {
  if (!axes_.empty()) {
    std::vector<int> physical(axis_sizes_.size(), 0);
    for (std::size_t m = 0; m < mesh_.size(); ++m) {
      int rest = c[m];
      for (const auto& part : axes_[m]) {
        physical[part.axis] += rest % part.size * part.stride;
        rest /= part.size;
      }
    }
    int core = 0;
    for (std::size_t a = axis_sizes_.size(); a-- > 0;) core = core * axis_sizes_[a] + physical[a];
    return core;
  }
  int core = 0;
  for (std::size_t k = 0; k < c.size(); ++k) core = core * mesh_[k].second + c[k];
  return core;
}

std::vector<std::vector<int>> MeshSchedule::groups(const std::vector<std::string>& mesh_dims,
                                                   const std::string& block_dim, int block) const {
  int cores = 1;
  for (const auto& [name, size] : mesh_) cores *= size;
  std::map<std::vector<int>, std::vector<int>> by_key;
  for (int c = 0; c < cores; ++c) {
    auto key = coords(c);
    for (std::size_t i = 0; i < mesh_.size(); ++i) {
      if (std::find(mesh_dims.begin(), mesh_dims.end(), mesh_[i].first) == mesh_dims.end()) continue;
      key[i] = block > 0 && mesh_[i].first == block_dim ? -1 - key[i] / block : -1;
    }
    by_key[key].push_back(c);
  }
  std::vector<std::vector<int>> out;
  for (auto& [key, members] : by_key) out.push_back(std::move(members));
  return out;
}

std::vector<CoreInput> MeshSchedule::input(const Study& study) const {
  int batch_dim = -1, data_dim = -1;  // the mesh dimensions splitting the batch, if any
  for (std::size_t i = 0; i < mesh_.size(); ++i) {
    if (layout_.count("batch") && mesh_[i].first == layout_.at("batch")) batch_dim = int(i);
    if (mesh_[i].first == data_dim_) data_dim = int(i);
  }
  const double part = 1.0 / double(split("height") * split("width"));
  std::vector<CoreInput> in(std::size_t(study.cores()));
  for (int c = 0; c < cores_; ++c) {
    const auto co = coords(c);
    const int shard = (data_dim < 0 ? 0 : co[std::size_t(data_dim)]) * split("batch") +
                      (batch_dim < 0 ? 0 : co[std::size_t(batch_dim)]);
    in[std::size_t(c)] = {shard, double(study.batch / examples_split()), part};
  }
  return in;
}

Json MeshSchedule::resolved() const {
  Json mesh = Json::array(), order = Json::array();
  if (dcn_ > 0) mesh.push_back(Json::array({"dcn", dcn_}));  // as given: outermost, across slices
  for (const auto& [name, size] : mesh_) {
    mesh.push_back(Json::array({name, size}));
    order.push_back(name);
  }
  if (!axes_.empty()) {
    order = Json::object();
    for (std::size_t m = 0; m < mesh_.size(); ++m)
      for (const auto& part : axes_[m])
        order[mesh_[m].first].push_back(Json::array({axis_names_[std::size_t(part.axis)], part.size}));
  }
  Json layout = layout_;
  layout.erase("capacity");  // derived from the batch's (read_experts_layout), not a setting
  Json out{{"kind", "mesh"},
           {"mesh", mesh},
           {"layout", layout},
           {"placement", order},
           {"weight_update", weight_update_},
           {"batch_norm_group", batch_norm_group_},
           {"remat", remat_json(remat_, *saves_)}};
  add_wire_dtypes(out, wire_, fully_sharded());
  if (fully_sharded()) out["weight_gathers"] = prefetch_gathers_ ? "prefetched" : "in_program_order";
  if (!fully_sharded()) out["gradient_bucket_bytes"] = bucket_bytes_;
  if (accumulation_steps_ > 1) out["accumulation_steps"] = accumulation_steps_;
  if (!offload_.empty()) out["offload"] = offload_.json();
  if (!layer_input_split_.empty()) out["layer_input_split"] = layer_input_split_;
  if (!data_dim_.empty()) out["data_parallel_dim"] = data_dim_;
  return out;
}

namespace {

/// Plays the layers' SPMD programs (events) onto a task graph, every core running the same
/// program: compute pieces as a chain per core, halo exchanges between mesh neighbours, and
/// collectives over the families of groups of mesh dimensions; then the optimizer's statistics,
/// the updates and (weight-update sharding) the all-gathers of the updated pieces.
class MeshStepPlayer : public TailPlayer {
 public:
  MeshStepPlayer(const Study& study, const MeshSchedule& schedule, StepBuilder& builder,
                 const std::vector<std::pair<std::string, int>>& mesh,
                 const std::vector<LayerProgram>& programs, bool sharded, bool fully, Keep remat,
                 std::shared_ptr<MeshExecutor> exec)
      : TailPlayer(study, builder, all_cores(schedule.cores()), programs, remat,
                   Settings{sharded,
                            fully,
                            !fully && study.hardware.core.gradient_collectives_overlap_backward,
                            study.slices > 1 && !study.hardware.dcn.reductions_overlap_backward,
                            schedule.wire(),
                            schedule.gradient_bucket_bytes(),
                            {0, -1},
                            CombineUnit::Tensor,
                            schedule.data_parallel_dim()},
                   std::move(exec)),
        schedule_(schedule),
        mesh_(mesh),
        prefetch_(fully && schedule.prefetches_gathers()) {}

  BuiltStep build(const Sharding& s) {
    resident_shards();
    for (int l = 0; l < layers_; ++l) extra_.push_back(fully_ ? gathered_extra(l) : 0.0);
    const int passes = schedule_.accumulation_steps();
    for (int a = 0; a < passes; ++a) micro_batch(a == 0, a == passes - 1);
    tail(s);
    BuiltStep step = builder_.finish();
    step.model_flops = study_.model.step_model_flops(study_.batch);
    step.hardware_flops = hardware_flops_;
    return step;
  }

 protected:
  bool played_in_place(const Event& ev, bool forward) const override {
    return ev.kind != Event::GradientAllReduce || ((forward || fully_) && !prefetch_);
  }
  double kept_in_forward(int l) const override {
    return schedule_.kept_in_forward(programs_[std::size_t(l)]);
  }
  bool collects_actions() const override { return exec_ != nullptr; }
  Closure host(int i, int l, bool, bool, const std::vector<MeshAction>& actions) override {
    return exec_ ? exec_->compute(i, l, actions) : Closure{};
  }

  /// One micro-batch's forward and backward (the whole batch's without accumulation): the first
  /// allocates the weight gradients, the others add to them, the last's are reduced.
  void micro_batch(bool first, bool last) {
    allocate_gradients_ = first;
    std::vector<std::vector<int>> forward_end(static_cast<std::size_t>(layers_)),
        backward_end(static_cast<std::size_t>(layers_));
    const std::vector<int> none;
    for (int l = 0; l < layers_; ++l) {
      gather_weights(l, true, l >= 2 ? forward_end[std::size_t(l - 2)] : none);
      play(programs_[std::size_t(l)].forward, l, true);
      offload_to_host(l, schedule_.offloaded(programs_[std::size_t(l)]));
      if (prefetch_) forward_end[std::size_t(l)] = frontier();  // what the gathers ahead wait for
    }
    fetch_from_host(layers_ - 1);
    for (int l = layers_ - 1; l >= 0; --l) {
      gather_weights(
          l, false,
          l + 2 < layers_ ? backward_end[std::size_t(l + 2)] : forward_end[std::size_t(layers_ - 1)]);
      fetch_from_host(l - 1);  // one layer ahead
      wait_for_host(l);
      gather_layer_input(l);
      if (remat_ != Keep::All) recompute(l);
      if (prefetch_ && l + 2 < layers_) wait_for_gradients_scattered(l + 2);
      play(programs_[std::size_t(l)].backward, l, false);
      if (prefetch_) scatter_layer(l);
      if (overlap_ && last) reduce_chunks_ending_at(l);
      if (last) reduce_rest_across_slices(l);
      if (prefetch_) backward_end[std::size_t(l)] = frontier();
    }
  }

  /// Resident shards of weights (fully sharded: the pieces the core updates) and optimizer slots.
  void resident_shards() {
    for (int c = 0; c < size_; ++c)
      for (int l = 0; l < layers_; ++l) {
        const Layer& layer = study_.model.layers[std::size_t(l)];
        const auto held = mesh::resident_shards(programs_[std::size_t(l)], study_.model, std::size_t(l),
                                                study_.optimizer.slot_elements(layer), fully_);
        g_.resident(c, sim::MemoryCategory::Weights, held.weights);
        g_.resident(c, sim::MemoryCategory::Optimizer, held.optimizer);
      }
  }

  /// Fully sharded: what gathering a layer's weights adds on each core (its whole shards under
  /// the layout, less the pieces it holds), per family of mesh dimensions its gradients are
  /// reduce-scattered over (the weights are gathered over the same groups).
  std::map<std::vector<std::string>, double> gathered_bytes(int l) const {
    std::map<std::vector<std::string>, double> bytes;
    for (const Event& ev : programs_[std::size_t(l)].backward)
      if (ev.kind == Event::GradientAllReduce && !scatter_dims(ev.mesh_dims).empty())
        bytes[scatter_dims(ev.mesh_dims)] += ev.bytes;
    return bytes;
  }
  double gathered_extra(int l) const {
    double extra = 0;
    for (const Event& ev : programs_[std::size_t(l)].backward)
      if (ev.kind != Event::GradientAllReduce || scatter_dims(ev.mesh_dims).empty()) {
        continue;  // not a weight's, or one reduced over the data dimension alone: held whole
      } else if (wire_.gathers_copy()) {
        extra += wire_.gathered_on_wire(ev.bytes);
      } else {
        double members = 1;
        for (const auto& dim : scatter_dims(ev.mesh_dims))
          for (const auto& [name, size] : mesh_) members *= name == dim ? size : 1;
        extra += ev.bytes - weight_bytes() * piece_elements(ev.bytes / weight_bytes(), members);
      }
    return extra;
  }

  /// Fully sharded: layer `l`'s weights all-gathered before its forward (`forward`) or its
  /// backward, over each family's groups; the core's next piece waits for them. Held until its
  /// last piece of the pass (play_compute). Prefetched (MeshSchedule::prefetches_gathers), the
  /// gather starts once `prefetch_after` has run (each core's task that frees the layer before
  /// the one before: at most two layers gathered at once) and the previous gather has ended;
  /// otherwise when every core reaches it, as XLA runs a synchronous collective in program order.
  void gather_weights(int l, bool forward, const std::vector<int>& prefetch_after) {
    if (!fully_) return;
    const std::vector<int> after = prefetch_ ? prefetch_after : frontier();
    std::vector<std::vector<int>> arrivals(static_cast<std::size_t>(size_));
    bool first = true;
    for (const auto& [dims, bytes] : gathered_bytes(l)) {
      sim::Task t = family_collective(
          sim::CollectiveOp::AllGather, study_.model.layers[std::size_t(l)].name + " weights", dims,
          schedule_.groups(dims), "weight_allgather", l, wire_.gathered_on_wire(bytes));
      for (int c = 0; c < size_ && first; ++c)
        t.memory.push_back({c, sim::MemoryCategory::Weights, extra_[std::size_t(l)], When::Start});
      first = false;
      const int id = g_.add(std::move(t));
      for (int x : after)
        if (x >= 0) g_.depend(x, id);
      if (prefetch_ && last_gather_ >= 0) g_.depend(last_gather_, id);
      if (prefetch_) last_gather_ = id;
      for (auto& a : arrivals) a.push_back(id);
    }
    if (!first) receive(arrivals);
  }

  /// layer_input_split: each core kept its piece of layer `l`'s input; the recompute reads it
  /// whole, so the pieces are all-gathered over that mesh dimension first.
  void gather_layer_input(int l) {
    const std::string& dim = schedule_.layer_input_split();
    const auto& p = programs_[std::size_t(l)];
    if (dim.empty() || p.input_bytes <= 0) return;
    const std::string what = study_.model.layers[std::size_t(l)].name + " input";
    every_core_waits(family_collective(sim::CollectiveOp::AllGather, what, {dim}, schedule_.groups({dim}),
                                       "layer_input_allgather", l, p.input_bytes));
  }

  /// A forward collective again (re-materialization), blocking the recompute's next piece.
  void replay_collective(const Event& ev, int l) override {
    using C = sim::CollectiveOp;
    const auto blocking = blocking_collective(ev.kind);
    const auto op = blocking ? blocking->op : C::AllReduce;
    sim::Task t = family_collective(op, ev.name + " (recompute)", ev.mesh_dims, schedule_.groups(ev),
                                    "recompute_collective", l, ev.bytes);
    if (ev.behind) return behind_.push_back(after_every_core(std::move(t)));
    every_core_waits(std::move(t));
  }

  /// Every core sends its edge rows to its neighbours along the mesh dimension (the image does
  /// not wrap around); each core's next piece waits for what it receives.
  void play_halo(const Event& ev, bool forward) override {
    std::size_t axis = 0;
    while (mesh_[axis].first != ev.mesh_dims.front()) ++axis;
    std::vector<std::vector<int>> incoming(static_cast<std::size_t>(size_));
    for (int c = 0; c < size_; ++c) {
      auto co = schedule_.coords(c);
      for (int step : {-1, 1}) {
        const int n = co[axis] + step;
        if (n < 0 || n >= mesh_[axis].second) continue;
        auto nco = co;
        nco[axis] = n;
        const int neighbour = schedule_.core_at(nco);
        const int x = builder_.transfer(c, neighbour, ev.bytes, last_[std::size_t(c)], "halo_exchange",
                                        Labels{}, -1, false);
        for (int w : waits_[std::size_t(c)]) g_.depend(w, x);
        g_.task(x).name = ev.name + " core " + std::to_string(c) + "->" + std::to_string(neighbour);
        incoming[std::size_t(neighbour)].push_back(x);
      }
    }
    receive(incoming);
  }

  void play_collective(const Event& ev, int l, bool forward) override {
    // Weight-gradient reductions are combined as XLA's all-reduce combiner does (combined_, played
    // by reduce_chunks_ending_at or combined_gradient_reductions).
    if (ev.kind == Event::GradientAllReduce && !forward && !fully_) return;
    // Prefetched fully sharded weights: the layer's gradients reduce-scattered together once its
    // backward ends (scatter_layer).
    if (ev.kind == Event::GradientAllReduce && prefetch_) {
      deferred_.push_back({&ev, l});
      return;
    }
    using C = sim::CollectiveOp;
    const bool gradient = ev.kind == Event::GradientAllReduce;
    // Sharded, cut over all but the data dimension (TailPlayer::scatter_dims).
    const std::vector<std::string> dims = gradient && sharded_ ? scatter_dims(ev.mesh_dims) : ev.mesh_dims;
    const bool scatter_gradient = gradient && sharded_ && !dims.empty();
    const auto blocking = blocking_collective(ev.kind);
    const auto [op, kind_phase] = blocking           ? std::pair{blocking->op, blocking->phase}
                                  : scatter_gradient ? std::pair{C::ReduceScatter, "gradient_reduce_scatter"}
                                                     : std::pair{C::AllReduce, "gradient_allreduce"};
    const std::string phase = ev.phase.empty() ? kind_phase : ev.phase;
    const auto& over = scatter_gradient ? dims : ev.mesh_dims;
    sim::Task t = family_collective(op, ev.name, over, scatter_gradient ? groups(dims) : schedule_.groups(ev),
                                    phase, l, gradient ? on_wire(ev.bytes) : ev.bytes);
    const bool pieces_later = scatter_gradient && dcn_after_backward_ && over_replicas(ev.mesh_dims);
    t.across_slices = gradient && over_replicas(ev.mesh_dims) && !pieces_later;
    const double piece = on_wire(ev.bytes) / double(t.groups.front().size());
    if (scatter_gradient) {
      // Each core keeps only its piece of the reduced gradient, updates it, and the updated
      // pieces are all-gathered (after the layer's updates).
      const double local = ev.bytes / weight_bytes(), members = double(t.groups.front().size());
      for (int c = 0; c < size_; ++c)
        t.memory.push_back({c, sim::MemoryCategory::Gradients,
                            -weight_bytes() * unkept_elements(local, members), When::End});
      scattered_[std::size_t(l)].push_back(
          {{ev.actions.front().op, t.groups}, ev.name, dims, ev.bytes, chunks_++});
    }
    if (exec_ && !ev.actions.empty()) t.host = exec_->collective(t.groups, l, ev.actions.front());
    const int id = scatter_gradient
                       ? pieces_over_data(after_every_core(std::move(t)), ev.mesh_dims, ev.name, l, piece)
                       : after_every_core(std::move(t));
    if (ev.behind) return behind_.push_back(id);
    if (gradient) gradient_reductions_[std::size_t(l)].push_back(id);
    if (pieces_later) pieces_across_slices_.push_back({{l}, id, piece});
    // Fully sharded, in program order: each layer's reduce-scatter where the program has it, the
    // backward waiting for it.
    if (!gradient) join_behind(id);
    if (!gradient || (fully_ && !prefetch_))
      receive(std::vector<std::vector<int>>(static_cast<std::size_t>(size_), std::vector<int>{id}));
  }

  static std::vector<int> all_cores(int n) {
    std::vector<int> cores(static_cast<std::size_t>(n));
    std::iota(cores.begin(), cores.end(), 0);
    return cores;
  }

  std::vector<std::vector<int>> groups(const std::vector<std::string>& dims) const override {
    return schedule_.groups(dims);
  }
  std::vector<std::vector<int>> groups(const Event& ev) const override { return schedule_.groups(ev); }
  bool over_replicas(const std::vector<std::string>& dims) const override {
    return schedule_.over_replicas(dims);
  }

  const MeshSchedule& schedule_;
  const std::vector<std::pair<std::string, int>>& mesh_;
  bool prefetch_;         ///< fully sharded: gathers prefetched, reduce-scatters behind (weight_gathers)
  int last_gather_ = -1;  ///< prefetched: the gathers one after another
};

}  // namespace

BuiltStep MeshSchedule::build(const Study& study, FunctionalRuntime* functional) const {
  const int cores = cores_;
  // Functional mode: every core holds its shards and runs its pieces of the ops' math.
  std::shared_ptr<MeshExecutor> exec;
  const Json padded = padded_dimensions(study, layout_, sizes_);
  if (functional && !padded.empty())
    throw ConfigError(
        study.file, "schedule.layout." + padded.begin().key(), padded.begin().value().dump(),
        "a split dividing the dimension in functional mode (its host math splits shards evenly)");
  if (functional && !data_dim_.empty())
    throw ConfigError(
        study.file, "schedule.data_parallel_dim", Json(data_dim_).dump(),
        "no data_parallel_dim in functional mode (its host math does not split the batch over it "
        "yet)");
  if (functional) {
    std::vector<std::vector<int>> all(static_cast<std::size_t>(cores));
    for (int c = 0; c < cores; ++c) all[std::size_t(c)] = coords(c);
    exec = std::make_shared<MeshExecutor>(study, *functional, mesh_, layout_, std::move(all),
                                          accumulation_steps_);
    exec->hold();
  }
  const Sharding s = sharding(study);
  auto lowered = programs(study);
  if (!offload_.empty()) {
    double per_device = 0;
    for (const auto& p : lowered) per_device += offloaded(p);
    check_host_memory(study, per_device, "schedule.offload");
  }
  Json ops = Json::array();
  for (auto& program : lowered)
    for (auto& row : program.ops) ops.push_back(std::move(row));
  StepBuilder builder(study, study.cores());
  BuiltStep step = MeshStepPlayer(study, *this, builder, mesh_, lowered, weight_update_ == "sharded",
                                  weight_update_ == "fully_sharded", remat_, exec)
                       .build(s);
  step.details = Json{
      {"local_batch", study.batch / examples_split()}, {"placement", placement_details(study)}, {"ops", ops}};
  if (!padded.empty()) step.details["padded"] = padded;
  return step;
}

std::vector<LayerProgram> MeshSchedule::programs(const Study& study) const {
  const Sharding s = sharding(study);
  const CostModel cost(study.hardware.core);
  std::vector<LayerProgram> out;
  for (std::size_t l = 0; l < study.model.layers.size(); ++l) {
    // The programs of many layers take more host memory than the graph itself: the budget is
    // looked at as they are made, not only once the graph grows (50,000 layers held 2 GB first).
    if (l % 256 == 255)
      if (std::string why = sim::host_memory_exceeded(); !why.empty()) throw ResourceError(why);
    const Layer& layer = study.model.layers[l];
    out.push_back(lower_layer(layer.named_ops(study.batch / data_cores_ / accumulation_steps_), s, cost,
                              study.model.activation_bytes, layer.name, l == 0,
                              weight_update_ != "replicated", batch_norm_group_, *saves_));
  }
  return out;
}

Json MeshSchedule::placement_details(const Study& study) const {
  // The axes as the report names them: the cores of a chip, then the torus dimensions.
  std::vector<std::string> axis_labels = axis_names_;
  axis_labels[0] = "cores of a chip";
  Json mapping = Json::array();
  int stride = 1;
  for (std::size_t i = mesh_.size(); i-- > 0 && axes_.empty();) {
    const int first = stride,
              span = stride * mesh_[i].second;  // core-index digits this mesh dimension covers
    std::vector<std::string> axes;
    int below = 1;  // positions of the axes before this one, in core-index digits
    for (std::size_t a = 0; a < axis_sizes_.size(); ++a) {
      // An axis is spanned when the dimension's digits reach past its first position and start
      // before its end.
      if (span > below && first < below * axis_sizes_[a] && axis_sizes_[a] > 1)
        axes.push_back(axis_labels[a]);
      below *= axis_sizes_[a];
    }
    mapping.push_back(Json{
        {"mesh_dim", mesh_[i].first}, {"size", mesh_[i].second}, {"core_stride", stride}, {"spans", axes}});
    stride = span;
  }
  std::reverse(mapping.begin(), mapping.end());
  for (std::size_t m = 0; m < axes_.size(); ++m) {
    Json spans = Json::array(), parts = Json::array();
    for (const auto& part : axes_[m]) {
      const std::string& label = axis_labels[std::size_t(part.axis)];
      if (part.size > 1 && std::find(spans.begin(), spans.end(), label) == spans.end())
        spans.push_back(label);
      parts.push_back(Json{{"axis", label}, {"size", part.size}, {"stride", part.stride}});
    }
    mapping.push_back(
        Json{{"mesh_dim", mesh_[m].first}, {"size", mesh_[m].second}, {"spans", spans}, {"parts", parts}});
  }
  // What a collective over each mesh dimension costs in distance: the chips its first group
  // spans and the most torus hops between neighbours of the rings an all-reduce runs on.
  const Topology topology(study.slice);
  const int cpc = study.hardware.chip.cores;
  for (auto& m : mapping) {
    const auto group = groups({m["mesh_dim"].get<std::string>()}).front();
    std::set<int> chips;
    for (int c : group) chips.insert(c / cpc);
    int hops = 0;
    const auto& algorithm = sim::collective_algorithm_for(study.hardware.chip.collective_algorithms, topology,
                                                          cpc, sim::CollectiveOp::AllReduce, group);
    for (const auto& phase : algorithm.plan(topology, cpc, sim::CollectiveOp::AllReduce, group, 1e6))
      for (const auto& ring : phase.rings)
        for (std::size_t i = 0; i < ring.cores.size(); ++i) {
          const int from = ring.cores[i] / cpc, to = ring.cores[(i + 1) % ring.cores.size()] / cpc;
          hops = std::max(hops, topology.hops(from, to));
        }
    m["group_chips"] = chips.size();
    m["max_ring_hops"] = hops;
  }
  return mapping;
}

}  // namespace tpusim
