#include "schedules/pipeline.hpp"

#include <map>
#include <set>
#include <tuple>

#include "hardware/topology.hpp"
#include "schedules/batch_problem.hpp"
#include "schedules/mesh_lowering.hpp"
#include "schedules/partitioner.hpp"
#include "schedules/program_player.hpp"
#include "schedules/stage_tail.hpp"

namespace tpusim {

namespace {

const char* kind_name(Pipeline::Order o) { return o == Pipeline::Order::GPipe ? "gpipe" : "one_f_one_b"; }

/// One compute step of a stage's program: on micro-batch `micro_batch` of the stage's model chunk
/// `chunk` (the stage itself unless interleaved).
struct Item {
  enum Kind { Forward, Recompute, Backward } kind;
  int micro_batch;
  int chunk;
};

/// Megatron-LM's interleaved 1F1B for `chunks` model chunks per stage (chunk c of the model, c in
/// 0 .. stages x chunks, on stage c mod stages): the micro-batches in groups of `stages`, each
/// group through the stage's chunks in turn (forward: first chunk first; backward: last first);
/// warm-up forwards 2 (stages - stage - 1) + (chunks - 1) stages, then one forward and one
/// backward in turn, then the drain.
std::vector<Item> interleaved_program(int stage, int stages, int micro_batches, int chunks, bool remat) {
  const int total = micro_batches * chunks, group = stages * chunks;
  auto item = [&](Item::Kind kind, int k) {
    const int in_group = k % group, c = in_group / stages;
    const int chunk = kind == Item::Forward ? c : chunks - 1 - c;
    return Item{kind, (k / group) * stages + k % stages, chunk * stages + stage};
  };
  std::vector<Item> items;
  auto backward = [&](int k) {
    if (remat) items.push_back(item(Item::Recompute, k));
    items.push_back(item(Item::Backward, k));
  };
  const int warmup = std::min((stages - stage - 1) * 2 + (chunks - 1) * stages, total);
  for (int k = 0; k < warmup; ++k) items.push_back(item(Item::Forward, k));
  for (int k = 0; k < total - warmup; ++k) {
    items.push_back(item(Item::Forward, warmup + k));
    backward(k);
  }
  for (int k = total - warmup; k < total; ++k) backward(k);
  return items;
}

/// The order a stage runs its work in.
std::vector<Item> stage_program(Pipeline::Order order, int stage, int stages, int micro_batches, bool remat,
                                int chunks = 1) {
  if (chunks > 1) return interleaved_program(stage, stages, micro_batches, chunks, remat);
  std::vector<Item> items;
  auto backward = [&](int m) {
    if (remat) items.push_back({Item::Recompute, m, stage});
    items.push_back({Item::Backward, m, stage});
  };
  if (order == Pipeline::Order::GPipe) {
    for (int m = 0; m < micro_batches; ++m) items.push_back({Item::Forward, m, stage});
    for (int m = micro_batches - 1; m >= 0; --m) backward(m);
    return items;
  }
  const int warmup = std::min(stages - stage - 1, micro_batches);
  for (int m = 0; m < warmup; ++m) items.push_back({Item::Forward, m, stage});
  for (int i = 0; i < micro_batches - warmup; ++i) {
    items.push_back({Item::Forward, warmup + i, stage});
    backward(i);
  }
  for (int m = micro_batches - warmup; m < micro_batches; ++m) backward(m);
  return items;
}

}  // namespace

namespace {

/// A block shape tiling `shape` from dimension `dim` on with `chips` chips: along each dimension
/// as many chips as divide both what is left and the dimension (the widest first). Empty when
/// there is none.
std::vector<int> tiling_block(const std::vector<int>& shape, std::size_t dim, int chips) {
  if (dim + 1 == shape.size()) return shape[dim] % chips == 0 ? std::vector<int>{chips} : std::vector<int>{};
  for (int w = std::min(shape[dim], chips); w >= 1; --w) {
    if (shape[dim] % w != 0 || chips % w != 0) continue;
    auto rest = tiling_block(shape, dim + 1, chips / w);
    if (rest.empty()) continue;
    rest.insert(rest.begin(), w);
    return rest;
  }
  return {};
}

}  // namespace

std::vector<int> pipeline_core_order(const SliceSpec& slice, int cores_per_chip, int chips_per_pipeline) {
  const Topology topology(slice);
  std::vector<int> block = tiling_block(slice.shape, 0, chips_per_pipeline);
  if (block.empty()) block = slice.shape;  // no tiling: one snake over the whole slice
  std::vector<int> blocks(block.size());   // blocks along each dimension
  int count = 1;
  for (std::size_t d = 0; d < block.size(); ++d) count *= blocks[d] = slice.shape[d] / block[d];
  std::vector<int> order;
  for (int b = 0; b < count; ++b) {
    std::vector<int> origin(block.size());
    for (std::size_t d = 0, rest = std::size_t(b); d < block.size(); rest /= std::size_t(blocks[d]), ++d)
      origin[d] = int(rest % std::size_t(blocks[d])) * block[d];
    std::vector<int> chips;
    const Topology inside(block, std::vector<bool>(block.size(), false));
    for (int i = 0; i < inside.chips(); ++i) {
      std::vector<int> c = inside.coord(i);
      for (std::size_t d = 0; d < c.size(); ++d) c[d] += origin[d];
      chips.push_back(topology.rank(c));
    }
    for (int chip : topology.snake_order(chips))
      for (int c = 0; c < cores_per_chip; ++c) order.push_back(chip * cores_per_chip + c);
  }
  return order;
}

Pipeline::Pipeline(Order order, Fields& f, const Study& study, Problems& problems) : order_(order) {
  const int layers = int(study.model.layers.size());
  stages_ = int(f.integer("stages", 1, 4096));
  microbatches_ = int(f.integer("microbatches", 1, 1 << 20));
  remat_ = read_remat(f, Keep::Input, saves_);
  replicas_ = int(f.integer_or("replicas", 1, 1, 1 << 20));
  tensor_ = int(f.integer_or("tensor_parallel", 1, 1, 4096));
  sharded_ = f.string_or("weight_update", "replicated", {"replicated", "sharded"}) == "sharded";
  virtual_ = int(f.integer_or("virtual_stages", 1, 1, 4096));
  if (f.string_or("gradient_combine_unit", "layer", {"layer", "tensor"}) == "tensor")
    combine_unit_ = mesh::CombineUnit::Tensor;
  if (!problems.empty()) return;
  if (sharded_ && replicas_ == 1)
    problems.add(f.path_of("weight_update"), Json("sharded"),
                 "\"replicated\" with one replica (the update is sharded across the replicas of each "
                 "stage: with one there is nothing to shard), or replicas > 1");
  read_virtual_stages(f, layers, problems);
  if (stages_ > layers) {
    problems.add(f.path_of("stages"), Json(stages_),
                 "at most the model's " + std::to_string(layers) + " layers (every stage needs one)");
  }
  if (std::int64_t(stages_) * replicas_ * tensor_ > study.cores()) {
    problems.add(f.path_of("stages"), Json(stages_),
                 "stages x replicas x tensor_parallel (" +
                     std::to_string(std::int64_t(stages_) * replicas_ * tensor_) + ") at most the " +
                     std::to_string(study.cores()) + " cores of slice " + study.slice.name);
  }
  read_tensor_parallel(f, study, problems);
  const std::int64_t unit = std::int64_t(replicas_) * microbatches_;
  check_batch_multiple(
      study, unit,
      "replicas x microbatches = " + std::to_string(unit) + ": equal micro-batches on every replica",
      problems);
  if (const Json* p = f.optional("partition")) read_partition(*p, f.path_of("partition"), layers, problems);
  if (const Json* p = f.optional("placement")) read_placement(*p, f.path_of("placement"), study, problems);
  sharding_.replicas = replicas_;
  sharding_.over_replicas = replicas_ > 1 || study.slices > 1;
  sharding_.sharded = sharded_;
}

void Pipeline::read_virtual_stages(Fields& f, int layers, Problems& problems) {
  if (virtual_ == 1) return;
  const std::string path = f.path_of("virtual_stages");
  if (order_ != Order::OneFOneB)
    problems.add(path, Json(virtual_), "1 under gpipe (interleaving is Megatron's one_f_one_b schedule)");
  else if (microbatches_ % stages_ != 0)
    problems.add(
        f.path_of("microbatches"), Json(microbatches_),
        "a multiple of stages (" + std::to_string(stages_) +
            ") with virtual_stages > 1 (the interleaved order runs micro-batches in groups of stages)");
  else if (std::int64_t(stages_) * virtual_ > layers)
    problems.add(path, Json(virtual_),
                 "at most " + std::to_string(layers / stages_) +
                     ": stages x virtual_stages chunks of the model's " + std::to_string(layers) +
                     " layers, each at least one");
}

void Pipeline::read_partition(const Json& p, const std::string& path, int layers, Problems& problems) {
  if (p.is_string() && (p.get<std::string>() == "balanced" || p.get<std::string>() == "memory_aware")) {
    memory_aware_ = p.get<std::string>() == "memory_aware";  // computed at build time
    if (memory_aware_ && virtual_ > 1)
      problems.add(path, p, "\"balanced\" or layer counts with virtual_stages > 1");
    return;
  }
  if (!p.is_array() || int(p.size()) != chunks()) {
    problems.add(path, p,
                 "\"balanced\", \"memory_aware\" or an array of " + std::to_string(chunks()) +
                     (virtual_ > 1 ? " layer counts (one per model chunk: stages x virtual_stages)"
                                   : " layer counts (one per stage)"));
    return;
  }
  int total = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const Json& n = p[i];
    if (!n.is_number_integer() || n.get<std::int64_t>() < 1 || n.get<std::int64_t>() > layers) {
      problems.add(index_path(path, i), n, "a layer count >= 1");
      continue;
    }
    partition_.push_back(int(n.get<std::int64_t>()));
    total += partition_.back();
  }
  if (problems.empty() && total != layers)
    problems.add(path, p, "layer counts summing to the model's " + std::to_string(layers) + " layers");
}

