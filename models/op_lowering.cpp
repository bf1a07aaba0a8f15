#include "models/op_lowering.hpp"

#include <algorithm>
#include <set>

namespace tpusim {

const Sharding& Sharding::none() {
  static const std::map<std::string, std::string> no_layout;
  static const std::map<std::string, int> no_sizes;
  static const Sharding unsharded{no_layout, no_sizes};
  return unsharded;
}

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

/// Local elements of the gradients an op's backward holds at once: its output gradient and its
/// activation operands' gradients (element-wise ops fuse into their
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
  // A gather from an activation (picked rows) scatters its rows' gradients into a gradient of the
  // whole; from a table, into the table's weight gradient.
  if (op.kind == K::Gather) return out + (op.b.weight || op.b.tied ? 0.0 : s.local_elements(op.b));
  if (op.kind == K::Reduction || op.kind == K::BatchNorm) return out;
  double g = out + (op.kind == K::Conv && reads_model_input ? 0.0 : s.local_elements(op.a));
  if (op.kind == K::Einsum && !op.b.weight && !op.b.tied) g += s.local_elements(op.b);
  return g;
}

ConvShape conv_shape(const NamedOp& op, const Sharding& s) {
  ConvShape c;
  for (const auto& d : op.a.dims) {
    if (d.name == "batch") c.batch = s.local(d);
    if (d.name == "height") c.in_h = s.local(d);
    if (d.name == "width") c.in_w = s.local(d);
    if (d.name == "channels") c.in_channels = s.local(d);
  }
  c.kernel_h = op.window;
  c.kernel_w = op.window_w > 0 ? op.window_w : op.window;
  c.valid = op.valid;
  c.stride = op.stride;
  c.out_channels = op.b.dims.back().size;
  return c;
}

namespace {

constexpr double kIdBytes = 4;  ///< an int32 token id or position

/// Bytes per element of a gather's table: fp32 master weights, or picked activations.
double table_bytes(const NamedTensor& table, double act) {
  return table.weight || table.tied ? kWeightBytes : act;
}

/// Normalizations and softmaxes run as the core's multi-pass kernels; softmax cross-entropy's
/// gradient (probabilities minus the one-hot targets) is one element-wise pass.
Op norm_or_softmax(const NamedOp& op, const Sharding& s, double act, bool backward) {
  const std::string name = backward ? op.name + "_grad" : op.name;
  const auto pattern = multipass_of(op, backward);
  return pattern ? multipass_op(name, s.local_elements(op.out), act, *pattern)
                 : vector_op(name, s.local_elements(op.out), 2, act, false);
}

}  // namespace

Op forward_op(const NamedOp& op, const Sharding& s, double act) {
  using K = NamedOp::Kind;
  switch (op.kind) {
    case K::Einsum:
      return local_matmul(op.name, s, op.a, op.b, op.out, act);
    case K::Elementwise:
      if (op.math == NamedOp::Math::Dropout) {
        // Fused with its producer but for the mask it writes for the backward: a pass of its own.
        Op mask = vector_op(op.name, s.local_elements(op.out), op.ops, act, false);
        mask.random_numbers_per_element = 1;
        mask.bytes = s.local_elements(op.out) * act;
        return mask;
      }
      return vector_op(op.name, s.local_elements(op.out), op.ops, act, true);
    case K::Reduction:
    case K::BatchNorm:
      return norm_or_softmax(op, s, act, false);
    case K::Conv:
      return conv_op(op.name, conv_shape(op, s), act, kWeightBytes);
    case K::Pool: {
      // `ops` per output over its window (global: one add per input element); it reads its
      // input and writes its output.
      const bool global = op.out.dims.size() < 4;
      Op pool = global ? vector_op(op.name, s.local_elements(op.a), 1, act, false)
                       : vector_op(op.name, s.local_elements(op.out), op.ops, act, false);
      pool.bytes = (s.local_elements(op.a) + s.local_elements(op.out)) * act;
      return pool;
    }
    case K::Gather:  // the picked rows read and written, and their ids
      return memory_op(op.name, s.local_elements(op.out) * (table_bytes(op.b, act) + act) +
                                    s.local_elements(op.a) * kIdBytes);
  }
  return {};
}

