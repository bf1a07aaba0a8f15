#include "schedules/mesh_lowering.hpp"

#include <algorithm>
#include <cmath>

#include "schedules/gradient_buckets.hpp"

namespace tpusim::mesh {

std::string collective_task_name(const std::string& event, const std::vector<std::string>& mesh_dims,
                                 sim::CollectiveOp op) {
  std::string dims;
  for (const auto& d : mesh_dims) dims += (dims.empty() ? "" : "+") + d;
  std::string word = sim::to_string(op);
  std::replace(word.begin(), word.end(), '_', '-');
  return word + " " + event + " over " + dims;
}

std::optional<BlockingCollective> blocking_collective(Event::Kind kind) {
  using C = sim::CollectiveOp;
  switch (kind) {
    case Event::BlockingAllReduce:
      return BlockingCollective{C::AllReduce, "activation_allreduce"};
    case Event::BlockingAllGather:
      return BlockingCollective{C::AllGather, "activation_allgather"};
    case Event::BlockingReduceScatter:
      return BlockingCollective{C::ReduceScatter, "activation_reduce_scatter"};
    case Event::BlockingAllToAll:
      return BlockingCollective{C::AllToAll, "expert_all_to_all"};
    default:
      return std::nullopt;
  }
}

double piece_elements(double elements, double count) { return std::ceil(elements / count); }

double unkept_elements(double elements, double count) { return elements - piece_elements(elements, count); }

std::vector<std::string> scatter_dims(const std::vector<std::string>& dims, const std::string& data_dim) {
  std::vector<std::string> out;
  for (const auto& d : dims)
    if (d != data_dim) out.push_back(d);
  return out;
}

std::vector<GradientChunk> gradient_chunks(const std::vector<LayerProgram>& programs, double threshold_bytes,
                                           LayerRange layers, CombineUnit unit) {
  if (layers.last < 0) layers = {0, int(programs.size())};
  // Per set of mesh dimensions, the units in backward order: each reduction, or a layer's.
  using Unit = std::vector<std::pair<const Event*, int>>;
  std::map<std::vector<std::string>, std::vector<Unit>> by_dims;
  for (int l = layers.last - 1; l >= layers.first; --l) {
    std::map<std::vector<std::string>, std::size_t> layer_unit;  // per set of dimensions, its unit
    for (const Event& ev : programs[std::size_t(l)].backward) {
      if (ev.kind != Event::GradientAllReduce) continue;
      auto& units = by_dims[ev.mesh_dims];
      const auto [it, fresh] = layer_unit.try_emplace(ev.mesh_dims, units.size());
      if (unit == CombineUnit::Tensor || fresh) units.emplace_back();
      units[unit == CombineUnit::Tensor ? units.size() - 1 : it->second].push_back({&ev, l});
    }
  }
  std::vector<GradientChunk> chunks;
  for (const auto& [dims, units] : by_dims) {
    std::vector<double> bytes;
    for (const auto& u : units) {
      double b = 0;
      for (const auto& r : u) b += r.first->bytes;
      bytes.push_back(b);
    }
    for (const auto& [first, last] : combine_in_order(bytes, threshold_bytes)) {
      GradientChunk chunk{dims, {}, 0.0};
      for (std::size_t k = first; k < last; ++k) {
        chunk.reductions.insert(chunk.reductions.end(), units[k].begin(), units[k].end());
        chunk.bytes += bytes[k];
      }
      chunks.push_back(std::move(chunk));
    }
  }
  return chunks;
}

double update_fraction(const LayerProgram& p) {
  return p.total_weight_elements > 0 ? p.update_elements / p.total_weight_elements : 0;
}

ResidentShards resident_shards(const LayerProgram& p, const Model& model, std::size_t layer,
                               double slot_elements, bool fully_sharded) {
  // Slots per parameter times the weights the core updates (as stored): whole slots, and
  // the layer's parameter count need not equal its ops' weight elements (a mixture of experts).
  const double params = double(model.layers[layer].params());
  return {model.weight_bytes * (fully_sharded ? p.update_elements : p.weight_elements),
          params > 0 ? model.slot_bytes * (slot_elements / params) * p.update_elements : 0.0};
}

namespace {

using A = MeshAction;

/// Lowers one layer's ops under a layout: each op's local compute, then the collectives the
/// layout induces, forward in op order and backward in reverse, into a LayerProgram.
class LayerLowering : public MeshLoweringSink {
 public:
  LayerLowering(const std::vector<NamedOp>& ops, const Sharding& s, const CostModel& cost, double act,
                const std::string& layer, bool model_input, bool sharded, int batch_norm_group,
                const SavePolicy& saves)
      : batch_norm_group_(batch_norm_group),
        saves_(saves),
        ops_(ops),
        s_(s),
        cost_(cost),
        act_(act),
        layer_(layer),
        model_input_(model_input),
        sharded_(sharded),
        seq_mesh_(s.split("seq") > 1 ? s.layout.at("seq") : "") {}