void Pipeline::read_placement(const Json& p, const std::string& path, const Study& study,
                              Problems& problems) {
  if (p.is_string() && (p.get<std::string>() == "auto" || p.get<std::string>() == "by_stage")) {
    by_stage_ = p.get<std::string>() == "by_stage";  // computed at build time
  } else if (p.is_array() && int(p.size()) == replicas_) {
    std::set<int> used;
    for (std::size_t r = 0; r < p.size(); ++r)
      read_replica_placement(p[r], index_path(path, r), study, used, problems);
  } else {
    problems.add(path, p,
                 "\"auto\", \"by_stage\" or an array of " + std::to_string(replicas_) +
                     " arrays of core ids (one per replica)");
  }
  if (tensor_ > 1 && p.is_array())
    problems.add(
        path, p,
        "\"auto\" or \"by_stage\" when tensor_parallel > 1 (each stage's cores are placed together)");
}

void Pipeline::read_replica_placement(const Json& row, const std::string& path, const Study& study,
                                      std::set<int>& used, Problems& problems) {
  if (!row.is_array() || int(row.size()) != stages_) {
    problems.add(path, row, "an array of " + std::to_string(stages_) + " core ids (one per stage)");
    return;
  }
  placement_.emplace_back();
  for (std::size_t s = 0; s < row.size(); ++s) {
    const Json& c = row[s];
    if (!c.is_number_integer() || c.get<std::int64_t>() < 0 || c.get<std::int64_t>() >= study.cores()) {
      problems.add(index_path(path, s), c, "a core id in [0, " + std::to_string(study.cores() - 1) + "]");
    } else if (!used.insert(int(c.get<std::int64_t>())).second) {
      problems.add(index_path(path, s), c, "a core not used by another stage or replica");
    } else {
      placement_.back().push_back(int(c.get<std::int64_t>()));
    }
  }
}

