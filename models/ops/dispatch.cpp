// Dispatch: a mixture-of-experts layer's routing of tokens to the experts' buffers, or back
// ("combine"): a -> out, the same values rearranged (tokens [batch, seq, d_model] to expert
// slots [experts, capacity, d_model] or the reverse). On a core it is one pass over both tensors
// (the gather or scatter of the tokens into their slots; its backward the reverse). Under a mesh
// layout that splits `experts` (the mesh dimension splitting the batch: each core holds its
// experts' slots for every core's tokens), the tokens travel: an all-to-all over that mesh
// dimension, forward and backward, each core's buffer its local expert slots. Experts not split
// (data parallelism, pipelines, a layout without "experts"): every core routes its own tokens to
// its own copy of every expert, no exchange. The routing itself (top-k gating, the capacity's
// dropped tokens) is modelled, not computed: functional mode refuses it.
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

/// The op's expert side: the slots [experts, capacity, d_model] (its output when it dispatches,
/// its input when it combines).
const NamedTensor& slots(const NamedOp& op) { return op.out.has("experts") ? op.out : op.a; }

/// The mesh dimension splitting the experts (none: not split, nothing travels).
std::vector<std::string> exchange_mesh(const NamedOp& op, const Sharding& s) {
  const auto it = s.layout.find("experts");
  if (!slots(op).has("experts") || it == s.layout.end()) return {};
  return {it->second};
}

class Dispatch : public NamedOpKind {
 public:
  Op forward(const NamedOp& op, const Sharding& s, double act) const override {
    return memory_op(op.name, (s.local_elements(op.a) + s.local_elements(op.out)) * act);
  }
  Op input_gradient(const NamedOp& op, const Sharding& s, double act) const override {
    return memory_op(op.name + "_grad", (s.local_elements(op.a) + s.local_elements(op.out)) * act);
  }
  double operand_gradients(const NamedOp& op, const Sharding& s, bool) const override {
    return s.local_elements(op.a);
  }

  double lower_forward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    m.compute(forward(op, s, act));
    // Each core's buffer is its experts' slots, filled from (or returned to) every core's tokens.
    m.exchange("tokens", exchange_mesh(op, s), s.local_elements(slots(op)) * act);
    return 0;
  }
  void lower_backward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    m.exchange("token gradients", exchange_mesh(op, s), s.local_elements(slots(op)) * act);
    m.compute(input_gradient(op, s, act));
  }

  std::string missing_host_math(const NamedOp&) const override {
    return "mixture-of-experts routing (modelled for time and memory, not computed)";
  }
};

}  // namespace

std::unique_ptr<const NamedOpKind> make_dispatch_kind() { return std::make_unique<Dispatch>(); }

}  // namespace tpusim