  LayerProgram run() {
    const LayerMemory m = layer_memory(ops_, s_, act_, model_input_, saves_);
    p_.kept_bytes = m.kept_bytes;
    p_.workspace_bytes = m.workspace_bytes;
    p_.backward_workspace_bytes = m.backward_workspace_bytes;
    p_.saved_output_bytes = m.saved_output_bytes;
    dots_ = save_plan(ops_, s_, act_, saves_);
    if (!ops_.empty()) {
      const NamedOp& first = ops_.front();
      p_.input_bytes = s_.local_elements(first.a) * (op_kind(first).reads_ids() ? 4.0 : act_);
    }
    for (std::size_t i = 0; i < ops_.size(); ++i) forward(i);
    for (std::size_t i = ops_.size(); i-- > 0;) backward(i);
    p_.update_elements = p_.weight_elements - unshared_update_;
    return std::move(p_);
  }

 private:
  // --- Events ---------------------------------------------------------------------------------
  /// The op's local compute, appended to the running compute event.
  /// A product quantized to the study's matmul precision runs after its operands' quantization
  /// passes, all in the same event.
  OpCost compute(std::vector<Event>& into, const Op& op, MeshAction::What what, bool partial = false) {
    const auto q = cost_.quantized(op);
    const OpCost c = cost_.cost(q ? q->matmul : op);
    if (into.empty() || into.back().kind != Event::Compute)
      into.push_back(Event{Event::Compute, layer_, 0, 0, 0, {}, 0, {}, {}, 0});
    into.back().actions.push_back(MeshAction{at_, what, 0, partial});
    if (q)
      for (const Op& pass : q->quantize) add_cost(into.back(), cost_.cost(pass), 1.0);
    add_cost(into.back(), c, 1.0);
    return c;
  }
  /// `share` of the op's cost `c` added to compute event `ev` (and to the part of it the save
  /// policy recomputes, when it recomputes the op).
  void add_cost(Event& ev, const OpCost& c, double share) const {
    ev.seconds += share * c.seconds;
    ev.hbm_seconds += share * c.hbm_bound_s();
    ev.grid_seconds += share * c.grid_added_s;
    ev.saved_seconds += share * c.precision_saved_s;
    ev.model_flops += share * c.model_flops;
    ev.hardware_flops += share * c.hardware_flops;
    if (backward_ || !dots_.recomputed[i_]) return;
    ev.partial_seconds += share * c.seconds;
    ev.partial_hbm_seconds += share * c.hbm_bound_s();
    ev.partial_grid_seconds += share * c.grid_added_s;
    ev.partial_saved_seconds += share * c.precision_saved_s;
    ev.partial_hardware_flops += share * c.hardware_flops;
  }
  /// A collective over `mesh` (none when it is empty or moves nothing), listed in the op's row.
  void collective(std::vector<Event>& into, Event::Kind kind, const std::string& name,
                  std::vector<std::string> mesh, double bytes, Json& row, MeshAction::What what,
                  int operand = 0) {
    if (mesh.empty() || bytes <= 0) return;
    into.push_back(
        Event{kind, layer_ + "/" + name, 0, 0, 0, mesh, bytes, {MeshAction{at_, what, operand}}, {}, 0});
    into.back().kept_by_save_policy = !backward_ && !dots_.recomputed[i_];
    using C = sim::CollectiveOp;
    const auto blocking = blocking_collective(kind);
    // Weight-update sharding cuts pieces over all but the data dimension, whose cores hold the
    // same ones (Sharding::data_dim): the pieces are all-reduced over it after the reduce-scatter.
    const std::vector<std::string> cut = scatter_dims(mesh, s_.data_dim);
    const bool scatter = sharded_ && kind == Event::GradientAllReduce && !cut.empty();
    const C op = blocking ? blocking->op : scatter ? C::ReduceScatter : C::AllReduce;
    const std::string task = layer_ + "/" + name;
    row["collectives"].push_back(Json{{"what", name},
                                      {"mesh_dims", mesh},
                                      {"bytes", bytes},
                                      {"blocking", kind != Event::GradientAllReduce},
                                      {"task", collective_task_name(task, scatter ? cut : mesh, op)}});
    if (!scatter) return;
    double members = 1;
    for (const auto& m : cut) members *= s_.sizes.at(m);
    unshared_update_ += unkept_elements(bytes / s_.weight_bytes, members);
    row["collectives"].back()["allgather_task"] = collective_task_name(task, cut, C::AllGather);
    if (cut.size() < mesh.size() && s_.sizes.at(s_.data_dim) > 1)
      row["collectives"].back()["pieces_task"] =
          collective_task_name(task + " pieces", {s_.data_dim}, C::AllReduce);
  }
  /// The reduction of the matmul `mm` just computed (the last piece of the running compute
  /// event): where the stack overlaps them (core.tensor_collectives_overlap_matmuls), decomposed
  /// with it into a step per core of the group, each step's piece of the reduction behind the
  /// next step's piece of the matmul, so that only the last step's piece waits for the matmul's
  /// end (collective matmul: XLA's windowed einsum), when the matmul is large enough
  /// (core.collective_matmul_min_operand_bytes); otherwise one collective after it. The op's row
  /// lists it once, with its steps.
  void reduction_after(const NamedOp& op, const OpCost& mm, Event::Kind kind, const std::string& name,
                       const std::vector<std::string>& mesh, double bytes, MeshAction::What what) {
    std::vector<Event>& into = events();
    double n = 1;
    for (const auto& m : mesh) n *= s_.sizes.at(m);
    // The compiler's threshold: the matmul's largest operand (or result) on a core.
    const double largest =
        act_ * std::max({s_.local_elements(op.a), s_.local_elements(op.b), s_.local_elements(op.out)});
    const auto& core = cost_.core();
    if (!core.tensor_collectives_overlap_matmuls || largest < core.collective_matmul_min_operand_bytes ||
        n <= 1 || bytes <= 0 || into.empty() || into.back().kind != Event::Compute)
      return collective(into, kind, name, mesh, bytes, row(), what);
    const double rest = (n - 1) / n;
    Event tail{Event::Compute, layer_, 0, 0, 0, {}, 0, {}, {}, 0};
    add_cost(tail, mm, rest);          // the matmul's other steps...
    add_cost(into.back(), mm, -rest);  // ...leave the running event
    Event behind{kind, layer_ + "/" + name + " (behind its matmul)", 0, 0, 0, mesh, rest * bytes, {}, {}, 0};
    behind.kept_by_save_policy = !backward_ && !dots_.recomputed[i_];
    behind.behind = true;
    into.push_back(std::move(behind));
    into.push_back(std::move(tail));
    collective(into, kind, name, mesh, bytes / n, row(), what);
    row()["collectives"].back()["bytes"] = bytes;
    row()["collectives"].back()["overlapped_with_matmul_steps"] = n;
  }
  /// A weight gradient's reduction over `dims`, and over the replicas' dimensions
  /// (Sharding::replica_dim, data_dim).
  std::vector<std::string> with_replicas(std::vector<std::string> dims) const {
    for (const std::string* r : {&s_.replica_dim, &s_.data_dim})
      if (!r->empty() && !std::count(dims.begin(), dims.end(), *r))
        dims.insert(std::upper_bound(dims.begin(), dims.end(), *r), *r);
    return dims;
  }
  /// A weight's gradient reduced over the mesh dimensions splitting the dimensions of `from` it lacks.
  void weight_gradient(const NamedOp& op, const std::vector<const NamedTensor*>& from, Json& row) {
    if (op.b.tied) return;  // another layer's weight (a shared embedding table): reduced with the owner's
    collective(p_.backward, Event::GradientAllReduce, op.name + " weight gradient",
               with_replicas(s_.split_missing(from, op.b)), s_.local_elements(op.b) * s_.weight_bytes, row,
               A::SumWeightGradient);
  }
  /// A window op on a split image needs its neighbours' edge rows: (kernel - 1) / 2 of them
  /// from each side, for every split spatial dimension (the kernel's extent along it).
  void halos(std::vector<Event>& into, const NamedOp& op, const std::string& what, Json& row) {
    const int kh = op.window, kw = op.window_w > 0 ? op.window_w : op.window;
    if ((kh <= 1 && kw <= 1) || op.out.dims.size() < 4) return;
    std::int64_t b = 1, h = 1, w = 1, c = 1;
    for (const auto& d : op.a.dims) {
      if (d.name == "batch") b = s_.local(d);
      if (d.name == "height") h = s_.local(d);
      if (d.name == "width") w = s_.local(d);
      if (d.name == "channels") c = s_.local(d);
    }
    for (const auto& [dim, across, kernel] :
         {std::tuple{std::string("height"), w, kh}, std::tuple{std::string("width"), h, kw}}) {
      if (s_.split(dim) <= 1 || kernel <= 1) continue;
      const double bytes = double((kernel - 1) / 2) * double(across) * double(c) * double(b) * act_;
      into.push_back(Event{
          Event::Halo, layer_ + "/" + op.name + " " + what, 0, 0, 0, {s_.layout.at(dim)}, bytes, {}, {}, 0});
      row["collectives"].push_back(Json{{"what", op.name + " " + what},
                                        {"mesh_dims", {s_.layout.at(dim)}},
                                        {"bytes", bytes},
                                        {"blocking", true},
                                        {"halo", true}});
    }
  }
  /// Batch-norm statistics: per channel, summed over the split image (not over the batch,
  /// whose replicas keep their own statistics as in data parallelism).
  std::vector<std::string> spatial_mesh() const override {
    std::vector<std::string> mesh;
    for (const char* dim : {"height", "width"})
      if (s_.split(dim) > 1) mesh.push_back(s_.layout.at(dim));
    std::sort(mesh.begin(), mesh.end());
    mesh.erase(std::unique(mesh.begin(), mesh.end()), mesh.end());
    return mesh;
  }
  /// A batch norm's statistics (forward) or its gradient's sums (backward), per channel in fp32:
  /// summed over the split image and, with cross-replica batch norm, over the group of replicas
  /// along the batch's mesh dimension (the whole of it when the group spans it).
  void batch_norm_statistics(const NamedOp& op, bool backward, Json& row) {
    auto mesh = spatial_mesh();
    std::string block_dim;
    int block = 0;
    if (batch_norm_group_ > 1) {
      block_dim = s_.layout.at("batch");
      mesh.push_back(block_dim);
      std::sort(mesh.begin(), mesh.end());
      mesh.erase(std::unique(mesh.begin(), mesh.end()), mesh.end());
      if (batch_norm_group_ < s_.split("batch")) block = batch_norm_group_;
    }
    auto& into = backward ? p_.backward : p_.forward;
    const std::size_t before = into.size();
    collective(into, Event::BlockingAllReduce, op.name + (backward ? " gradient statistics" : " statistics"),
               mesh, 2.0 * 4.0 * double(op.b.dims.front().size), row,
               backward ? A::CombineGradientStatistics : A::CombineStatistics);
    if (into.size() == before) return;
    into.back().phase = backward ? "batch_norm_gradient_statistics" : "batch_norm_statistics";
    if (batch_norm_group_ <= 1) return;
    into.back().block_dim = block_dim;
    into.back().block = block;
    row["collectives"].back()["batch_norm_group"] = batch_norm_group_;
  }
  /// Attention over a split sequence: an operand reading every position (seq_k) of a tensor
  /// produced split along seq (keys, values; an encoder's output) is all-gathered over seq's
  /// mesh dimension first, and its gradient, summed over the queries' pieces, reduce-scattered back.
  bool gathered(std::size_t i, const NamedTensor& t) const {
    if (seq_mesh_.empty() || t.weight || !t.has("seq_k")) return false;
    const NamedTensor* producer = t.id.empty() && i > 0 ? &ops_[i - 1].out : nullptr;
    for (std::size_t j = 0; j < i && !t.id.empty(); ++j)
      if (ops_[j].out.id == t.id) producer = &ops_[j].out;
    return !(producer && producer->has("seq_k"));
  }
  std::vector<std::string> without_seq(std::vector<std::string> mesh) const {
    std::erase(mesh, seq_mesh_);
    return mesh;
  }
  bool produced_before(std::size_t i, const std::string& id) const {
    for (std::size_t j = 0; j < i && !id.empty(); ++j)
      if (ops_[j].out.id == id) return true;
    return false;
  }
  bool reads_model_input(std::size_t i) const { return model_input_ && i == 0; }