void Pipeline::read_tensor_parallel(Fields& f, const Study& study, Problems& problems) {
  std::vector<std::string> dims;
  if (const Json* l = f.optional("tensor_layout")) {
    const auto& allowed = tensor_parallel_dims();
    if (!l->is_array() || l->empty())
      problems.add(f.path_of("tensor_layout"), *l, "a non-empty array of dimensions");
    for (std::size_t i = 0; l->is_array() && i < l->size(); ++i) {
      const Json& d = (*l)[i];
      if (!d.is_string() || std::find(allowed.begin(), allowed.end(), d.get<std::string>()) == allowed.end())
        problems.add(index_path(f.path_of("tensor_layout"), i), d,
                     "a dimension that stays inside a layer: d_ff, heads, d_kv or vocab");
      else
        dims.push_back(d.get<std::string>());
    }
  }
  if (tensor_ == 1 || !problems.empty()) return;
  bool named = true;
  std::set<std::string> present;
  for (const auto& layer : study.model.layers) {
    named = named && bool(layer.named_ops);
    if (!layer.named_ops) break;
    for (const auto& op : layer.named_ops(1))
      for (const auto& t : op.tensors())
        for (const auto& d : t.dims) present.insert(d.name);
  }
  for (std::size_t i = 0; i < dims.size(); ++i)
    if (!present.count(dims[i]))
      problems.add(index_path(f.path_of("tensor_layout"), i), Json(dims[i]),
                   "a dimension of the model's ops");
  // By default Megatron's split, for models whose layers have a feed-forward or attention to
  // split (a classifier's vocabulary alone would leave every other layer whole on every core).
  const bool defaulted = dims.empty();
  if (dims.empty() && (present.count("d_ff") || present.count("heads")))
    for (const char* d : {"d_ff", "heads", "vocab"})
      if (present.count(d)) dims.push_back(d);
  if (!problems.empty()) return;
  if (!named || dims.empty()) {
    problems.add(f.path_of("tensor_parallel"), Json(tensor_),
                 "1 for this model (or a tensor_layout): splitting a stage over cores by default needs a "
                 "model with d_ff or heads dimensions (transformer, mesh_lm, mlp)");
    return;
  }
  sharding_.sizes = {{"model", tensor_}};
  for (const auto& d : dims) sharding_.layout[d] = "model";
  // A problem with the default split says it is the default, and how to choose another.
  Problems layout(problems.context());
  mesh::check_layout(study, sharding_.layout, sharding_.sizes, f.path_of("tensor_layout"), Json(dims),
                     layout);
  for (const auto& p : layout.list())
    problems.add(p.path, p.found,
                 p.expected + (defaulted ? " (schedule.tensor_layout was not given and defaults to " +
                                               Json(dims).dump() +
                                               ": give it to choose the dimensions the cores split)"
                                         : ""));
}

std::vector<CoreInput> Pipeline::input(const Study& study) const {
  std::vector<CoreInput> in(std::size_t(study.cores()));
  const auto cores = groups(study);
  for (int r = 0; r < replicas_; ++r)
    for (int core : cores[std::size_t(r)].front())
      in[std::size_t(core)] = {r, double(study.batch / replicas_), 1.0};
  return in;
}

