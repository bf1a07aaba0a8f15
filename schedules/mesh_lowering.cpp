#include "schedules/mesh_lowering.hpp"

#include <algorithm>
#include <cmath>

namespace tpusim::mesh {

std::string collective_task_name(const std::string& event, const std::vector<std::string>& mesh_dims,
                                 const char* op) {
  std::string dims;
  for (const auto& d : mesh_dims) dims += (dims.empty() ? "" : "+") + d;
  return std::string(op) + " " + event + " over " + dims;
}

double piece_elements(double elements, double count) { return std::ceil(elements / count); }

double update_fraction(const LayerProgram& p) {
  return p.total_weight_elements > 0 ? p.update_elements / p.total_weight_elements : 0;
}

ResidentShards resident_shards(const LayerProgram& p, double slot_elements) {
  return {kWeightBytes * p.weight_elements, kWeightBytes * slot_elements * update_fraction(p)};
}

LayerProgram lower_layer(const std::vector<NamedOp>& ops, const Sharding& s, const CostModel& cost,
                         double act, const std::string& layer, bool model_input, bool sharded) {
  LayerProgram p;
  double unshared_update = 0;  // elements of reduce-scattered weights a core does not update
  int at = 0;                  // the op being lowered
  auto compute = [&](std::vector<Event>& into, const Op& op, MeshAction::What what, bool partial = false) {
    const OpCost c = cost.cost(op);
    if (into.empty() || into.back().kind != Event::Compute)
      into.push_back(Event{Event::Compute, layer, 0, 0, 0, {}, 0, {}});
    into.back().actions.push_back(MeshAction{at, what, 0, partial});
    into.back().seconds += c.seconds;
    into.back().model_flops += c.model_flops;
    into.back().hardware_flops += c.hardware_flops;
    return c;
  };
  auto collective = [&](std::vector<Event>& into, Event::Kind kind, const std::string& name,
                        std::vector<std::string> mesh, double bytes, Json& row, MeshAction::What what,
                        int operand = 0) {
    if (mesh.empty() || bytes <= 0) return;
    into.push_back(Event{kind, layer + "/" + name, 0, 0, 0, mesh, bytes, {MeshAction{at, what, operand}}});
    const bool scatter =
        (sharded && kind == Event::GradientAllReduce) || kind == Event::BlockingReduceScatter;
    row["collectives"].push_back(
        Json{{"what", name},
             {"mesh_dims", mesh},
             {"bytes", bytes},
             {"blocking", kind != Event::GradientAllReduce},
             {"task", collective_task_name(layer + "/" + name, mesh,
                                           kind == Event::BlockingAllGather ? "all-gather"
                                           : scatter                        ? "reduce-scatter"
                                                                            : "all-reduce")}});
    if (sharded && kind == Event::GradientAllReduce) {
      double members = 1;
      for (const auto& m : mesh) members *= s.sizes.at(m);
      const double local = bytes / kWeightBytes;
      unshared_update += local - piece_elements(local, members);
      row["collectives"].back()["allgather_task"] =
          collective_task_name(layer + "/" + name, mesh, "all-gather");
    }
  };
  // A window op on a split image needs its neighbours' edge rows: (kernel - 1) / 2 of them
  // from each side, for every split spatial dimension (the kernel's extent along it).
  auto halos = [&](std::vector<Event>& into, const NamedOp& op, const std::string& what, Json& row) {
    const int kh = op.window, kw = op.window_w > 0 ? op.window_w : op.window;
    if ((kh <= 1 && kw <= 1) || op.out.dims.size() < 4) return;
    std::int64_t b = 1, h = 1, w = 1, c = 1;
    for (const auto& d : op.a.dims) {
      if (d.name == "batch") b = s.local(d);
      if (d.name == "height") h = s.local(d);
      if (d.name == "width") w = s.local(d);
      if (d.name == "channels") c = s.local(d);
    }
    for (const auto& [dim, across, kernel] :
         {std::tuple{std::string("height"), w, kh}, std::tuple{std::string("width"), h, kw}}) {
      if (s.split(dim) <= 1 || kernel <= 1) continue;
      const double bytes = double((kernel - 1) / 2) * double(across) * double(c) * double(b) * act;
      into.push_back(
          Event{Event::Halo, layer + "/" + op.name + " " + what, 0, 0, 0, {s.layout.at(dim)}, bytes, {}});
      row["collectives"].push_back(Json{{"what", op.name + " " + what},
                                        {"mesh_dims", {s.layout.at(dim)}},
                                        {"bytes", bytes},
                                        {"blocking", true},
                                        {"halo", true}});
    }
  };
  // Batch-norm statistics: per channel, summed over the split image (not over the batch,
  // whose replicas keep their own statistics as in data parallelism).
  auto spatial_mesh = [&]() {
    std::vector<std::string> mesh;
    for (const char* dim : {"height", "width"})
      if (s.split(dim) > 1) mesh.push_back(s.layout.at(dim));
    std::sort(mesh.begin(), mesh.end());
    mesh.erase(std::unique(mesh.begin(), mesh.end()), mesh.end());
    return mesh;
  };
  // Attention over a split sequence: an operand reading every position (seq_k) of a tensor
  // produced split along seq (keys, values; an encoder's output) is all-gathered over seq's
  // mesh dimension first, and its gradient, summed over the queries' pieces, reduce-scattered back.
  const std::string seq_mesh = s.split("seq") > 1 ? s.layout.at("seq") : "";
  auto gathered = [&](std::size_t i, const NamedTensor& t) {
    if (seq_mesh.empty() || t.weight || !t.has("seq_k")) return false;
    const NamedTensor* producer = t.id.empty() && i > 0 ? &ops[i - 1].out : nullptr;
    for (std::size_t j = 0; j < i && !t.id.empty(); ++j)
      if (ops[j].out.id == t.id) producer = &ops[j].out;
    return !(producer && producer->has("seq_k"));
  };
  auto without_seq = [&](std::vector<std::string> mesh) {
    std::erase(mesh, seq_mesh);
    return mesh;
  };
  // Forward.
  using A = MeshAction;
  for (const auto& op : ops) {
    at = int(p.ops.size());
    Json row{{"layer", layer}, {"op", op.name}, {"collectives", Json::array()}};
    for (const auto& t : op.tensors()) {
      if (t.keep) p.kept_bytes += s.local_elements(t) * act;
      if (t.weight) {
        p.weight_elements += s.local_elements(t);
        p.total_weight_elements += t.elements();
        for (const auto& d : t.dims)
          if (s.layout.count(d.name)) p.weight_mesh_dims.insert(s.layout.at(d.name));
        p.weights.push_back(t);
      }
    }
    double flops = 0;
    switch (op.kind) {
      case NamedOp::Kind::Einsum: {
        for (int operand : {0, 1}) {
          const NamedTensor& t = operand ? op.b : op.a;
          if (gathered(std::size_t(at), t))
            collective(p.forward, Event::BlockingAllGather, op.name + " operand all-gather", {seq_mesh},
                       s.local_elements(t) * act, row, A::GatherOperand, operand);
        }
        flops = compute(p.forward, forward_op(op, s, act), A::Forward).model_flops;
        collective(p.forward, Event::BlockingAllReduce, op.name + " partial sums",
                   s.split_missing({&op.a, &op.b}, op.out), s.local_elements(op.out) * act, row,
                   A::SumOutput);
        break;
      }
      case NamedOp::Kind::Elementwise:
        compute(p.forward, forward_op(op, s, act), A::Forward);
        break;
      case NamedOp::Kind::Reduction: {
        compute(p.forward, forward_op(op, s, act), A::Forward);
        if (s.statistics_bytes(op) > 0)
          collective(p.forward, Event::BlockingAllReduce, op.name + " statistics",
                     {s.layout.at(op.reduce_dim)}, s.statistics_bytes(op), row, A::CombineStatistics);
        break;
      }
      case NamedOp::Kind::Conv:
        halos(p.forward, op, "halo", row);
        flops = compute(p.forward, forward_op(op, s, act), A::Forward).model_flops;
        break;
      case NamedOp::Kind::BatchNorm:
        compute(p.forward, forward_op(op, s, act), A::Forward);
        collective(p.forward, Event::BlockingAllReduce, op.name + " statistics", spatial_mesh(),
                   2.0 * 4.0 * double(op.b.dims.front().size), row, A::CombineStatistics);
        break;
      case NamedOp::Kind::Pool:
        if (op.out.dims.size() < 4) {  // global: partial sums over the split image
          compute(p.forward, forward_op(op, s, act), A::Forward);
          collective(p.forward, Event::BlockingAllReduce, op.name + " partial sums", spatial_mesh(),
                     s.local_elements(op.out) * act, row, A::SumOutput);
        } else {
          halos(p.forward, op, "halo", row);
          compute(p.forward, forward_op(op, s, act), A::Forward);
        }
        break;
      case NamedOp::Kind::Gather:
        compute(p.forward, forward_op(op, s, act), A::Forward);
        // A split table gives each core the rows it holds (zeros elsewhere): summed over the split.
        collective(p.forward, Event::BlockingAllReduce, op.name + " rows", s.split_missing({&op.b}, op.out),
                   s.local_elements(op.out) * act, row, A::SumOutput);
        break;
    }
    row["local_forward_flops"] = flops;
    p.ops.push_back(std::move(row));
  }
  // Mesh-TensorFlow's lazy all-reduce: the partial input gradients of an activation several
  // einsums read (the q, k and v projections of one layer norm's output) are added locally and
  // all-reduced once, when the backward reaches the op that produced it.
  struct Deferred {
    int consumer;  // the op whose row lists the all-reduce (the last to add its part)
    std::string names;
    double bytes;
  };
  std::map<std::pair<std::string, std::vector<std::string>>, Deferred>
      deferred;  // (activation id, mesh dims)
  auto produced_before = [&](std::size_t i, const std::string& id) {
    for (std::size_t j = 0; j < i && !id.empty(); ++j)
      if (ops[j].out.id == id) return true;
    return false;
  };
  // Backward, ops in reverse.
  for (std::size_t i = ops.size(); i-- > 0;) {
    const NamedOp& op = ops[i];
    p.backward_workspace_bytes =
        std::max(p.backward_workspace_bytes, gradients_in_flight(ops, i, s, model_input && i == 0) * act);
    for (auto it = deferred.begin(); it != deferred.end();) {
      if (op.out.id.empty() || it->first.first != op.out.id) {
        ++it;
        continue;
      }
      at = it->second.consumer;
      collective(p.backward, Event::BlockingAllReduce,
                 op.out.id + " input gradient (" + it->second.names + ")", it->first.second, it->second.bytes,
                 p.ops[std::size_t(at)], A::SumInputGradient);
      it = deferred.erase(it);
    }
    at = int(i);
    Json& row = p.ops[i];
    switch (op.kind) {
      case NamedOp::Kind::Einsum: {
        const bool ga = gathered(i, op.a), gb = gathered(i, op.b);
        const bool needs_da = !op.a.weight && !(model_input && i == 0);
        const auto over_a = needs_da ? s.split_missing({&op.out, &op.b}, op.a) : std::vector<std::string>{};
        compute(p.backward, input_gradient_op(op, s, act), A::Backward, !over_a.empty());
        if (needs_da && !ga && !over_a.empty() && produced_before(i, op.a.id)) {
          auto [it, fresh] = deferred.try_emplace({op.a.id, over_a},
                                                  Deferred{int(i), op.name, s.local_elements(op.a) * act});
          if (!fresh) {
            it->second.consumer = int(i);
            it->second.names = op.name + ", " + it->second.names;
          }
        } else if (needs_da) {
          collective(p.backward, Event::BlockingAllReduce, op.name + " input gradient",
                     ga ? without_seq(over_a) : over_a, s.local_elements(op.a) * act, row,
                     A::SumInputGradient);
          if (ga)
            collective(p.backward, Event::BlockingReduceScatter, op.name + " input gradient scatter",
                       {seq_mesh}, s.local_elements(op.a) * act, row, A::ScatterOperandGradient, 0);
        }
        const auto over = s.split_missing({&op.a, &op.out}, op.b);
        compute(p.backward, *operand_gradient_op(op, s, act), A::WeightGradient,
                !op.b.weight && !over.empty());
        collective(p.backward, op.b.weight ? Event::GradientAllReduce : Event::BlockingAllReduce,
                   op.name + (op.b.weight ? " weight gradient" : " input gradient"),
                   gb ? without_seq(over) : over, s.local_elements(op.b) * (op.b.weight ? kWeightBytes : act),
                   row, A::SumWeightGradient);
        if (gb)
          collective(p.backward, Event::BlockingReduceScatter, op.name + " operand gradient scatter",
                     {seq_mesh}, s.local_elements(op.b) * act, row, A::ScatterOperandGradient, 1);
        break;
      }
      case NamedOp::Kind::Elementwise:
        compute(p.backward, input_gradient_op(op, s, act), A::Backward);
        if (!op.b.dims.empty())
          collective(p.backward, Event::GradientAllReduce, op.name + " weight gradient",
                     s.split_missing({&op.a}, op.b), s.local_elements(op.b) * kWeightBytes, row,
                     A::SumWeightGradient);
        break;
      case NamedOp::Kind::Reduction: {
        compute(p.backward, input_gradient_op(op, s, act), A::Backward);
        // Softmax cross-entropy's gradient needs only the forward's statistics; a normalization's
        // needs its gradient's row sums.
        if (s.statistics_bytes(op) > 0 && op.math != NamedOp::Math::SoftmaxXent)
          collective(p.backward, Event::BlockingAllReduce, op.name + " gradient statistics",
                     {s.layout.at(op.reduce_dim)}, s.statistics_bytes(op), row, A::CombineGradientStatistics);
        if (!op.b.dims.empty())
          collective(p.backward, Event::GradientAllReduce, op.name + " weight gradient",
                     s.split_missing({&op.a}, op.b), s.local_elements(op.b) * kWeightBytes, row,
                     A::SumWeightGradient);
        break;
      }
      case NamedOp::Kind::Conv: {
        if (!(model_input && i == 0)) {
          compute(p.backward, input_gradient_op(op, s, act), A::Backward);
          halos(p.backward, op, "halo gradient", row);
        }
        compute(p.backward, *operand_gradient_op(op, s, act), A::WeightGradient);
        collective(p.backward, Event::GradientAllReduce, op.name + " weight gradient",
                   s.split_missing({&op.a, &op.out}, op.b), s.local_elements(op.b) * kWeightBytes, row,
                   A::SumWeightGradient);
        break;
      }
      case NamedOp::Kind::BatchNorm:
        compute(p.backward, input_gradient_op(op, s, act), A::Backward);
        collective(p.backward, Event::BlockingAllReduce, op.name + " gradient statistics", spatial_mesh(),
                   2.0 * 4.0 * double(op.b.dims.front().size), row, A::CombineGradientStatistics);
        collective(p.backward, Event::GradientAllReduce, op.name + " weight gradient",
                   s.split_missing({&op.a}, op.b), s.local_elements(op.b) * kWeightBytes, row,
                   A::SumWeightGradient);
        break;
      case NamedOp::Kind::Pool:
        compute(p.backward, input_gradient_op(op, s, act), A::Backward);
        if (op.out.dims.size() == 4) halos(p.backward, op, "halo gradient", row);
        break;
      case NamedOp::Kind::Gather:
        compute(p.backward, input_gradient_op(op, s, act), A::Backward);
        collective(p.backward, Event::GradientAllReduce, op.name + " weight gradient",
                   s.split_missing({&op.a}, op.b), s.local_elements(op.b) * kWeightBytes, row,
                   A::SumWeightGradient);
        break;
    }
  }
  p.update_elements = p.weight_elements - unshared_update;
  return p;
}

std::string dims_text(const NamedTensor& t) {
  std::string s = "[";
  for (std::size_t i = 0; i < t.dims.size(); ++i) s += (i ? ", " : "") + t.dims[i].name;
  return s + "]";
}

void check_layout(const Study& study, const std::map<std::string, std::string>& layout,
                  const std::map<std::string, int>& sizes, const std::string& path, const Json& layout_json,
                  Problems& problems) {
  for (const auto& layer : study.model.layers) {
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
          if (d.size % sizes.at(mesh_dim) != 0 && d.name != "height" && d.name != "width") {
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