  // --- What an op's kind asks for (MeshLoweringSink), in the pass at hand ----------------------
  Json& row() { return p_.ops[std::size_t(at_)]; }
  std::vector<Event>& events() { return backward_ ? p_.backward : p_.forward; }
  double compute(const Op& op) override {
    return compute(events(), op, backward_ ? A::Backward : A::Forward).model_flops;
  }
  void compute_weight_gradient(const Op& op) override { compute(p_.backward, op, A::WeightGradient); }
  void sum_output(const std::string& what, const std::vector<std::string>& mesh, double bytes) override {
    collective(p_.forward, Event::BlockingAllReduce, ops_[i_].name + " " + what, mesh, bytes, row(),
               A::SumOutput);
  }
  void exchange(const std::string& what, const std::vector<std::string>& mesh, double bytes) override {
    collective(events(), Event::BlockingAllToAll, ops_[i_].name + " " + what, mesh, bytes, row(),
               A::Exchange);
  }
  void combine_statistics(const NamedOp& op) override {
    collective(events(), Event::BlockingAllReduce,
               op.name + (backward_ ? " gradient statistics" : " statistics"), {s_.layout.at(op.reduce_dim)},
               s_.statistics_bytes(op), row(),
               backward_ ? A::CombineGradientStatistics : A::CombineStatistics);
  }
  void batch_norm_statistics(const NamedOp& op) override { batch_norm_statistics(op, backward_, row()); }
  void halos(const NamedOp& op) override { halos(events(), op, backward_ ? "halo gradient" : "halo", row()); }
  void weight_gradient(const NamedOp& op, const std::vector<const NamedTensor*>& operands) override {
    weight_gradient(op, operands, row());
  }
  bool reads_model_input() const override { return reads_model_input(i_); }