Json Pipeline::resolved() const {
  Json j{{"kind", kind_name(order_)},
         {"stages", stages_},
         {"microbatches", microbatches_},
         {"remat", remat_json(remat_, *saves_)},
         {"replicas", replicas_}};
  if (sharded_) j["weight_update"] = "sharded";
  if (virtual_ > 1) j["virtual_stages"] = virtual_;
  if (combine_unit_ == mesh::CombineUnit::Tensor) j["gradient_combine_unit"] = "tensor";
  j["partition"] = !partition_.empty() ? Json(partition_) : Json(memory_aware_ ? "memory_aware" : "balanced");
  j["placement"] = !placement_.empty() ? Json(placement_) : Json(by_stage_ ? "by_stage" : "auto");
  if (tensor_ > 1) {
    j["tensor_parallel"] = tensor_;
    Json dims = Json::array();
    for (const auto& [d, m] : sharding_.layout) dims.push_back(d);
    j["tensor_layout"] = dims;
  }
  return j;
}

std::vector<std::string> Pipeline::what_if_notes(const Study& study,
                                                 const std::function<const Study*()>& on_base) const {
  if (!partition_.empty()) return {};
  const Study* base = on_base();
  if (!base) return {};
  const auto before = dynamic_cast<const Pipeline&>(*base->schedule).partition(*base).sizes;
  const auto after = partition(study).sizes;
  if (before == after) return {};
  auto text = [](const std::vector<int>& cut, const char* between) {
    std::string t;
    for (int n : cut) t += (t.empty() ? "" : between) + std::to_string(n);
    return t;
  };
  return {"the hardware what-if moved the cost-balanced cut from " + text(before, "|") + " (on " +
          base->json["hardware"].dump() + ") to " + text(after, "|") +
          " layers per stage; set schedule.partition to [" + text(before, ", ") +
          "] to compare at the same cut"};
}

Pipeline::Partition Pipeline::partition(const Study& study) const {
  if (!partition_.empty()) return {partition_, "explicit"};
  StepBuilder builder(study, 1);
  split(builder);
  const std::int64_t b = layer_batch(study);
  std::vector<double> costs;
  for (int l = 0; l < int(study.model.layers.size()); ++l) {
    const LayerCost& c = builder.cost(l, b);
    costs.push_back(c.forward_s + c.recompute_s(remat_) + c.backward_s);
  }
  const auto by_cost = balanced_partition(costs, chunks());
  if (!memory_aware_) return {by_cost, "cost"};
  const double usable = study.hardware.core.usable_hbm_bytes();
  auto fits = [&](int stage, int first, int last) {
    return stage_peak_bytes(builder, study, {first, last}, stage) <= usable;
  };
  bool cost_cut_fits = true;
  for (int s = 0, first = 0; s < stages_; first += by_cost[s], ++s)
    cost_cut_fits = cost_cut_fits && fits(s, first, first + by_cost[s]);
  if (cost_cut_fits) return {by_cost, "cost"};
  const auto by_memory = balanced_partition(costs, stages_, fits);
  if (by_memory.empty()) return {by_cost, "cost (no partition fits)"};
  return {by_memory, "memory"};
}

double Pipeline::stage_peak_bytes(StepBuilder& builder, const Study& study, LayerRange range,
                                  int stage) const {
  const std::int64_t b = layer_batch(study);
  const LayerCost c = builder.cost(range, b);
  // Weights and optimizer slots, all step, this core's share (sharded: 1/R of the slots), with
  // a copy of each tied weight another stage owns.
  const double slot_fraction = sharded_ ? 1.0 / replicas_ : 1.0;
  double held = builder.resident_bytes(range, slot_fraction), copies = 0;
  std::vector<int> stage_of_layer(study.model.layers.size(), 1);
  std::fill(stage_of_layer.begin() + range.first, stage_of_layer.begin() + range.last, 0);
  for (const auto& copy : builder.tied_copies(stage_of_layer, b)) {
    held += builder.resident_bytes(copy, slot_fraction);
    copies += copy.bytes;
  }
  const double kept = c.kept_bytes(remat_);
  double forward_transient = c.workspace_bytes;
  if (remat_ != Keep::All)
    for (int l = range.first; l < range.last; ++l)
      forward_transient =
          std::max(forward_transient, builder.cost(l, b).stash_bytes + builder.cost(l, b).workspace_bytes);
  double peak = held;
  bool first_backward = true;
  for (const Item& it : stage_program(order_, stage, stages_, microbatches_, remat_ != Keep::All)) {
    switch (it.kind) {
      case Item::Forward:
        held += kept;
        peak = std::max(peak, held + forward_transient);
        break;
      case Item::Recompute:
        held += c.recomputed_bytes(remat_);
        peak = std::max(peak, held + c.workspace_bytes);
        break;
      case Item::Backward:
        if (first_backward) held += builder.gradient_bytes(range) + copies;
        first_backward = false;
        peak = std::max(peak, held + c.backward_workspace_bytes);
        held -= c.kept_bytes(remat_) + c.recomputed_bytes(remat_);
        break;
    }
  }
  return peak;
}

