#include "schedules/stage_tail.hpp"

#include <algorithm>

#include "schedules/mesh_lowering.hpp"

namespace tpusim {

int PipelineLayout::chunk_of(int layer) const {
  int c = 0;
  while (layer >= ranges[std::size_t(c)].last) ++c;
  return c;
}

std::string PipelineLayout::stage_name(int chunk) const {
  const bool interleaved = int(ranges.size()) > stages();
  return "stage " + std::to_string(chunk % stages()) + (interleaved ? " chunk " + std::to_string(chunk) : "");
}

void tail_programs(std::vector<mesh::LayerProgram>& programs, const PipelineLayout& layout,
                   const StageSharding& stage, const Model& model) {
  if (stage.sharded)  // (the schedule refuses it with one replica)
    for (auto& p : programs)
      for (const auto& ev : p.backward) {  // as the lowering cuts a mesh's (Event::GradientAllReduce)
        if (ev.kind != mesh::Event::GradientAllReduce) continue;
        double members = 1;
        for (const auto& dim : ev.mesh_dims)
          members *= dim == "replica" ? stage.replicas : stage.sizes.at(dim);
        const double local = ev.bytes / model.weight_bytes;
        p.update_elements -= mesh::unkept_elements(local, members);
      }
  for (const auto& copy : layout.copies) {
    auto& p = programs[std::size_t(copy.reader)];
    const double elements = copy.bytes / model.weight_bytes;
    p.weight_elements += elements;
    p.total_weight_elements += elements;
    p.update_elements += stage.sharded ? mesh::piece_elements(elements, stage.replicas) : elements;
    if (!stage.over_replicas) continue;
    mesh::Event reduce{};
    reduce.kind = mesh::Event::GradientAllReduce;
    reduce.name = model.layers[std::size_t(copy.reader)].name + "/tied copy weight gradient";
    reduce.mesh_dims = {"replica"};
    reduce.bytes = copy.bytes;
    p.backward.push_back(std::move(reduce));
  }
}

namespace {

/// A chunk's stage's cores of the built replicas: replica by replica, each group's in turn.
std::vector<int> tail_cores(const PipelineLayout& layout, int chunk) {
  std::vector<int> cores;
  for (int r = 0; r < layout.built; ++r)
    for (int core : layout.cores[std::size_t(r)][std::size_t(chunk % layout.stages())]) cores.push_back(core);
  return cores;
}

}  // namespace

TailPlayer::Settings StageTail::settings(const Study& study, const StageSharding& stage,
                                         const PipelineLayout& layout, int chunk) {
  Settings s;
  s.sharded = stage.sharded;
  const double bytes = study.model.weight_bytes;  // reduced and gathered as held
  s.wire = WireDtypes{bytes, bytes, bytes};
  s.bucket_bytes = study.hardware.core.allreduce_combine_threshold_bytes;
  s.layers = layout.ranges[std::size_t(chunk)];
  s.unit = layout.combine_unit;
  return s;
}

StageTail::StageTail(const Study& study, StepBuilder& builder, const PipelineLayout& layout, int chunk,
                     const std::vector<mesh::LayerProgram>& programs, Keep remat, const StageSharding& stage,
                     const std::vector<std::vector<std::vector<int>>>& ends, FunctionalRuntime* functional,
                     TiedSums& sums)
    : TailPlayer(study, builder, tail_cores(layout, chunk), programs, remat,
                 settings(study, stage, layout, chunk), nullptr),
      layout_(layout),
      stage_(chunk % layout.stages()),
      group_size_(int(layout.cores.front()[std::size_t(stage_)].size())),
      sharding_(stage),
      functional_(functional),
      sums_(sums) {
  for (int i = 0; i < size_; ++i) {
    const auto& end = ends[std::size_t(i / group_size_)][std::size_t(i % group_size_)];
    last_[std::size_t(i)] = end.front();
    waits_[std::size_t(i)].assign(end.begin() + 1, end.end());
  }
}

void StageTail::no_program() { throw SimulationError("a pipeline stage's tail plays no layer program"); }

void StageTail::play() {
  for (int l = range_.first; l < range_.last; ++l) reduce_rest_across_slices(l);
  const Sharding s{sharding_.layout, sharding_.sizes, study_.hardware.core.activation_tile_lanes(),
                   weight_bytes()};
  tail(s);
}

std::vector<std::vector<int>> StageTail::groups(const std::vector<std::string>& dims) const {
  // Over "replica": a core with its counterparts on every replica; over the stage's tensor
  // dimension: with the rest of its group; over none: alone.
  const bool across = over_replicas(dims), within = dims.size() > (across ? 1u : 0u);
  std::vector<std::vector<int>> family;
  for (int r = 0; r < (across ? 1 : layout_.built); ++r)
    for (int t = 0; t < (within ? 1 : group_size_); ++t) {
      std::vector<int>& group = family.emplace_back();
      for (int q = across ? 0 : r; q < (across ? layout_.replicas() : r + 1); ++q)
        for (int u = within ? 0 : t; u < (within ? group_size_ : t + 1); ++u)
          group.push_back(layout_.cores[std::size_t(q)][std::size_t(stage_)][std::size_t(u)]);
    }
  return family;
}

bool StageTail::over_replicas(const std::vector<std::string>& dims) const {
  return std::find(dims.begin(), dims.end(), "replica") != dims.end();
}

StageTail::Closure StageTail::reduction_host(const std::vector<std::vector<int>>& family, int l,
                                             const Event&) {
  if (!functional_ || !reduced_.insert(l).second) return {};  // a layer's gradients summed once
  std::vector<Closure> parts;
  for (const auto& group : family) parts.push_back(functional_->reduce(group, {l, l + 1}));
  return in_turn(std::move(parts));
}

StageTail::Closure StageTail::update_host(int i, int l) {
  if (!functional_) return {};
  // Weight-update sharding: replica r updates piece r of each weight; otherwise all of it.
  return functional_->update(cores_[std::size_t(i)], {l, l + 1}, sharded_ ? i / group_size_ : 0,
                             sharded_ ? layout_.replicas() : 1);
}

StageTail::Closure StageTail::gather_host(int l, const Scattered& w) {
  if (!functional_ || !gathered_.insert(l).second) return {};
  std::vector<Closure> parts;
  for (const auto& group : w.weight.groups) parts.push_back(functional_->gather(group, {l, l + 1}));
  return in_turn(std::move(parts));
}

const StepBuilder::TiedCopy* StageTail::copy_read_by(int l) const {
  for (const auto& copy : layout_.copies)
    if (copy.reader == l) return &copy;
  return nullptr;
}

TailPlayer::UpdateTime StageTail::update_time(int l) const {
  const StepBuilder::TiedCopy* copy = copy_read_by(l);
  if (!copy) return TailPlayer::update_time(l);
  // The reader's own weights (its share of them), then the copy's (its piece), as one update.
  const auto& p = programs_[std::size_t(l)];
  const auto& model = study_.model;
  const double elements = copy->bytes / weight_bytes();
  const double piece = sharded_ ? mesh::piece_elements(elements, layout_.replicas()) : elements;
  const double own = p.total_weight_elements - elements, own_update = p.update_elements - piece;
  UpdateTime t;
  if (own_update > 0) {
    const OpCost c =
        cost_.cost(study_.optimizer.update_op(model, model.layers[std::size_t(l)], own_update / own));
    t = {c.seconds, c.hbm_bound_s()};
  }
  const Layer& owner = model.layers[std::size_t(copy->owner)];
  const OpCost c = cost_.cost(study_.optimizer.update_op(model, owner, piece / double(owner.params())));
  t.seconds += c.seconds - (own_update > 0 ? study_.hardware.core.op_overhead_s : 0.0);
  t.hbm_s += c.hbm_bound_s();
  return t;
}

int StageTail::tied_sum(const StepBuilder::TiedCopy& copy, int r, int t) {
  const int reader = layout_.chunk_of(copy.reader), owner = layout_.chunk_of(copy.owner),
            K = layout_.stages();
  const auto& groups = layout_.cores[std::size_t(r)];
  const int id = builder_.collective(
      sim::CollectiveOp::AllReduce, "tied_weight_allreduce",
      "allreduce tied " + study_.model.layers[std::size_t(copy.owner)].name + " " +
          layout_.stage_name(owner) + " + " + layout_.stage_name(reader) +
          (group_size_ > 1 ? " shard " + std::to_string(t) : "") +
          (layout_.replicas() > 1 ? " replica " + std::to_string(r) : ""),
      {groups[std::size_t(owner % K)][std::size_t(t)], groups[std::size_t(reader % K)][std::size_t(t)]},
      copy.bytes);
  g_.task(id).stage = reader % K;
  return id;
}

void StageTail::before_updates() {
  // Each copy's gradient summed with its owner's, each core with its counterpart on the other
  // stage, once both stages' reductions are done: the layer's updates wait for the sums.
  for (std::size_t k = 0; k < layout_.copies.size(); ++k) {
    const auto& copy = layout_.copies[k];
    for (int l : {copy.reader, copy.owner}) {
      if (l < range_.first || l >= range_.last) continue;
      std::vector<int> ids;
      for (int i = 0; i < size_; ++i) {
        const int r = i / group_size_, t = i % group_size_;
        auto [it, fresh] = sums_.try_emplace({k, r, t}, -1);
        if (fresh) it->second = tied_sum(copy, r, t);
        for (int x : frontier(i)) g_.depend(x, it->second);
        for (int x : gradient_reductions_[std::size_t(l)]) g_.depend(x, it->second);
        ids.push_back(it->second);
      }
      auto& waits = gradient_reductions_[std::size_t(l)];
      waits.insert(waits.end(), ids.begin(), ids.end());
    }
  }
}

}  // namespace tpusim
