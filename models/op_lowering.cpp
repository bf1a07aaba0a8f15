#include "models/op_lowering.hpp"

#include <algorithm>

namespace tpusim {

namespace {

/// The first op at or after `i` that does not fuse into its producer.
std::size_t next_unfused(const std::vector<NamedOp>& ops, std::size_t i) {
  while (i < ops.size() && op_kind(ops[i]).fuses_into_producer()) ++i;
  return i;
}

}  // namespace

/// Local elements of the gradients an op's backward holds at once: its output gradient and its
/// operands' gradients (its kind's). Element-wise ops fuse into their neighbours and hold none of
/// their own; a loss none either: its gradient is what it keeps, and the op producing its input
/// reads that as its output gradient.
double gradients_in_flight(const std::vector<NamedOp>& ops, std::size_t i, const Sharding& s,
                           bool reads_model_input) {
  const NamedOp& op = ops[i];
  const NamedOpKind& kind = op_kind(op);
  if (kind.fuses_into_producer() || kind.is_loss(op)) return 0;
  const std::size_t next = next_unfused(ops, i + 1);
  const bool feeds_loss = next < ops.size() && op_kind(ops[next]).is_loss(ops[next]);
  const double out = feeds_loss ? 0.0 : s.stored_elements(op.out);
  return out + kind.operand_gradients(op, s, reads_model_input);
}

Op forward_op(const NamedOp& op, const Sharding& s, double act) { return op_kind(op).forward(op, s, act); }

Op input_gradient_op(const NamedOp& op, const Sharding& s, double act) {
  return op_kind(op).input_gradient(op, s, act);
}

std::optional<Op> operand_gradient_op(const NamedOp& op, const Sharding& s, double act) {
  return op_kind(op).operand_gradient(op, s, act);
}

double forward_transient(const std::vector<NamedOp>& ops, std::size_t i, const Sharding& s) {
  const NamedOp& op = ops[i];
  if (op_kind(op).fuses_into_producer()) return 0;  // in place
  // The previous op's output (this op's input) unless kept, and this op's output unless the next
  // op keeps it; element-wise successors fuse in and write nothing of their own.
  const std::size_t next = next_unfused(ops, i + 1);
  const bool reads_previous = i > 0 && op.a.id.empty() && !op.a.keep;
  // Kept: read and kept by the next op, or by a later op naming it. A loss's output is a loss
  // per row (its gradient is what it keeps).
  bool output_kept =
      (next < ops.size() && ops[next].a.id.empty() && ops[next].a.keep) || op_kind(op).is_loss(op);
  for (std::size_t j = i + 1; j < ops.size() && !op.out.id.empty() && !output_kept; ++j)
    output_kept = (ops[j].a.keep && ops[j].a.id == op.out.id) || (ops[j].b.keep && ops[j].b.id == op.out.id);
  return (reads_previous ? s.stored_elements(op.a) : 0.0) + (output_kept ? 0.0 : s.stored_elements(op.out));
}

double kept_bytes(const NamedOp& op, const Sharding& s, double act) {
  double kept = op_kind(op).kept_extra_bytes(op, s);
  for (const auto& t : op.tensors())
    if (t.keep) kept += s.local_elements(t) * act;
  return kept;
}

LayerMemory layer_memory(const std::vector<NamedOp>& ops, const Sharding& s, double act, bool model_input,
                         const SavePolicy& policy) {
  LayerMemory m;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const NamedOp& op = ops[i];
    m.kept_bytes += kept_bytes(op, s, act);
    m.backward_workspace_bytes =
        std::max(m.backward_workspace_bytes, gradients_in_flight(ops, i, s, model_input && i == 0) * act);
    m.workspace_bytes = std::max(m.workspace_bytes, forward_transient(ops, i, s) * act);
  }
  m.saved_output_bytes = save_plan(ops, s, act, policy).kept_bytes;
  return m;
}