  // --- Forward ----------------------------------------------------------------------------------
  /// What the op's weights add to the layer's.
  void record_weights(const NamedOp& op) {
    for (const auto& t : op.tensors()) {
      if (!t.weight) continue;
      p_.weight_elements += s_.local_elements(t);
      p_.total_weight_elements += t.elements();
      for (const auto& d : t.dims)
        if (s_.layout.count(d.name)) p_.weight_mesh_dims.insert(s_.layout.at(d.name));
      p_.weights.push_back(t);
    }
    if (op.b.tied) p_.tied_elements += s_.local_elements(op.b);
  }
  void forward(std::size_t i) {
    const NamedOp& op = ops_[i];
    at_ = int(p_.ops.size());
    p_.ops.push_back(Json{{"layer", layer_}, {"op", op.name}, {"collectives", Json::array()}});
    record_weights(op);
    backward_ = false;
    i_ = i;
    p_.ops.back()["local_forward_flops"] = op_kind(op).lower_forward(op, s_, act_, *this);
  }
  /// Operands read whole along a split sequence are gathered first; a split contraction leaves
  /// partial sums, all-reduced. Returns the local model FLOPs.
  double einsum_forward(const NamedOp& op, const Op& forward) override {
    for (int operand : {0, 1}) {
      const NamedTensor& t = operand ? op.b : op.a;
      if (gathered(i_, t))
        collective(p_.forward, Event::BlockingAllGather, op.name + " operand all-gather", {seq_mesh_},
                   s_.local_elements(t) * act_, row(), A::GatherOperand, operand);
    }
    const OpCost c = compute(p_.forward, forward, A::Forward);
    reduction_after(op, c, Event::BlockingAllReduce, op.name + " partial sums",
                    s_.split_missing({&op.a, &op.b}, op.out), s_.local_elements(op.out) * act_, A::SumOutput);
    return c.model_flops;
  }

