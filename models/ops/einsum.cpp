// Einsum: a . b -> out over named dimensions (contracted: those of the inputs absent from the
// output), a (batched) matmul on the MXU; its backward is two more (da, db).
#include <algorithm>

#include "models/named_math.hpp"
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

named::Names names_of(const NamedTensor& t) {
  named::Names n;
  for (const auto& d : t.dims) n.push_back(d.name);
  return n;
}

named::Sizes sizes(const NamedOp& op) {
  named::Sizes size;
  for (const NamedTensor* t : {&op.a, &op.b, &op.out})
    for (const auto& dim : t->dims) size[dim.name] = dim.size;
  return size;
}

/// x . y -> z for `op`, with the shares of its products counted and run (causal attention).
Op matmul(const NamedOp& op, const std::string& name, const Sharding& s, const NamedTensor& x,
          const NamedTensor& y, const NamedTensor& z, double act) {
  Op m = local_matmul(name, s, x, y, z, act);
  m.counted_fraction = op.counted_fraction;
  m.computed_fraction = op.computed_fraction;
  m.kernel_block = op.kernel_block;
  return m;
}

class Einsum : public NamedOpKind {
 public:
  Op forward(const NamedOp& op, const Sharding& s, double act) const override {
    Op m = matmul(op, op.name, s, op.a, op.b, op.out, act);
    m.kernel_steps = op.out.on_chip;  // a fused kernel's scores: its grid steps are theirs
    return m;
  }
  Op input_gradient(const NamedOp& op, const Sharding& s, double act) const override {
    return matmul(op, op.name + "_da", s, op.out, op.b, op.a, act);
  }
  std::optional<Op> operand_gradient(const NamedOp& op, const Sharding& s, double act) const override {
    Op db = matmul(op, op.name + "_db", s, op.a, op.out, op.b, act);
    db.weight_gradient = op.b.weight;
    return db;
  }
  bool is_dot(const NamedOp& op) const override { return op.b.weight; }
  double operand_gradients(const NamedOp& op, const Sharding& s, bool) const override {
    return s.stored_elements(op.a) + (!op.b.weight && !op.b.tied ? s.stored_elements(op.b) : 0.0);
  }
  /// Flash attention's backward is two kernels (JAX's Pallas TPU kernel: one for the keys' and
  /// values' gradients, one for the queries'), each stepping through the grid and computing the
  /// scores, on chip only, again from q and k; the second also the probabilities' gradient
  /// (dO . V^T, the context's input gradient) again.
  std::vector<Op> recomputed_in_backward(const NamedOp& op, const Sharding& s, double act) const override {
    if (op.out.on_chip) return recomputed_by_each_backward_kernel(forward(op, s, act));
    return op.a.on_chip ? recomputed(input_gradient(op, s, act)) : std::vector<Op>{};
  }

  double lower_forward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    return m.einsum_forward(op, forward(op, s, act));
  }
  void lower_backward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    m.einsum_backward(op, input_gradient(op, s, act), *operand_gradient(op, s, act));
  }

  std::string missing_host_math(const NamedOp& op) const override {
    return op.b.dims.empty() ? "an einsum without a second operand" : "";
  }
  Tensor host_forward(const NamedOp& op, HostForward& f) const override {
    const Tensor& w = op.b.weight ? *f.weights : *f.b;
    return named::einsum(f.a, names_of(op.a), w, names_of(op.b), names_of(op.out), sizes(op));
  }
  void host_backward(const NamedOp& op, HostBackward& g) const override {
    const auto an = names_of(op.a), bn = names_of(op.b), on = names_of(op.out);
    const Tensor& y = op.b.weight ? *g.weights : *g.b;
    g.da = named::einsum(g.dy, on, y, bn, an, sizes(op));
    Tensor db = named::einsum(g.a, an, g.dy, on, bn, sizes(op));
    if (op.b.weight)
      named::add_into(*g.weight_grads, db);
    else
      g.db = std::move(db);
  }

  // On a mesh's shards: the local einsum of the core's pieces. A split contraction leaves partial
  // sums (the all-reduces after it complete them); an operand read whole along a split sequence
  // was all-gathered, and its gradient is reduce-scattered back to the pieces.
  std::string missing_shard_math(const NamedOp& op, const ShardSupport& s) const override {
    const auto an = names_of(op.a), bn = names_of(op.b), on = names_of(op.out);
    auto has = [](const named::Names& v, const std::string& x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    for (const auto& d : an)
      if (!has(bn, d) && !has(on, d)) return "a dimension summed out of one operand alone";
    for (const auto& d : on)
      if (!has(an, d) && !has(bn, d)) return "an output dimension from no operand";
    if (!s.second_operand && !op.b.weight) return "no second operand";
    return "";
  }
  bool reads_split_sequence_whole() const override { return true; }
  void shard_step(const NamedOp& op, ShardStep step, bool partial, ShardHost& h) const override {
    named::Sizes size;
    for (const NamedTensor* t : {&op.a, &op.b, &op.out}) {
      const ShardHost::Box b = h.box(*t);
      for (std::size_t i = 0; i < t->dims.size(); ++i) size[t->dims[i].name] = b.local[i];
    }
    const auto an = names_of(op.a), bn = names_of(op.b), on = names_of(op.out);
    const Tensor& B = op.b.weight ? *h.weight(0, false) : h.operand(1);
    auto part = [&](int which) {
      return h.reads_gathered(which) ? ShardHost::Part::OfGathered
             : partial               ? ShardHost::Part::Pending
                                     : ShardHost::Part::Whole;
    };
    if (step == ShardStep::Forward) {
      h.output() = named::einsum(h.operand(0), an, B, bn, on, size);
    } else if (step == ShardStep::Backward) {
      if (!h.produced(0)) return;  // the model's input needs no gradient
      h.add_gradient(0, named::einsum(h.output_gradient(), on, B, bn, an, size), part(0));
    } else {
      Tensor db = named::einsum(h.operand(0), an, h.output_gradient(), on, bn, size);
      if (op.b.weight)
        named::add_into(*h.weight(0, true), db);
      else
        h.add_gradient(1, std::move(db), part(1));
    }
  }
};

}  // namespace

std::unique_ptr<const NamedOpKind> make_einsum_kind() { return std::make_unique<Einsum>(); }

}  // namespace tpusim