namespace {

/// The op producing the activation an operand names (its predecessor's output when it names
/// none), or -1: the layer's input.
int producer(const std::vector<NamedOp>& ops, std::size_t i, const std::string& id) {
  if (id.empty()) return int(i) - 1;
  for (std::size_t j = i; j-- > 0;)
    if (ops[j].out.id == id) return int(j);
  return -1;
}

}  // namespace

SavePlan save_plan(const std::vector<NamedOp>& ops, const Sharding& s, double act, const SavePolicy& policy) {
  SavePlan plan;
  plan.recomputed.assign(ops.size(), false);
  std::vector<bool> kept(ops.size(), false);
  // An activation produced by op `p` that the backward (or a recompute) reads.
  std::function<void(int)> need = [&](int p) {
    if (p < 0 || kept[std::size_t(p)] || plan.recomputed[std::size_t(p)]) return;
    const NamedOp& op = ops[std::size_t(p)];
    if (policy.saves(op)) {
      kept[std::size_t(p)] = true;
      plan.kept_bytes += s.local_elements(op.out) * act;
      return;
    }
    plan.recomputed[std::size_t(p)] = true;
    if (!op_kind(op).reads_ids()) need(producer(ops, std::size_t(p), op.a.id));
    if (!op.b.weight && !op.b.dims.empty()) need(producer(ops, std::size_t(p), op.b.id));
    if (!op.skip.empty()) need(producer(ops, std::size_t(p), op.skip));
  };
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const NamedOp& op = ops[i];
    plan.kept_bytes += op_kind(op).kept_extra_bytes(op, s);
    if (op.a.keep && !op_kind(op).reads_ids()) need(producer(ops, i, op.a.id));
    if (op.b.keep && !op.b.weight) need(producer(ops, i, op.b.id));
    if (op.out.keep) need(int(i));
  }
  return plan;
}

double boundary_bytes(const std::vector<BoundaryTensor>& tensors, const Sharding& s) {
  double bytes = 0;
  for (const auto& t : tensors) bytes += s.local_elements(t.tensor) * t.bytes_per_element;
  return bytes;
}

LayerWork lower_work(const std::vector<NamedOp>& ops, double act, bool model_input,
                     const LayerBoundary& boundary, int lanes, double weight_bytes) {
  const Sharding s = Sharding::whole(lanes, weight_bytes);
  LayerWork w;
  const SavePlan dots = save_plan(ops, s, act, save_dots_policy());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const NamedOp& op = ops[i];
    const NamedOpKind& kind = op_kind(op);
    if (const auto c = kind.replica_statistics_channels(op)) w.batch_norm_channels.push_back(c);
    w.forward.push_back(kind.forward(op, s, act));
    if (dots.recomputed[i]) w.partial_forward.push_back(w.forward.back());
    // The model's input needs no gradient: some kinds skip theirs (a convolution's dx).
    for (auto& again : kind.recomputed_in_backward(op, s, act)) w.backward.push_back(std::move(again));
    if (!(model_input && i == 0 && !kind.input_gradient_of_model_input()))
      w.backward.push_back(kind.input_gradient(op, s, act));
    if (auto g = kind.operand_gradient(op, s, act)) w.backward.push_back(*g);
  }
  const LayerMemory m = layer_memory(ops, s, act, model_input, save_dots_policy());
  w.stash_bytes = m.kept_bytes;
  w.workspace_bytes = m.workspace_bytes;
  w.backward_workspace_bytes = m.backward_workspace_bytes;
  w.saved_output_bytes = m.saved_output_bytes;
  w.input_bytes = boundary_bytes(boundary.in, s);
  w.output_bytes = boundary_bytes(boundary.out, s);
  return w;
}

void derive_work(Layer& layer, double act, bool model_input, Boundary boundary) {
  layer.model_input = model_input;
  layer.boundary = boundary;
  layer.lower = [named = layer.named_ops, act, model_input, boundary = std::move(boundary)](
                    std::int64_t b, int lanes, double weight_bytes) {
    return lower_work(named(b), act, model_input, boundary(b), lanes, weight_bytes);
  };
}

}  // namespace tpusim