std::vector<std::vector<std::vector<int>>> Pipeline::groups(const Study& study) const {
  std::vector<std::vector<std::vector<int>>> cores(replicas_, std::vector<std::vector<int>>(stages_));
  if (!placement_.empty()) {
    for (int r = 0; r < replicas_; ++r)
      for (int s = 0; s < stages_; ++s) cores[r][s] = {placement_[r][s]};
    return cores;
  }
  // Blocks of neighbouring cores: one per pipeline ("auto"), or one per stage's replicas.
  const int cpc = study.hardware.chip.cores, per_block = (by_stage_ ? replicas_ : stages_) * tensor_;
  const auto order = pipeline_core_order(study.slice, cpc, std::max(1, (per_block + cpc - 1) / cpc));
  for (int r = 0; r < replicas_; ++r)
    for (int s = 0; s < stages_; ++s)
      for (int t = 0; t < tensor_; ++t) {
        const std::size_t slot = by_stage_ ? std::size_t(s) * replicas_ + r : std::size_t(r) * stages_ + s;
        cores[r][s].push_back(order[slot * tensor_ + t]);
      }
  return cores;
}

std::vector<std::vector<int>> Pipeline::placement(const Study& study) const {
  std::vector<std::vector<int>> first;
  for (const auto& replica : groups(study)) {
    first.emplace_back();
    for (const auto& group : replica) first.back().push_back(group.front());
  }
  return first;
}

namespace {

/// Where an item of a stage's program starts and ends on each core of its group: its first task,
/// and what later work waits for (its last task and what the core waits to receive after it).
struct ItemTasks {
  std::vector<int> first;
  std::vector<std::vector<int>> ends;
};
using StageTasks = std::vector<std::vector<std::vector<ItemTasks>>>;  // [replica][chunk][micro-batch]

/// A (replica, stage) group of cores running its stage program on the one player: each item is
/// its model chunk's layers' programs for one micro-batch (forward first to last, the recompute
/// first to last, the backward last to first), one task per core (merge_layers_), then the
/// group's collectives of the item (tensor parallelism; the weight-gradient reductions are the
/// pipeline's, after the last backward). What differs from a mesh: re-materialization keeps the
/// chunk's input (GPipe's stage boundary), not each layer's, and a chunk's first backward
/// allocates all its gradients.
class StagePlayer : public ProgramPlayer {
 public:
  StagePlayer(const Study& study, StepBuilder& builder, std::vector<int> cores,
              const std::vector<LayerProgram>& programs, Keep remat, const std::vector<LayerRange>& ranges,
              std::int64_t b, FunctionalRuntime* functional)
      : ProgramPlayer(study, builder, std::move(cores), programs, remat),
        ranges_(ranges),
        b_(b),
        functional_(functional),
        chunk_of_(programs.size()) {
    merge_layers_ = true;
    for (std::size_t c = 0; c < ranges_.size(); ++c)
      for (int l = ranges_[c].first; l < ranges_[c].last; ++l) chunk_of_[std::size_t(l)] = int(c);
  }

  /// What an item plays on each core of a group, the same on every group of its stage and for
  /// every micro-batch: its merged run (no core in it), its FLOPs over the group and its
  /// collectives. Keyed by (chunk, kind, whether it allocates the gradients).
  struct ItemRun {
    Merged run;
    double flops = 0;
    std::vector<std::pair<sim::CollectiveOp, double>> collectives;
  };
  using ItemRuns = std::map<std::tuple<int, int, bool>, ItemRun>;

  /// Plays item `it` of the group's program (`first_backward`: the chunk's first backward,
  /// which allocates its gradients). Without host math, an item already in `known` is replayed
  /// from it instead of walking its layers' pieces again (a pipeline's groups and micro-batches
  /// run the same items).
  ItemTasks play_item(const Item& it, Labels labels, bool first_backward, ItemRuns& known) {
    labels_ = labels;
    allocate_gradients_ = first_backward;
    take_firsts();
    item_range_ = ranges_[std::size_t(it.chunk)];
    const std::tuple<int, int, bool> key{it.chunk, int(it.kind), first_backward};
    const auto seen = functional_ ? known.end() : known.find(key);
    if (seen != known.end()) {
      for (int i = 0; i < size_; ++i) set_run(i, seen->second.run);
      hardware_flops_ += seen->second.flops;
      collectives_ = seen->second.collectives;
    } else {
      const double before = hardware_flops_;
      play_layers(it);
      if (!functional_) known[key] = {run(0), hardware_flops_ - before, collectives_};
    }
    flush();
    int previous = -1;
    for (const auto& [op, bytes] : collectives_) previous = group_collective(op, bytes, previous);
    collectives_.clear();
    ItemTasks tasks{take_firsts(), {}};
    for (int i = 0; i < size_; ++i) tasks.ends.push_back(frontier(i));
    return tasks;
  }