Op input_gradient_op(const NamedOp& op, const Sharding& s, double act) {
  using K = NamedOp::Kind;
  switch (op.kind) {
    case K::Einsum:
      return local_matmul(op.name + "_da", s, op.out, op.b, op.a, act);
    case K::Elementwise: {
      const double ops = op.backward_ops > 0 ? op.backward_ops : op.ops;
      if (op.math == NamedOp::Math::Dropout) {  // reads the kept mask
        Op mask = vector_op(op.name + "_grad", s.local_elements(op.out), ops, act, false);
        mask.bytes = s.local_elements(op.out) * act;
        return mask;
      }
      return vector_op(op.name + "_grad", s.local_elements(op.out), ops, act, true);
    }
    case K::Reduction:
    case K::BatchNorm:
      return norm_or_softmax(op, s, act, true);
    case K::Conv:
      return conv_input_grad_op(op.name + "_dx", conv_shape(op, s), act, kWeightBytes);
    case K::Pool: {
      // Reads the output gradient, writes the input's; a max pool finds each window's maximum
      // again in its (recomputed) input: one read more.
      Op grad = vector_op(op.name + "_grad", s.local_elements(op.a), 2, act, false);
      const double reads = op.math == NamedOp::Math::MaxPool ? 2 : 1;
      grad.bytes = (s.local_elements(op.a) * reads + s.local_elements(op.out)) * act;
      return grad;
    }
    case K::Gather: {  // the rows' gradients scattered into a dense gradient of the whole table
      Op grad = memory_op(op.name + "_scatter_add",
                          s.local_elements(op.b) * table_bytes(op.b, act) + s.local_elements(op.out) * act);
      grad.weight_gradient = op.b.weight;
      return grad;
    }
  }
  return {};
}

std::optional<Op> operand_gradient_op(const NamedOp& op, const Sharding& s, double act) {
  if (op.kind == NamedOp::Kind::Einsum) {
    Op db = local_matmul(op.name + "_db", s, op.a, op.out, op.b, act);
    db.weight_gradient = op.b.weight;
    return db;
  }
  if (op.kind == NamedOp::Kind::Conv)
    return conv_weight_grad_op(op.name + "_dw", conv_shape(op, s), act, kWeightBytes);
  return std::nullopt;
}

double forward_transient(const std::vector<NamedOp>& ops, std::size_t i, const Sharding& s) {
  using K = NamedOp::Kind;
  const NamedOp& op = ops[i];
  if (op.kind == K::Elementwise) return 0;  // fused into its producer, in place
  // The previous op's output (this op's input) unless kept, and this op's output unless the next
  // op keeps it; element-wise successors fuse in and write nothing of their own.
  std::size_t next = i + 1;
  while (next < ops.size() && ops[next].kind == K::Elementwise) ++next;
  const bool reads_previous = i > 0 && op.a.id.empty() && !op.a.keep;
  // Kept: read and kept by the next op, or by a later op naming it. Softmax cross-entropy's
  // output is a loss per row (its gradient is what it keeps).
  bool output_kept = (next < ops.size() && ops[next].a.id.empty() && ops[next].a.keep) ||
                     op.math == NamedOp::Math::SoftmaxXent;
  for (std::size_t j = i + 1; j < ops.size() && !op.out.id.empty() && !output_kept; ++j)
    output_kept = (ops[j].a.keep && ops[j].a.id == op.out.id) || (ops[j].b.keep && ops[j].b.id == op.out.id);
  return (reads_previous ? s.local_elements(op.a) : 0.0) + (output_kept ? 0.0 : s.local_elements(op.out));
}

LayerMemory layer_memory(const std::vector<NamedOp>& ops, const Sharding& s, double act, bool model_input) {
  LayerMemory m;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const NamedOp& op = ops[i];
    for (const auto& t : op.tensors())
      if (t.keep) m.kept_bytes += s.local_elements(t) * act;
    if (op.kind == NamedOp::Kind::Gather)
      m.kept_bytes += s.local_elements(op.a) * kIdBytes;  // for the scatter
    m.backward_workspace_bytes =
        std::max(m.backward_workspace_bytes, gradients_in_flight(ops, i, s, model_input && i == 0) * act);
    m.workspace_bytes = std::max(m.workspace_bytes, forward_transient(ops, i, s) * act);
  }
  return m;
}

LayerWork lower_work(const std::vector<NamedOp>& ops, double act, bool model_input, double input_bytes,
                     double output_bytes) {
  const Sharding& s = Sharding::none();
  LayerWork w;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const NamedOp& op = ops[i];
    if (op.kind == NamedOp::Kind::BatchNorm) w.batch_norm_channels.push_back(op.b.dims.front().size);
    w.forward.push_back(forward_op(op, s, act));
    // The model's input needs no gradient: a convolution reading it skips its dx (an einsum's
    // da is computed all the same, as the frameworks' dense layers do).
    if (!(model_input && i == 0 && op.kind == NamedOp::Kind::Conv))
      w.backward.push_back(input_gradient_op(op, s, act));
    if (auto g = operand_gradient_op(op, s, act)) w.backward.push_back(*g);
  }
  const LayerMemory m = layer_memory(ops, s, act, model_input);
  w.stash_bytes = m.kept_bytes;
  w.workspace_bytes = m.workspace_bytes;
  w.backward_workspace_bytes = m.backward_workspace_bytes;
  w.input_bytes = input_bytes;
  w.output_bytes = output_bytes;
  return w;
}

void derive_work(Layer& layer, double act, bool model_input, Boundary boundary) {
  layer.work = [named = layer.named_ops, act, model_input, boundary = std::move(boundary)](std::int64_t b) {
    const auto [in, out] = boundary(b);
    return lower_work(named(b), act, model_input, in, out);
  };
}

}  // namespace tpusim
