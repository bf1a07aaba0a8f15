#include "schedules/step_tail.hpp"

#include <algorithm>
#include <set>

#include "schedules/mesh_lowering.hpp"
#include "sim/task_graph.hpp"

namespace tpusim {

using namespace mesh;

TailPlayer::TailPlayer(const Study& study, StepBuilder& builder, std::vector<int> cores,
                       const std::vector<LayerProgram>& programs, Keep remat, const Settings& settings,
                       std::shared_ptr<MeshExecutor> exec)
    : ProgramPlayer(study, builder, std::move(cores), programs, remat),
      sharded_(settings.sharded || settings.fully),
      fully_(settings.fully),
      overlap_(settings.overlap),
      dcn_after_backward_(settings.dcn_after_backward),
      wire_(settings.wire),
      data_dim_(settings.data_dim),
      exec_(std::move(exec)),
      layers_(int(programs_.size())),
      range_(settings.layers.last < 0 ? LayerRange{0, layers_} : settings.layers),
      cost_(study.hardware.core),
      gradient_reductions_(programs_.size()),
      scattered_(programs_.size()) {
  if (!fully_) combined_ = gradient_chunks(programs_, settings.bucket_bytes, range_, settings.unit);
}

void TailPlayer::tail(const Sharding& s) {
  combined_gradient_reductions();
  reduce_pieces_across_slices();
  optimizer_statistics(s);
  before_updates();
  updates();
  if (fully_)
    functional_gathers();
  else
    gather_updated_pieces();
}

void TailPlayer::reduce_rest_across_slices(int l) {
  if (study_.slices <= 1) return;
  const auto& p = programs_[std::size_t(l)];
  double covered = 0;
  for (const Event& ev : p.backward)
    if (ev.kind == Event::GradientAllReduce && over_replicas(ev.mesh_dims)) covered += ev.bytes;
  const double all = weight_bytes() * p.weight_elements, rest = all - covered;
  if (rest <= 1e-9 * all) return;
  const std::string& layer = study_.model.layers[std::size_t(l)].name;
  sim::Task t = family_collective(sim::CollectiveOp::AllReduce, layer, {}, groups(std::vector<std::string>{}),
                                  "gradient_allreduce", l, on_wire(rest));
  t.name = "all-reduce " + layer + " weight gradients across slices";
  t.across_slices = true;
  gradient_reductions_[std::size_t(l)].push_back(after_every_core(std::move(t)));
}

void TailPlayer::wait_for_gradients_scattered(int l) {
  const auto& scatters = gradient_reductions_[std::size_t(l)];
  if (scatters.empty()) return;
  receive(std::vector<std::vector<int>>(static_cast<std::size_t>(size_), scatters));
}

void TailPlayer::reduce_chunks_ending_at(int l) {
  for (const auto& chunk : combined_)
    if (chunk.reductions.back().second == l)
      combined_reduction(chunk.mesh_dims, chunk.reductions, chunk.bytes);
}

void TailPlayer::combined_gradient_reductions() {
  if (overlap_) return;
  int previous = -1;
  const std::vector<std::string>* dims = nullptr;
  for (const auto& chunk : combined_) {
    const int id = combined_reduction(chunk.mesh_dims, chunk.reductions, chunk.bytes);
    if (dims && *dims == chunk.mesh_dims) g_.depend(previous, id);
    previous = id;
    dims = &chunk.mesh_dims;
  }
}

void TailPlayer::scatter_layer(int l) {
  std::map<std::vector<std::string>, std::vector<std::pair<const Event*, int>>> by_dims;
  for (const auto& d : deferred_) by_dims[d.first->mesh_dims].push_back(d);
  deferred_.clear();
  for (const auto& [dims, events] : by_dims) {
    double bytes = 0;
    for (const auto& e : events) bytes += e.first->bytes;
    const int id = combined_reduction(dims, events, bytes, l);
    if (last_scatter_ >= 0) g_.depend(last_scatter_, id);
    last_scatter_ = id;
  }
}

int TailPlayer::pieces_over_data(int scatter, const std::vector<std::string>& dims, const std::string& what,
                                 int layer, double piece) {
  if (data_dim_.empty() || std::find(dims.begin(), dims.end(), data_dim_) == dims.end()) return scatter;
  auto family = groups(std::vector<std::string>{data_dim_});
  if (family.front().size() <= 1) return scatter;  // a data dimension of one core
  sim::Task t = family_collective(sim::CollectiveOp::AllReduce, what + " pieces", {data_dim_},
                                  std::move(family), "gradient_allreduce", layer, piece);
  const int id = g_.add(std::move(t));
  g_.depend(scatter, id);
  return id;
}

int TailPlayer::combined_reduction(const std::vector<std::string>& dims,
                                   const std::vector<std::pair<const Event*, int>>& events, double bytes,
                                   int layer) {
  using C = sim::CollectiveOp;
  const std::string what = layer < 0 ? "weight gradients (combined)"
                                     : study_.model.layers[std::size_t(layer)].name + " weight gradients";
  // Sharded, the pieces are cut over all but the data dimension (whose cores hold the same ones):
  // a reduction over it alone is an all-reduce.
  const std::vector<std::string> cut = sharded_ ? scatter_dims(dims) : dims;
  const bool scatter = sharded_ && !cut.empty();
  sim::Task t = family_collective(
      scatter ? C::ReduceScatter : C::AllReduce, what, scatter ? cut : dims, groups(scatter ? cut : dims),
      scatter ? "gradient_reduce_scatter" : "gradient_allreduce", layer, on_wire(bytes));
  // Behind the backward (a layer's, or with overlap), a reduce-scatter's pieces may wait for
  // the backward's end to continue across the slices (reduce_pieces_across_slices).
  const bool pieces_later = scatter && dcn_after_backward_ && over_replicas(dims) && (layer >= 0 || overlap_);
  t.across_slices = over_replicas(dims) && !pieces_later;
  const double members = double(t.groups.front().size());
  const int chunk = chunks_++;
  std::vector<FunctionalRuntime::Closure> parts;
  double freed = 0;  // sharded: each core keeps its piece of each reduced gradient
  for (const auto& [ev, l] : events) {
    if (scatter) {
      const double local = ev->bytes / weight_bytes();
      freed += weight_bytes() * unkept_elements(local, members);
      scattered_[std::size_t(l)].push_back(
          {{ev->actions.empty() ? -1 : ev->actions.front().op, t.groups},
           ev->name,
           cut,
           ev->bytes,
           chunk});  // -1: no op of the mesh's host math (a pipeline's tied copy)
    }
    if (Closure host = reduction_host(t.groups, l, *ev)) parts.push_back(std::move(host));
  }
  for (int c = 0; c < size_ && freed > 0; ++c)
    t.memory.push_back({cores_[std::size_t(c)], sim::MemoryCategory::Gradients, -freed, When::End});
  t.host = in_turn(std::move(parts));
  const int id =
      scatter ? pieces_over_data(after_every_core(std::move(t)), dims, what, layer, on_wire(bytes) / members)
              : after_every_core(std::move(t));
  std::vector<int> layers;
  for (const auto& [ev, l] : events) {
    gradient_reductions_[std::size_t(l)].push_back(id);
    if (layers.empty() || layers.back() != l) layers.push_back(l);
  }
  if (pieces_later) pieces_across_slices_.push_back({std::move(layers), id, on_wire(bytes) / members});
  return id;
}

void TailPlayer::reduce_pieces_across_slices() {
  int previous = -1;
  for (const auto& p : pieces_across_slices_) {
    const int first = p.layers.front();
    sim::Task t =
        family_collective(sim::CollectiveOp::AllReduce, study_.model.layers[std::size_t(first)].name, {},
                          groups(std::vector<std::string>{}), "gradient_allreduce", first, p.bytes);
    t.name = "all-reduce " + study_.model.layers[std::size_t(first)].name +
             " weight-gradient pieces across slices";
    t.across_slices = true;
    const int id = after_every_core(std::move(t));
    g_.depend(p.after, id);
    if (previous >= 0) g_.depend(previous, id);
    previous = id;
    for (int l : p.layers) gradient_reductions_[std::size_t(l)].push_back(id);
  }
}

void TailPlayer::statistics(int l, const std::string& phase, const std::vector<std::string>& over,
                            double bytes) {
  const int id = after_every_core(family_collective(sim::CollectiveOp::AllReduce,
                                                    study_.model.layers[std::size_t(l)].name + " " + phase,
                                                    over, groups(over), phase, l, bytes));
  for (int r : gradient_reductions_[std::size_t(l)]) g_.depend(r, id);
  gradient_reductions_[std::size_t(l)].push_back(id);
}

void TailPlayer::optimizer_statistics(const Sharding& s) {
  const auto& rule = *study_.optimizer.rule;
  for (int l = range_.first; l < range_.last; ++l) {
    const auto& p = programs_[std::size_t(l)];
    if (const double norms = rule.layer_statistics_bytes(); norms > 0) {
      // LARS scales each layer by ||w|| / ||g||: when the layer's weights are split over mesh
      // dimensions, or their pieces spread by weight-update sharding, the two partial norms
      // are all-reduced over those dimensions.
      std::set<std::string> dims = p.weight_mesh_dims;
      for (const auto& w : scattered_[std::size_t(l)]) dims.insert(w.mesh_dims.begin(), w.mesh_dims.end());
      if (!dims.empty()) statistics(l, rule.layer_statistics_phase(), {dims.begin(), dims.end()}, norms);
    } else if (rule.factored_statistics()) {
      // Adafactor keeps, per matrix (the last two dimensions of a weight), the mean of the
      // squared gradient over each of them: a mean over a split dimension is all-reduced over
      // its mesh dimension (fp32, one value per remaining element).
      std::map<std::string, double> bytes;
      for (const auto& w : p.weights) {
        if (w.dims.size() < 2) continue;
        for (const Dim* d : {&w.dims[w.dims.size() - 2], &w.dims.back()})
          if (s.split(d->name) > 1)
            bytes[s.layout.at(d->name)] += 4.0 * s.local_elements(w) / double(s.local(*d));
      }
      for (const auto& [mesh_dim, b] : bytes) statistics(l, "adafactor_statistics", {mesh_dim}, b);
    }
  }
}

TailPlayer::Closure TailPlayer::reduction_host(const std::vector<std::vector<int>>& family, int l,
                                               const Event& ev) {
  return exec_ ? exec_->collective(family, l, ev.actions.front()) : Closure{};
}

TailPlayer::Closure TailPlayer::update_host(int i, int l) {
  if (!exec_) return {};
  std::vector<MeshExecutor::ShardedWeight> pieces;
  for (const auto& w : scattered_[std::size_t(l)]) pieces.push_back(w.weight);
  return exec_->update(i, l, pieces);
}

TailPlayer::Closure TailPlayer::gather_host(int l, const Scattered& w) {
  return exec_ ? exec_->gather(l, w.weight) : Closure{};
}

TailPlayer::UpdateTime TailPlayer::update_time(int l) const {
  const OpCost c = cost_.cost(
      study_.optimizer.update_op(study_.model, study_.model.layers[std::size_t(l)], update_fraction(l)));
  return {c.seconds, c.hbm_bound_s()};
}

void TailPlayer::updates() {
  updates_.assign(programs_.size(), {});
  for (int c = 0; c < size_; ++c) {
    const int after_backward = last_[std::size_t(c)];
    for (int l = range_.last - 1; l >= range_.first; --l) {
      const auto& p = programs_[std::size_t(l)];
      if (p.update_elements <= 0) continue;
      sim::Task t;
      t.kind = sim::TaskKind::Compute;
      const int core = cores_[std::size_t(c)];
      t.name = "update " + study_.model.layers[std::size_t(l)].name + " core " + std::to_string(core);
      t.phase = "update";
      t.core = core;
      t.layer = l;
      const UpdateTime update = update_time(l);
      t.seconds = update.seconds;
      t.hbm_s = update.hbm_s;
      // What is left of the gradients (pieces of the reduce-scattered ones, the others whole).
      t.memory.push_back(
          {core, sim::MemoryCategory::Gradients, -weight_bytes() * p.update_elements, When::End});
      t.host = update_host(c, l);
      const int id = g_.add(std::move(t));
      if (after_backward >= 0) g_.depend(after_backward, id);
      for (int x : waits_[std::size_t(c)]) g_.depend(x, id);
      for (int r : gradient_reductions_[std::size_t(l)]) g_.depend(r, id);
      updates_[std::size_t(l)].push_back(id);
    }
  }
}

void TailPlayer::functional_gathers() {
  if (!exec_) return;
  for (int l = range_.first; l < range_.last; ++l)
    for (const auto& w : scattered_[std::size_t(l)]) {
      sim::Task t;
      t.kind = sim::TaskKind::Compute;
      t.name = "functional: " + w.name + " pieces for the next step core 0";
      t.phase = "update";
      t.core = 0;
      t.layer = l;
      t.host = exec_->gather(l, w.weight);
      const int id = g_.add(std::move(t));
      for (int u : updates_[std::size_t(l)]) g_.depend(u, id);
    }
}

void TailPlayer::gather_updated_pieces() {
  std::map<int, std::vector<std::pair<int, const Scattered*>>> chunks;
  std::vector<int> order;
  for (int l = range_.last - 1; l >= range_.first; --l)
    for (const auto& w : scattered_[std::size_t(l)]) {
      if (!chunks.count(w.chunk)) order.push_back(w.chunk);
      chunks[w.chunk].push_back({l, &w});
    }
  for (int chunk : order) {
    const auto& pieces = chunks.at(chunk);
    const Scattered& first = *pieces.front().second;
    std::set<int> layers;
    double bytes = 0;
    for (const auto& [l, w] : pieces) {
      layers.insert(l);
      bytes += w->bytes;
    }
    const bool one = pieces.size() == 1;
    sim::Task t = family_collective(sim::CollectiveOp::AllGather, one ? first.name : "weights (combined)",
                                    first.mesh_dims, first.weight.groups, "weight_allgather",
                                    layers.size() == 1 ? pieces.front().first : -1, bytes);
    std::vector<Closure> parts;
    for (const auto& [l, w] : pieces)
      if (Closure host = gather_host(l, *w)) parts.push_back(std::move(host));
    t.host = in_turn(std::move(parts));
    const int id = g_.add(std::move(t));
    for (int l : layers)
      for (int u : updates_[std::size_t(l)]) g_.depend(u, id);
  }
}

}  // namespace tpusim