 protected:
  bool played_in_place(const Event& ev, bool) const override { return ev.kind != Event::GradientAllReduce; }
  void play_collective(const Event& ev, int, bool) override { defer(ev); }
  void replay_collective(const Event& ev, int) override { defer(ev); }
  void play_halo(const Event& ev, bool) override {  // excluded by tensor_parallel_dims(): no image is split
    throw SimulationError("tensor parallelism: a halo exchange in " + ev.name);
  }
  double kept_in_forward(int l) const override {
    const auto& p = programs_[std::size_t(l)];
    const LayerRange chunk = ranges_[std::size_t(chunk_of_[std::size_t(l)])];
    const double input = l == chunk.first ? builder_.cost(l, b_).input_bytes : 0.0;
    return remat_kept_bytes(remat_, p.kept_bytes, input, p.saved_output_bytes);
  }
  double gradients_allocated(int l) const override {
    const LayerRange chunk = ranges_[std::size_t(chunk_of_[std::size_t(l)])];
    return l == chunk.last - 1 ? builder_.gradient_bytes(chunk) : 0.0;
  }
  Closure host(int i, int l, bool forward, bool first_piece, const std::vector<MeshAction>&) override {
    if (!functional_ || !first_piece) return {};
    const int core = cores_[std::size_t(i)];
    return forward ? functional_->forward(core, {l, l + 1}, labels_.first_example, b_, remat_)
                   : functional_->backward(core, {l, l + 1}, labels_.first_example, b_);
  }
  Closure recompute_host(int i, int l) override {
    if (!functional_) return {};
    return functional_->recompute(cores_[std::size_t(i)], {l, l + 1}, labels_.first_example, b_);
  }

 private:
  /// The item's layers' programs: forward and recompute first to last, backward last to first.
  void play_layers(const Item& it) {
    const LayerRange range = item_range_;
    if (it.kind == Item::Backward)
      for (int l = range.last - 1; l >= range.first; --l) play(programs_[std::size_t(l)].backward, l, false);
    else
      for (int l = range.first; l < range.last; ++l)
        if (it.kind == Item::Forward)
          play(programs_[std::size_t(l)].forward, l, true);
        else
          recompute(l);
  }

  /// A blocking collective of the item over the group (tensor parallelism), played after the
  /// item's compute: a core runs its pieces and the collectives between them one after another,
  /// so the item lasts as long either way, and the stage's graph keeps one compute task per core
  /// and item (interleaving them, one task per run of pieces, made plan's bounds of
  /// tensor-parallel pipelines about three times slower).
  /// A reduction decomposed with its matmul (Event::behind, then its last piece) is one collective
  /// here, in program order.
  void defer(const Event& ev) {
    const auto blocking = mesh::blocking_collective(ev.kind);
    if (!blocking || size_ <= 1) return;
    if (ev.behind) {
      behind_bytes_ += ev.bytes;
      return;
    }
    collectives_.emplace_back(blocking->op, ev.bytes + behind_bytes_);
    behind_bytes_ = 0;
  }
  /// A collective over the group after the `previous` one (-1: after every core's program so
  /// far): every core's next task waits for it.
  int group_collective(sim::CollectiveOp op, double bytes, int previous) {
    const int id = builder_.collective(
        op, "tensor_parallel",
        std::string(sim::to_string(op)) + " stage " + std::to_string(labels_.stage) + " mb" +
            std::to_string(labels_.micro_batch) + " core " + std::to_string(cores_.front()),
        cores_, bytes);
    g_.task(id).stage = labels_.stage;
    g_.task(id).micro_batch = labels_.micro_batch;
    if (previous >= 0)
      g_.depend(previous, id);
    else
      for (int x : frontier()) g_.depend(x, id);
    for (auto& w : waits_) w.assign(1, id);  // it follows everything each core waited for
    return id;
  }

