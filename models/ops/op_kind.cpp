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
    op.bytes += s.stored_elements(*t) * (t->weight ? kWeightBytes : act) * t->passes;
  return op;
}

std::vector<Op> recomputed(Op forward) {
  forward.name += "_recompute";
  forward.recompute = true;
  return {std::move(forward)};
}

Op norm_or_softmax(const NamedOp& op, const Sharding& s, double act, bool backward) {
  const std::string name = backward ? op.name + "_grad" : op.name;
  const auto pattern = op_kind(op).multipass(op, backward);
  return pattern ? multipass_op(name, s.local_elements(op.out), act, *pattern)
                 : vector_op(name, s.local_elements(op.out), 2, act, false);
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

}  // namespace tpusim
