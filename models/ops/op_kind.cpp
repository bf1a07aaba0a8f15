#include "models/ops/op_kind.hpp"

#include <cmath>
#include <stdexcept>

namespace tpusim {

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
  op.bytes = 0;
  for (const NamedTensor* t : {&x, &y, &z})
    op.bytes += s.stored_elements(*t) * (t->weight ? s.weight_bytes : act) * t->passes;
  op.quantizable = (x.weight || y.weight || z.weight) && !x.on_chip && !y.on_chip;
  std::size_t i = 0;
  for (const NamedTensor* t : {&x, &y})
    op.operands[i++] = MatmulOperand{s.stored_elements(*t), t->weight ? s.weight_bytes : act, t->passes};
  return op;
}

std::vector<Op> recomputed(Op forward) {
  forward.name += "_recompute";
  forward.recompute = true;
  return {std::move(forward)};
}

std::vector<Op> recomputed_by_each_backward_kernel(Op forward) {
  std::vector<Op> again = recomputed(std::move(forward));
  again.push_back(again.front());
  again[0].name += "_dkv";
  again[1].name += "_dq";
  return again;
}

Op norm_or_softmax(const NamedOp& op, const Sharding& s, double act, bool backward) {
  const std::string name = backward ? op.name + "_grad" : op.name;
  const auto pattern = op_kind(op).multipass(op, backward);
  if (!pattern) return vector_op(name, s.local_elements(op.out), 2, act, false);
  Op out = multipass_op(name, s.local_elements(op.out), act, *pattern);
  // RMSNorm has a layer norm's passes (its statistics, then the normalization) without the mean:
  // of the layer norm's operations per element the hardware files count (sum, sum of squares,
  // subtract the mean, multiply by 1/std, scale, shift and the fused activation: 8, the backward
  // twice as many), it leaves out the sum, the mean's subtraction and the shift: 5 of 8
  // (derivation from those counts).
  if (op.math == NamedOp::Math::RmsNorm) out.multipass_vpu_share = 5.0 / 8.0;
  return out;
}

Tensor xavier(const NamedOp& op, double fan_in, std::uint64_t seed, int index) {
  Tensor t(std::size_t(op.b.elements() / op.b.copies), 0.0f);
  const double fan_out = double(t.size()) / fan_in;
  const float bound = float(std::sqrt(6.0 / (fan_in + fan_out)));
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = bound * unit(mix(seed, std::uint64_t(index), i));
  return t;
}

double NamedOpKind::lower_forward(const NamedOp& op, const Sharding& s, double act,
                                  MeshLoweringSink& m) const {
  m.compute(forward(op, s, act));
  return 0;
}

void NamedOpKind::lower_backward(const NamedOp& op, const Sharding& s, double act,
                                 MeshLoweringSink& m) const {
  m.compute(input_gradient(op, s, act));
}

Tensor NamedOpKind::initial_weight(const NamedOp& op, int, std::uint64_t seed, int index) const {
  double fan_in = 1;
  for (const auto& d : op.b.dims)
    if (op.a.has(d.name)) fan_in *= double(d.size);
  return xavier(op, fan_in, seed, index);
}

Tensor NamedOpKind::host_forward(const NamedOp& op, HostForward&) const {
  throw std::logic_error("op " + op.name + " has no host math: " + missing_host_math(op));
}

void NamedOpKind::host_backward(const NamedOp& op, HostBackward&) const {
  throw std::logic_error("op " + op.name + " has no host math: " + missing_host_math(op));
}

std::int64_t ShardHost::Box::elements() const {
  std::int64_t n = 1;
  for (auto l : local) n *= l;
  return n;
}

namespace {

/// What a kind's whole-tensor math is handed for data on shards: the kinds run there through it
/// read none (lookups and the loss have their own shard math).
class NoData : public DataSource {
 public:
  std::vector<std::int32_t> targets(const Batch&) const override { return {}; }
};

/// The op at a core's local sizes.
NamedOp local_op(const NamedOp& op, const ShardHost& h) {
  NamedOp local = op;
  for (NamedTensor* t : {&local.a, &local.b, &local.out}) {
    const ShardHost::Box b = h.box(*t);
    for (std::size_t d = 0; d < t->dims.size(); ++d) t->dims[d].size = b.local[d];
  }
  return local;
}

}  // namespace

std::string NamedOpKind::missing_shard_math(const NamedOp& op, const ShardSupport& s) const {
  for (const NamedTensor* t : {&op.a, &op.b, &op.out})
    for (const auto& d : t->dims)
      if (d.name != "batch" && s.split(d.name))
        return "a " + op.kind + " with " + d.name + " split: no host math on such shards";
  return "";
}

void NamedOpKind::shard_step(const NamedOp& op, ShardStep step, bool, ShardHost& h) const {
  static const NoData no_data;
  static const Batch batch;
  const NamedOp local = local_op(op, h);
  Saved saved;
  if (step == ShardStep::Forward) {
    std::vector<Tensor>& extras = h.extras();
    extras.assign(std::size_t(saved_extras(local)), Tensor{});
    double loss = 0;
    HostForward in{h.operand(0),  h.produced(1) ? &h.operand(1) : nullptr,
                   h.skip(),      h.weight(0, false),
                   extras.data(), saved,
                   no_data,       batch,
                   loss};
    h.output() = host_forward(local, in);
    return;
  }
  if (!h.has_output_gradient() || !h.first_backward()) return;
  HostBackward g{h.operand(0),
                 h.produced(1) ? &h.operand(1) : nullptr,
                 h.output(),
                 h.weight(0, false),
                 h.extras().data(),
                 saved,
                 batch,
                 h.output_gradient(),
                 h.weight(0, true),
                 {},
                 {},
                 {}};
  host_backward(local, g);
  if (!g.dskip.empty()) h.add_gradient(2, std::move(g.dskip), ShardHost::Part::Whole);
  if (!g.da.empty()) h.add_gradient(0, std::move(g.da), ShardHost::Part::Whole);
  if (!g.db.empty()) h.add_gradient(1, std::move(g.db), ShardHost::Part::Whole);
}

void NamedOpKind::shard_combine(const NamedOp& op, bool, const std::vector<ShardHost*>&) const {
  throw std::logic_error("op " + op.name + " (" + op.kind + ") has no row statistics to combine");
}

}  // namespace tpusim