  const std::vector<LayerRange>& ranges_;
  std::int64_t b_;
  FunctionalRuntime* functional_;
  std::vector<int> chunk_of_;                                      ///< per layer, its model chunk
  std::vector<std::pair<sim::CollectiveOp, double>> collectives_;  ///< the item's, deferred
  double behind_bytes_ = 0;  ///< a decomposed reduction's part behind its matmul, deferred with the rest
  LayerRange item_range_;
};

/// A model chunk's row of the report (with its "chunk" when interleaved).
Json stage_json(const Study& study, StepBuilder& builder, const PipelineLayout& layout, int chunk,
                std::int64_t b, Keep remat, bool interleaved) {
  const int s = chunk % layout.stages();
  const LayerRange range = layout.ranges[std::size_t(chunk)];
  const LayerCost c = builder.cost(range, b);
  const auto& layers = study.model.layers;
  std::int64_t params = 0;
  for (int l = range.first; l < range.last; ++l) params += layers[std::size_t(l)].params();
  Json stage_cores = Json::array();
  for (const auto& replica : layout.cores)  // replica by replica, each group's cores in turn
    for (int core : replica[std::size_t(s)]) stage_cores.push_back(core);
  Json row{{"stage", s},
           {"layers", {range.first, range.last - 1}},
           {"first_layer", layers[std::size_t(range.first)].name},
           {"last_layer", layers[std::size_t(range.last - 1)].name},
           {"params", params},
           {"forward_s", c.forward_s},
           {"backward_s", c.backward_s},
           {"cost_s", c.forward_s + c.recompute_s(remat) + c.backward_s},
           {"boundary_bytes", c.output_bytes},
           {"cores", stage_cores}};
  if (interleaved) row["chunk"] = chunk;
  for (const auto& copy : layout.copies)
    if (layout.chunk_of(copy.reader) == chunk) {
      row["tied_copy_of"] = layers[std::size_t(copy.owner)].name;
      row["tied_copy_bytes"] = copy.bytes;
    }
  return row;
}

/// Plays a pipeline onto a task graph: each (replica, stage) group's program on the one player
/// (StagePlayer), the transfers between stages, then each model chunk's tail (StageTail).
class PipelinePlayer {
 public:
  /// `layout.built`: how many replicas' tasks to build (the first ones); the reductions across
  /// replicas span every replica whatever it is. `programs`: every layer's program on a core of a
  /// stage.
  PipelinePlayer(const Study& study, StepBuilder& builder, Pipeline::Order order, int M, Keep remat,
                 const PipelineLayout& layout, const StageSharding& stage,
                 const std::vector<mesh::LayerProgram>& programs, FunctionalRuntime* functional)
      : study_(study),
        builder_(builder),
        order_(order),
        K_(layout.stages()),
        C_(int(layout.ranges.size())),
        V_(C_ / K_),
        M_(M),
        remat_(remat),
        b_(study.batch / (std::int64_t(layout.replicas()) * M)),
        layout_(layout),
        stage_(stage),
        programs_(programs),
        functional_(functional),
        F_(layout.built, std::vector<std::vector<ItemTasks>>(C_, std::vector<ItemTasks>(M_))),
        Rc_(F_),
        B_(F_) {}

  /// Every group's program, in its stage's program order (a core's program is the order its
  /// compute tasks are added); the transfers between stages afterwards.
  double compute() {
    double flops = 0;
    for (int r = 0; r < layout_.built; ++r)
      for (int s = 0; s < K_; ++s) flops += stage_compute(r, s);
    return flops;
  }

  /// Activations forward and gradients backward between consecutive model chunks (stages), core
  /// t of a group to core t of the next (each stage's own order is its group's chains).
  void link() {
    const auto& cores = layout_.cores;
    auto& g = builder_.graph();
    for (int r = 0; r < layout_.built; ++r)
      for (int m = 0; m < M_; ++m)
        for (int c = 0; c < C_; ++c)
          for (int t = 0; t < int(cores[r][c % K_].size()); ++t) {
            const int s = c % K_;
            const Labels labels{s, m, (std::int64_t(r) * M_ + m) * b_};
            if (c > 0)
              g.depend(transfer(cores[r][(c - 1) % K_][t], cores[r][s][t], boundary(c - 1),
                                F_[r][c - 1][m].ends[t], "activation_transfer", labels,
                                layout_.ranges[c].first, false),
                       F_[r][c][m].first[t]);
            if (c < C_ - 1)
              g.depend(
                  transfer(cores[r][(c + 1) % K_][t], cores[r][s][t], boundary(c), B_[r][c + 1][m].ends[t],
                           "gradient_transfer", labels, layout_.ranges[c].last, true),
                  B_[r][c][m].first[t]);
          }
  }

  /// Each model chunk's tail after its last backward; the stages' table for the report.
  Json tails() {
    TiedSums sums;
    Json stages = Json::array();
    for (int c = 0; c < C_; ++c) {
      StageTail(study_, builder_, layout_, c, programs_, remat_, stage_, last_backward(c), functional_, sums)
          .play();
      stages.push_back(stage_json(study_, builder_, layout_, c, b_, remat_, V_ > 1));
    }
    return stages;
  }

 private:
  /// A transfer after every task in `after`.
  int transfer(int src, int dst, double bytes, const std::vector<int>& after, const std::string& phase,
               Labels labels, int boundary, bool gradient) {
    const int id = builder_.transfer(src, dst, bytes, after.front(), phase, labels, boundary, gradient);
    for (std::size_t i = 1; i < after.size(); ++i) builder_.graph().depend(after[i], id);
    return id;
  }

  /// Group (r, s)'s program; returns its compute tasks' hardware FLOPs.
  double stage_compute(int r, int s) {
    const double slots = stage_.sharded ? 1.0 / layout_.replicas() : 1.0;
    for (int c = s; c < C_; c += K_)
      for (int core : layout_.cores[r][s]) builder_.resident_weights(core, layout_.ranges[c], slots);
    StagePlayer group(study_, builder_, layout_.cores[r][s], programs_, remat_, layout_.ranges, b_,
                      functional_);
    std::set<int> backward_seen;  // chunks whose first backward (allocating their gradients) is placed
    for (const Item& it : stage_program(order_, s, K_, M_, remat_ != Keep::All, V_)) {
      const Labels labels{s, it.micro_batch, (std::int64_t(r) * M_ + it.micro_batch) * b_,
                          V_ > 1 ? it.chunk / K_ : -1};
      StageTasks& tasks = it.kind == Item::Forward ? F_ : it.kind == Item::Recompute ? Rc_ : B_;
      tasks[r][it.chunk][it.micro_batch] = group.play_item(
          it, labels, it.kind == Item::Backward && !backward_seen.count(it.chunk), item_runs_);
      if (it.kind == Item::Backward) backward_seen.insert(it.chunk);
    }
    return group.hardware_flops();
  }