  // --- Backward ---------------------------------------------------------------------------------
  /// Mesh-TensorFlow's lazy all-reduce: the partial input gradients of an activation several
  /// einsums read (the q, k and v projections of one layer norm's output) are added locally and
  /// all-reduced once, when the backward reaches the op that produced it.
  struct Deferred {
    int consumer;  // the op whose row lists the all-reduce (the last to add its part)
    std::string names;
    double bytes;
  };
  void flush_deferred(const NamedOp& op) {
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      if (op.out.id.empty() || it->first.first != op.out.id) {
        ++it;
        continue;
      }
      at_ = it->second.consumer;
      collective(p_.backward, Event::BlockingAllReduce,
                 op.out.id + " input gradient (" + it->second.names + ")", it->first.second, it->second.bytes,
                 p_.ops[std::size_t(at_)], A::SumInputGradient);
      it = deferred_.erase(it);
    }
  }
  void backward(std::size_t i) {
    const NamedOp& op = ops_[i];
    flush_deferred(op);
    at_ = int(i);
    backward_ = true;
    i_ = i;
    // What its backward computes again (flash attention's scores): time and hardware FLOPs, no
    // math of its own in functional mode (the host keeps them).
    for (const Op& again : op_kind(op).recomputed_in_backward(op, s_, act_)) {
      const OpCost c = cost_.cost(again);
      if (p_.backward.empty() || p_.backward.back().kind != Event::Compute)
        p_.backward.push_back(Event{Event::Compute, layer_, 0, 0, 0, {}, 0, {}, {}, 0});
      p_.backward.back().seconds += c.seconds;
      p_.backward.back().grid_seconds += c.grid_added_s;
      p_.backward.back().hardware_flops += c.hardware_flops;
    }
    op_kind(op).lower_backward(op, s_, act_, *this);
  }
  /// The input gradient (its partial sums reduced now, or deferred to the lazy all-reduce of an
  /// activation several einsums read), then the second operand's gradient and its reduction.
  void einsum_backward(const NamedOp& op, const Op& input_gradient, const Op& operand_gradient) override {
    const std::size_t i = i_;
    Json& row = this->row();
    const bool ga = gathered(i, op.a), gb = gathered(i, op.b);
    const bool needs_da = !op.a.weight && !reads_model_input(i);
    const auto over_a = needs_da ? s_.split_missing({&op.out, &op.b}, op.a) : std::vector<std::string>{};
    const OpCost da = compute(p_.backward, input_gradient, A::Backward, !over_a.empty());
    if (needs_da && !ga && !over_a.empty() && produced_before(i, op.a.id)) {
      auto [it, fresh] =
          deferred_.try_emplace({op.a.id, over_a}, Deferred{int(i), op.name, s_.local_elements(op.a) * act_});
      if (!fresh) {
        it->second.consumer = int(i);
        it->second.names = op.name + ", " + it->second.names;
      }
    } else if (needs_da && !ga) {
      reduction_after(op, da, Event::BlockingAllReduce, op.name + " input gradient", over_a,
                      s_.local_elements(op.a) * act_, A::SumInputGradient);
    } else if (needs_da) {
      collective(p_.backward, Event::BlockingAllReduce, op.name + " input gradient", without_seq(over_a),
                 s_.local_elements(op.a) * act_, row, A::SumInputGradient);
      collective(p_.backward, Event::BlockingReduceScatter, op.name + " input gradient scatter", {seq_mesh_},
                 s_.local_elements(op.a) * act_, row, A::ScatterOperandGradient, 0);
    }
    const auto over = s_.split_missing({&op.a, &op.out}, op.b);
    const OpCost db =
        compute(p_.backward, operand_gradient, A::WeightGradient, !op.b.weight && !over.empty());
    // A weight of another layer (a tied embedding table): its gradient joins the owner's, which
    // the owner's weight-gradient reduction reduces once with the rest.
    if (op.b.tied) return;
    if (!op.b.weight && !gb)  // an activation's gradient (attention's keys and values)
      return reduction_after(op, db, Event::BlockingAllReduce, op.name + " input gradient", over,
                             s_.local_elements(op.b) * act_, A::SumWeightGradient);
    collective(p_.backward, op.b.weight ? Event::GradientAllReduce : Event::BlockingAllReduce,
               op.name + (op.b.weight ? " weight gradient" : " input gradient"),
               op.b.weight ? with_replicas(gb ? without_seq(over) : over)
               : gb        ? without_seq(over)
                           : over,
               s_.local_elements(op.b) * (op.b.weight ? s_.weight_bytes : act_), row, A::SumWeightGradient);
    if (gb)
      collective(p_.backward, Event::BlockingReduceScatter, op.name + " operand gradient scatter",
                 {seq_mesh_}, s_.local_elements(op.b) * act_, row, A::ScatterOperandGradient, 1);
  }

