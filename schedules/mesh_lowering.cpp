#include "schedules/mesh_lowering.hpp"

#include <algorithm>
#include <cmath>

namespace tpusim::mesh {

double Sharding::statistics_bytes(const NamedOp& op) const {
  if (split(op.reduce_dim) <= 1) return 0;
  for (const auto& d : op.a.dims)
    if (d.name == op.reduce_dim) return 2.0 * 4.0 * local_elements(op.a) / double(local(d));
  return 0;
}

std::vector<std::string> Sharding::split_missing(const std::vector<const NamedTensor*>& from,
                                                 const NamedTensor& to) const {
  std::set<std::string> mesh;
  for (const NamedTensor* t : from)
    for (const auto& d : t->dims)
      if (!to.has(d.name) && layout.count(d.name)) mesh.insert(layout.at(d.name));
  return {mesh.begin(), mesh.end()};
}

Op local_matmul(const std::string& name, const Sharding& s, const NamedTensor& x, const NamedTensor& y,
                const NamedTensor& z, double act) {
  std::int64_t batch = 1, m = 1, k = 1, n = 1;
  for (const auto& d : x.dims) {
    const std::int64_t l = s.local(d);
    if (y.has(d.name) && z.has(d.name))
      batch *= l;
    else if (z.has(d.name))
      m *= l;
    else if (y.has(d.name))
      k *= l;
  }
  for (const auto& d : y.dims)
    if (z.has(d.name) && !x.has(d.name)) n *= s.local(d);
  Op op = batched_matmul_op(name, batch, m, k, n, act);
  op.bytes = s.local_elements(x) * (x.weight ? kWeightBytes : act) +
             s.local_elements(y) * (y.weight ? kWeightBytes : act) +
             s.local_elements(z) * (z.weight ? kWeightBytes : act);
  return op;
}

std::string collective_task_name(const std::string& event, const std::vector<std::string>& mesh_dims,
                                 const char* op) {
  std::string dims;
  for (const auto& d : mesh_dims) dims += (dims.empty() ? "" : "+") + d;
  return std::string(op) + " " + event + " over " + dims;
}

double piece_elements(double elements, double count) { return std::ceil(elements / count); }

namespace {

/// Local elements of the gradients an op's backward holds at once: its output gradient and its
/// activation operands' gradients, as WorkBuilder counts them (element-wise ops fuse into their
/// neighbours and hold none of their own; normalizations, softmaxes and a gather only the
/// gradient of their output, which their input gradient overwrites; softmax cross-entropy none:
/// its gradient is what it keeps, and the op producing its logits reads that as its output
/// gradient).
double gradients_in_flight(const std::vector<NamedOp>& ops, std::size_t i, const Sharding& s,
                           bool reads_model_input) {
  using K = NamedOp::Kind;
  const NamedOp& op = ops[i];
  if (op.kind == K::Elementwise || op.math == NamedOp::Math::SoftmaxXent) return 0;
  std::size_t next = i + 1;
  while (next < ops.size() && ops[next].kind == K::Elementwise) ++next;
  const bool feeds_xent = next < ops.size() && ops[next].math == NamedOp::Math::SoftmaxXent;
  const double out = feeds_xent ? 0.0 : s.local_elements(op.out);
  if (op.kind == K::Gather || op.kind == K::Reduction || op.kind == K::BatchNorm) return out;
  double g = out + (op.kind == K::Conv && reads_model_input ? 0.0 : s.local_elements(op.a));
  if (op.kind == K::Einsum && !op.b.weight) g += s.local_elements(op.b);
  return g;
}

}  // namespace

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
  // A window op on a split image needs its neighbours' edge rows: (window - 1) / 2 of them
  // from each side, for every split spatial dimension.
  auto halos = [&](std::vector<Event>& into, const NamedOp& op, const std::string& what, Json& row) {
    if (op.window <= 1 || op.out.dims.size() < 4) return;
    std::int64_t b = 1, h = 1, w = 1, c = 1;
    for (const auto& d : op.a.dims) {
      if (d.name == "batch") b = s.local(d);
      if (d.name == "height") h = s.local(d);
      if (d.name == "width") w = s.local(d);
      if (d.name == "channels") c = s.local(d);
    }
    for (const auto& [dim, across] :
         {std::pair{std::string("height"), w}, std::pair{std::string("width"), h}}) {
      if (s.split(dim) <= 1) continue;
      const double bytes = double((op.window - 1) / 2) * double(across) * double(c) * double(b) * act;
      into.push_back(
          Event{Event::Halo, layer + "/" + op.name + " " + what, 0, 0, 0, {s.layout.at(dim)}, bytes, {}});
      row["collectives"].push_back(Json{{"what", op.name + " " + what},
                                        {"mesh_dims", {s.layout.at(dim)}},
                                        {"bytes", bytes},
                                        {"blocking", true},
                                        {"halo", true}});
    }
  };
  auto conv_shape = [&](const NamedOp& op) {
    ConvShape c;
    for (const auto& d : op.a.dims) {
      if (d.name == "batch") c.batch = s.local(d);
      if (d.name == "height") c.in_h = s.local(d);
      if (d.name == "width") c.in_w = s.local(d);
      if (d.name == "channels") c.in_channels = s.local(d);
    }
    c.kernel_h = c.kernel_w = op.window;
    c.stride = op.stride;
    c.out_channels = op.b.dims.back().size;
    return c;
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
  // Normalizations and softmaxes run as the core's multi-pass kernels; softmax cross-entropy's
  // gradient (probabilities minus the one-hot targets) is one element-wise pass.
  auto norm_or_softmax = [&](const NamedOp& op, bool backward) {
    const std::string name = backward ? op.name + "_grad" : op.name;
    const auto pattern = multipass_of(op, backward);
    return pattern ? multipass_op(name, s.local_elements(op.out), act, *pattern)
                   : vector_op(name, s.local_elements(op.out), 2, act, false);
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
        flops = compute(p.forward, local_matmul(op.name, s, op.a, op.b, op.out, act), A::Forward).model_flops;
        collective(p.forward, Event::BlockingAllReduce, op.name + " partial sums",
                   s.split_missing({&op.a, &op.b}, op.out), s.local_elements(op.out) * act, row,
                   A::SumOutput);
        break;
      }
      case NamedOp::Kind::Elementwise:
        compute(p.forward, vector_op(op.name, s.local_elements(op.out), op.ops, act, true), A::Forward);
        break;
      case NamedOp::Kind::Reduction: {
        compute(p.forward, norm_or_softmax(op, false), A::Forward);
        if (s.statistics_bytes(op) > 0)
          collective(p.forward, Event::BlockingAllReduce, op.name + " statistics",
                     {s.layout.at(op.reduce_dim)}, s.statistics_bytes(op), row, A::CombineStatistics);
        break;
      }
      case NamedOp::Kind::Conv:
        halos(p.forward, op, "halo", row);
        flops =
            compute(p.forward, conv_op(op.name, conv_shape(op), act, kWeightBytes), A::Forward).model_flops;
        break;
      case NamedOp::Kind::BatchNorm:
        compute(p.forward, norm_or_softmax(op, false), A::Forward);
        collective(p.forward, Event::BlockingAllReduce, op.name + " statistics", spatial_mesh(),
                   2.0 * 4.0 * double(op.b.dims.front().size), row, A::CombineStatistics);
        break;
      case NamedOp::Kind::Pool:
        if (op.out.dims.size() < 4) {  // global: partial sums over the split image
          compute(p.forward, vector_op(op.name, s.local_elements(op.a), 1, act, false), A::Forward);
          collective(p.forward, Event::BlockingAllReduce, op.name + " partial sums", spatial_mesh(),
                     s.local_elements(op.out) * act, row, A::SumOutput);
        } else {
          halos(p.forward, op, "halo", row);
          compute(p.forward, vector_op(op.name, s.local_elements(op.out), op.ops, act, false), A::Forward);
        }
        break;
      case NamedOp::Kind::Gather:
        compute(p.forward, memory_op(op.name, s.local_elements(op.out) * (kWeightBytes + act)), A::Forward);
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
        compute(p.backward, local_matmul(op.name + "_da", s, op.out, op.b, op.a, act), A::Backward,
                !over_a.empty());
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
        Op db = local_matmul(op.name + "_db", s, op.a, op.out, op.b, act);
        db.weight_gradient = op.b.weight;
        compute(p.backward, db, A::WeightGradient, !op.b.weight && !over.empty());
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
        compute(p.backward, vector_op(op.name + "_grad", s.local_elements(op.out), op.ops, act, true),
                A::Backward);
        if (!op.b.dims.empty())
          collective(p.backward, Event::GradientAllReduce, op.name + " weight gradient",
                     s.split_missing({&op.a}, op.b), s.local_elements(op.b) * kWeightBytes, row,
                     A::SumWeightGradient);
        break;
      case NamedOp::Kind::Reduction: {
        compute(p.backward, norm_or_softmax(op, true), A::Backward);
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
        const ConvShape c = conv_shape(op);
        if (!(model_input && i == 0)) {
          compute(p.backward, conv_input_grad_op(op.name + "_dx", c, act, kWeightBytes), A::Backward);
          halos(p.backward, op, "halo gradient", row);
        }
        Op dw = conv_weight_grad_op(op.name + "_dw", c, act, kWeightBytes);
        compute(p.backward, dw, A::WeightGradient);
        collective(p.backward, Event::GradientAllReduce, op.name + " weight gradient",
                   s.split_missing({&op.a, &op.out}, op.b), s.local_elements(op.b) * kWeightBytes, row,
                   A::SumWeightGradient);
        break;
      }
      case NamedOp::Kind::BatchNorm:
        compute(p.backward, norm_or_softmax(op, true), A::Backward);
        collective(p.backward, Event::BlockingAllReduce, op.name + " gradient statistics", spatial_mesh(),
                   2.0 * 4.0 * double(op.b.dims.front().size), row, A::CombineGradientStatistics);
        collective(p.backward, Event::GradientAllReduce, op.name + " weight gradient",
                   s.split_missing({&op.a}, op.b), s.local_elements(op.b) * kWeightBytes, row,
                   A::SumWeightGradient);
        break;
      case NamedOp::Kind::Pool:
        compute(p.backward, vector_op(op.name + "_grad", s.local_elements(op.a), 2, act, false), A::Backward);
        if (op.out.dims.size() == 4) halos(p.backward, op, "halo gradient", row);
        break;
      case NamedOp::Kind::Gather:
        compute(p.backward,
                memory_op(op.name + "_scatter_add",
                          s.local_elements(op.b) * kWeightBytes + s.local_elements(op.out) * act),
                A::Backward);
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

}  // namespace tpusim::mesh