  /// Per built replica, per core of chunk c's stage group: where the chunk's last backward ends
  /// (GPipe: micro-batch 0's; 1F1B: the last one's).
  std::vector<std::vector<std::vector<int>>> last_backward(int c) const {
    int last = -1;
    for (const Item& it : stage_program(order_, c % K_, K_, M_, remat_ != Keep::All, V_))
      if (it.kind == Item::Backward && it.chunk == c) last = it.micro_batch;
    std::vector<std::vector<std::vector<int>>> ends;
    for (int r = 0; r < layout_.built; ++r) ends.push_back(B_[r][c][last].ends);
    return ends;
  }

  double boundary(int c) { return builder_.cost(layout_.ranges[c], b_).output_bytes; }

  const Study& study_;
  StepBuilder& builder_;
  Pipeline::Order order_;
  int K_, C_, V_, M_;  // stages, model chunks (K x V), chunks per stage, micro-batches
  Keep remat_;
  std::int64_t b_;
  const PipelineLayout& layout_;
  const StageSharding& stage_;
  const std::vector<mesh::LayerProgram>& programs_;
  FunctionalRuntime* functional_;
  StageTasks F_, Rc_, B_;
  StagePlayer::ItemRuns item_runs_;  ///< every stage's items (a chunk is on one stage)
};

}  // namespace

BuiltStep Pipeline::play(const Study& study, const Partition& cut, FunctionalRuntime* functional, int built,
                         Json* stages) const {
  PipelineLayout layout;
  for (int c = 0, first = 0; c < chunks(); first += cut.sizes[std::size_t(c)], ++c)
    layout.ranges.push_back({first, first + cut.sizes[std::size_t(c)]});
  layout.cores = groups(study);
  layout.built = built < 0 ? replicas_ : built;
  layout.combine_unit = combine_unit_;
  StepBuilder builder(study, study.cores(), functional);
  split(builder);
  std::vector<int> stage_of_layer;
  for (int c = 0; c < chunks(); ++c)
    stage_of_layer.insert(stage_of_layer.end(), layout.ranges[c].size(), c % stages_);
  layout.copies = builder.tied_copies(stage_of_layer, layer_batch(study));
  builder.hold(layout.copies);
  std::vector<mesh::LayerProgram> layer_programs;
  for (int l = 0; l < int(study.model.layers.size()); ++l)
    layer_programs.push_back(builder.program(l, layer_batch(study)));
  tail_programs(layer_programs, layout, sharding_, study.model);
  PipelinePlayer player(study, builder, order_, microbatches_, remat_, layout, sharding_, layer_programs,
                        functional);
  const double flops = player.compute();
  player.link();
  Json table = player.tails();
  if (stages) *stages = std::move(table);
  BuiltStep step = builder.finish();
  step.hardware_flops += flops;
  return step;
}

BuiltStep Pipeline::build(const Study& study, FunctionalRuntime* functional) const {
  if (functional && tensor_ > 1)
    throw ConfigError(study.file, "schedule.tensor_parallel", std::to_string(tensor_),
                      "1 in functional mode (it runs a stage's layers whole on one core)");
  const int K = stages_, M = microbatches_;
  const Partition cut = partition(study);
  Json stages;
  BuiltStep step = play(study, cut, functional, -1, &stages);
  std::vector<double> stage_cost(std::size_t(K), 0.0);  // a stage's chunks together
  for (const auto& st : stages) stage_cost[st["stage"].get<std::size_t>()] += st["cost_s"].get<double>();
  double largest = 0, total = 0;
  for (double cost : stage_cost) {
    largest = std::max(largest, cost);
    total += cost;
  }
  step.details = Json{{"micro_batch_size", layer_batch(study)},
                      {"bubble_fraction_ideal", double(K - 1) / double(virtual_ * M + K - 1)},
                      {"stage_imbalance", total > 0 ? largest / (total / K) - 1.0 : 0.0},
                      {"partition_set_by", cut.set_by},
                      {"stages", stages},
                      {"placement", tensor_ > 1 ? Json(groups(study)) : Json(placement(study))}};
  if (tensor_ > 1)
    if (Json padded = mesh::padded_dimensions(study, sharding_.layout, sharding_.sizes); !padded.empty())
      step.details["padded"] = padded;
  return step;
}

BuiltStep Pipeline::representative_step(const Study& study) const {
  BuiltStep step = play(study, partition(study), nullptr, 1, nullptr);
  step.replicas_represented = replicas_;
  return step;
}

}  // namespace tpusim