  int batch_norm_group_;     ///< replicas along the batch's mesh dimension sharing batch-norm statistics
  const SavePolicy& saves_;  ///< the partial re-materialization whose recompute the events carry
  const std::vector<NamedOp>& ops_;
  const Sharding& s_;
  const CostModel& cost_;
  double act_;
  std::string layer_;
  bool model_input_, sharded_;
  std::string seq_mesh_;  ///< the mesh dimension splitting the sequence ("" when none does)
  LayerProgram p_;
  SavePlan dots_;               ///< what the save policy recomputes
  double unshared_update_ = 0;  ///< elements of reduce-scattered weights a core does not update
  int at_ = 0;                  ///< the op being lowered (its row in p_.ops)
  std::size_t i_ = 0;           ///< the op being lowered (in ops_)
  bool backward_ = false;       ///< lowering the backward pass
  std::map<std::pair<std::string, std::vector<std::string>>, Deferred>
      deferred_;  ///< (activation id, mesh dims)
};

}  // namespace

LayerProgram lower_layer(const std::vector<NamedOp>& ops, const Sharding& s, const CostModel& cost,
                         double act, const std::string& layer, bool model_input, bool sharded,
                         int batch_norm_group, const SavePolicy& saves) {
  return LayerLowering(ops, s, cost, act, layer, model_input, sharded, batch_norm_group, saves).run();
}

