// Gather: rows of table b picked by ids a (an embedding lookup; b an activation: rows of it, as
// a masked LM picks its predicted positions). Memory-bound; its backward scatter-adds the rows'
// gradients into a dense gradient of the whole table.
#include <algorithm>

#include "models/kernels/kernels.hpp"
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

constexpr double kIdBytes = 4;  ///< an int32 token id or position

/// Bytes per element of a gather's table: the weights' (Sharding::weight_bytes), or picked activations.
double table_bytes(const NamedTensor& table, const Sharding& s, double act) {
  return table.weight || table.tied ? s.weight_bytes : act;
}

class Gather : public NamedOpKind {
 public:
  Op forward(const NamedOp& op, const Sharding& s, double act) const override {
    // The picked rows read and written, and their ids.
    return memory_op(op.name, s.local_elements(op.out) * (table_bytes(op.b, s, act) + act) +
                                  s.local_elements(op.a) * kIdBytes);
  }
  Op input_gradient(const NamedOp& op, const Sharding& s, double act) const override {
    Op grad = memory_op(op.name + "_scatter_add",
                        s.local_elements(op.b) * table_bytes(op.b, s, act) + s.local_elements(op.out) * act);
    grad.weight_gradient = op.b.weight;
    return grad;
  }
  /// From an activation (picked rows), a gradient of the whole; from a table, into the table's
  /// weight gradient.
  double operand_gradients(const NamedOp& op, const Sharding& s, bool) const override {
    return op.b.weight || op.b.tied ? 0.0 : s.local_elements(op.b);
  }
  double kept_extra_bytes(const NamedOp& op, const Sharding& s) const override {
    return s.local_elements(op.a) * kIdBytes;  // for the scatter
  }

  double lower_forward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    m.compute(forward(op, s, act));
    // A split table gives each core the rows it holds (zeros elsewhere): summed over the split.
    m.sum_output("rows", s.split_missing({&op.b}, op.out), s.local_elements(op.out) * act);
    return 0;
  }
  void lower_backward(const NamedOp& op, const Sharding& s, double act, MeshLoweringSink& m) const override {
    m.compute(input_gradient(op, s, act));
    // Picked rows of an activation (a masked LM's predicted positions) have no weight gradient.
    if (op.b.weight) m.weight_gradient(op, {&op.a});
  }

  std::string missing_host_math(const NamedOp& op) const override {
    return op.b.weight && op.b.dims.size() == 2 ? "" : "a lookup other than in a table [rows, width]";
  }
  bool reads_ids() const override { return true; }
  Tensor initial_weight(const NamedOp& op, int, std::uint64_t seed, int index) const override {
    return xavier(op, double(op.b.dims.front().size), seed, index);  // fan in: the table's rows
  }
  Tensor host_forward(const NamedOp& op, HostForward& f) const override {
    f.saved.ids = f.data.tokens(f.batch);
    const auto width = op.b.dims[1].size;
    Tensor y(f.saved.ids.size() * std::size_t(width), 0.0f);
    kernels::embedding_forward(f.saved.ids.data(), f.weights->data(), y.data(),
                               kernels::I(f.saved.ids.size()), width);
    return y;
  }
  void host_backward(const NamedOp& op, HostBackward& g) const override {
    kernels::embedding_backward(g.saved.ids.data(), g.dy.data(), g.weight_grads->data(),
                                kernels::I(g.saved.ids.size()), op.b.dims[1].size);
  }

  // On a mesh's shards: each core looks up the rows of the table it holds (zeros for the others;
  // the all-reduce over a split vocabulary sums them).
  std::string missing_shard_math(const NamedOp& op, const ShardSupport& s) const override {
    return s.first_op && op.a.dims.size() == 2 && op.out.dims.size() == 3
               ? ""
               : "a lookup other than the model's token embedding";
  }
  void shard_step(const NamedOp& op, ShardStep step, bool, ShardHost& h) const override {
    using kernels::I;
    const ShardHost::Box table = h.box(op.b);
    const I width = table.local[1], first_row = table.offset[0], held_rows = table.local[0];
    if (step == ShardStep::Forward) h.ids() = h.tokens_per_row(op.a);
    const auto& ids = h.ids();
    if (step == ShardStep::Forward) {
      const Tensor& t = *h.weight(0, false);
      Tensor y(ids.size() * std::size_t(width), 0.0f);
      for (std::size_t r = 0; r < ids.size(); ++r) {
        const I row = ids[r] - first_row;
        if (row >= 0 && row < held_rows)
          std::copy_n(t.begin() + row * width, width, y.begin() + std::int64_t(r) * width);
      }
      h.output() = std::move(y);
      return;
    }
    const Tensor& dy = h.output_gradient();
    Tensor& dt = *h.weight(0, true);
    for (std::size_t r = 0; r < ids.size(); ++r) {
      const I row = ids[r] - first_row;
      if (row >= 0 && row < held_rows)
        for (I j = 0; j < width; ++j)
          dt[std::size_t(row * width + j)] += dy[r * std::size_t(width) + std::size_t(j)];
    }
  }
};

}  // namespace

std::unique_ptr<const NamedOpKind> make_gather_kind() { return std::make_unique<Gather>(); }

}  // namespace tpusim