LayerProgram renamed(const LayerProgram& p, const std::string& from, const std::string& to) {
  LayerProgram out = p;
  out.ops = Json::array();
  for (auto* events : {&out.forward, &out.backward})
    for (Event& ev : *events)
      if (ev.name.compare(0, from.size(), from) == 0) ev.name = to + ev.name.substr(from.size());
  return out;
}

std::string dims_text(const NamedTensor& t) {
  std::string s = "[";
  for (std::size_t i = 0; i < t.dims.size(); ++i) s += (i ? ", " : "") + t.dims[i].name;
  return s + "]";
}

Json padded_dimensions(const Study& study, const std::map<std::string, std::string>& layout,
                       const std::map<std::string, int>& sizes) {
  Json padded = Json::object();
  for (const auto& layer : study.model.layers) {
    if (!layer.named_ops) continue;
    for (const auto& op : layer.named_ops(1))
      for (const auto& t : op.tensors())
        for (const auto& d : t.dims) {
          auto it = layout.find(d.name);
          if (it == layout.end() || Sharding::is_spatial(d.name) || !Sharding::may_pad(d.name)) continue;
          const int n = sizes.at(it->second);
          if (d.size % n == 0 || padded.contains(d.name)) continue;
          padded[d.name] = {{"size", d.size}, {"padded_to", (d.size + n - 1) / n * n}, {"cores", n}};
        }
  }
  return padded;
}

std::string input_split_over(const Study& study, const std::map<std::string, std::string>& layout,
                             const std::string& mesh_dim) {
  for (const auto& layer : study.model.layers) {
    if (!layer.named_ops) continue;
    const auto ops = layer.named_ops(1);
    if (ops.empty()) continue;
    for (const auto& d : ops.front().a.dims)
      if (auto it = layout.find(d.name); it != layout.end() && it->second == mesh_dim)
        return "layer " + layer.name + "'s input " + dims_text(ops.front().a) + " is split along " + d.name +
               " over \"" + mesh_dim + "\"";
  }
  return "";
}

void check_layout(const Study& study, const std::map<std::string, std::string>& layout,
                  const std::map<std::string, int>& sizes, const std::string& path, const Json& layout_json,
                  Problems& problems) {
  for (const auto& layer : study.model.layers) {
    if (layer.same_as >= 0) continue;  // the same ops as an earlier layer, checked there
    if (!layer.named_ops) {
      problems.add("model.kind", Json(study.model.kind),
                   "a model whose layers are described over named dimensions (transformer, mesh_lm, mlp, or "
                   "dense layers of sequential)");
      return;
    }
    for (const auto& op : layer.named_ops(study.batch)) {
      for (const auto& t : op.tensors()) {
        std::map<std::string, std::string> used;
        for (const auto& d : t.dims) {
          if (!layout.count(d.name)) continue;
          const std::string& mesh_dim = layout.at(d.name);
          if (used.count(mesh_dim)) {
            problems.add(path, layout_json,
                         "a layout where no tensor maps two of its dimensions to one mesh dimension: op " +
                             layer.name + "/" + op.name + " has a tensor " + dims_text(t) + " mapping both " +
                             used[mesh_dim] + " and " + d.name + " to " + mesh_dim);
            return;
          }
          used[mesh_dim] = d.name;
          if (d.size % sizes.at(mesh_dim) != 0 && !Sharding::may_pad(d.name)) {
            problems.add(path + "." + d.name, Json(mesh_dim),
                         "a mesh dimension dividing " + d.name + " (" + std::to_string(d.size) + ") in op " +
                             layer.name + "/" + op.name + ": " + mesh_dim + " has " +
                             std::to_string(sizes.at(mesh_dim)) + " cores");
            return;
          }
        }
      }
    }
  }
}

}  // namespace tpusim::mesh
