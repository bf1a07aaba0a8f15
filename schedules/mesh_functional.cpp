#include "schedules/mesh_functional.hpp"

#include <algorithm>
#include <cmath>

#include "models/kernels/kernels.hpp"
#include "models/named_math.hpp"
#include "models/named_op_function.hpp"
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

using named::add_into;
using named::einsum;
using Names = std::vector<std::string>;
constexpr float kLayerNormEpsilon = 1e-5f;  // the layer functions' (kernels::layernorm_forward's default)

bool has(const Names& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

Names names_of(const NamedTensor& t) {
  Names n;
  for (const auto& d : t.dims) n.push_back(d.name);
  return n;
}

/// Calls f(local flat index, whole flat index) for every element of the box (row-major).
template <class F>
void for_each_element(const MeshExecutor::Box& b, F&& f) {
  const std::size_t rank = b.whole.size();
  std::vector<std::int64_t> i(rank, 0);
  const std::int64_t n = b.elements();
  for (std::int64_t local = 0; local < n; ++local) {
    std::int64_t whole = 0;
    for (std::size_t d = 0; d < rank; ++d) whole = whole * b.whole[d] + b.offset[d] + i[d];
    f(local, whole);
    for (std::size_t d = rank; d-- > 0;) {
      if (++i[d] < b.local[d]) break;
      i[d] = 0;
    }
  }
}

/// What a kind's whole-tensor math is handed for data: the ops run on shards through it
/// (element-wise ops, convolutions, batch norms, pools) read none; lookups and the loss are the
/// executor's own.
class NoData : public DataSource {
 public:
  std::vector<std::int32_t> targets(const Batch&) const override { return {}; }
};

/// Sums `pieces` element-wise (in double, in group order) and gives every one the sum.
void sum_all(const std::vector<Tensor*>& pieces) {
  std::vector<double> sum(pieces.front()->size(), 0.0);
  for (const Tensor* p : pieces)
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += (*p)[i];
  for (Tensor* p : pieces)
    for (std::size_t i = 0; i < sum.size(); ++i) (*p)[i] = float(sum[i]);
}

}  // namespace

std::int64_t MeshExecutor::Box::elements() const {
  std::int64_t n = 1;
  for (auto l : local) n *= l;
  return n;
}

MeshExecutor::MeshExecutor(const Study& study, FunctionalRuntime& runtime,
                           std::vector<std::pair<std::string, int>> mesh,
                           std::map<std::string, std::string> layout, std::vector<std::vector<int>> coords)
    : study_(study),
      rt_(runtime),
      mesh_(std::move(mesh)),
      layout_(std::move(layout)),
      coords_(std::move(coords)) {
  const std::size_t cores = coords_.size();
  out_.resize(cores);
  dout_.resize(cores);
  partial_.resize(cores);
  pending_.resize(cores);
  gathered_.resize(cores);
  stats_.resize(cores);
  extras_.resize(cores);
  backward_run_.resize(cores);
  targets_.resize(cores);
  tokens_.resize(cores);
  input_.resize(cores);
  int last_of_previous = -1;
  for (int l = 0; l < int(study.model.layers.size()); ++l) {
    add_layer_ops(l, last_of_previous);
    last_of_previous = int(ops_.size()) - 1;
    match_params(l);
  }
  if (ops_.empty() || ops_.back().named.math != NamedOp::Math::SoftmaxXent)
    throw ConfigError(study.file, "model.kind", "\"" + study.model.kind + "\"",
                      "a model ending in softmax cross-entropy for functional mesh layouts");
}

ConfigError MeshExecutor::unsupported(int layer, const NamedOp& op, const std::string& why) const {
  return ConfigError(
      study_.file, "schedule.kind",
      "\"mesh\" with op " + study_.model.layers[std::size_t(layer)].name + "/" + op.name + " (" + why + ")",
      "a model and layout functional mode executes on mesh shards: mlp, mesh_lm, dense sequential models, "
      "a decoder-only transformer without shared embeddings, picked positions or dropout, or a conv net "
      "(ResNet-50) with only its batch split");
}

bool MeshExecutor::same_layout(const NamedTensor& produced, const NamedTensor& read, bool& gather) const {
  if (produced.dims.size() != read.dims.size()) return false;
  for (std::size_t i = 0; i < read.dims.size(); ++i) {
    const auto &p = produced.dims[i], &r = read.dims[i];
    if (p.name == "seq" && r.name == "seq_k" && split(p.name) && !split(r.name) && p.size == r.size) {
      gather = true;
      continue;
    }
    if (p.size != r.size || (p.name != r.name && (split(p.name) || split(r.name)))) return false;
  }
  return true;
}

void MeshExecutor::add_layer_ops(int l, int last_of_previous) {
  first_op_.push_back(int(ops_.size()));
  params_.emplace_back();
  std::map<std::string, int> produced{{"in", last_of_previous}};
  auto named = study_.model.layers[std::size_t(l)].named_ops(study_.batch);
  for (std::size_t i = 0; i < named.size(); ++i) {
    Op op;
    op.named = std::move(named[i]);
    op.layer = l;
    const NamedOp& n = op.named;
    const int f = int(ops_.size());
    bool ignored = false;
    auto source = [&](const NamedTensor& t, const std::string& id, bool& gather) {
      const std::string key = id.empty() ? (i == 0 ? "in" : "") : id;
      const int p = key.empty() ? f - 1 : produced.count(key) ? produced.at(key) : -2;
      if (p == -2) throw unsupported(l, n, "it reads " + id + ", which no earlier op of the layer produces");
      if (p >= 0 && !same_layout(ops_[std::size_t(p)].named.out, t, gather))
        throw unsupported(l, n, "an operand laid out unlike what produced it");
      if (p == -1 && !(f == 0 && !t.dims.empty() && t.dims.front().name == "batch"))
        throw unsupported(l, n, "it reads no earlier op's output");
      return p;
    };
    if (n.a.weight) throw unsupported(l, n, "a weight as first operand");
    op.a = source(n.a, n.a.id, op.gather[0]);
    if (!n.b.dims.empty()) {
      if (n.b.weight) {
        for (int c = 0; c < n.b.copies; ++c) {
          op.params.push_back(int(params_.back().size()));
          NamedTensor t = n.b;
          t.copies = 1;
          params_.back().push_back(Param{t});
        }
      } else {
        op.b = source(n.b, n.b.id, op.gather[1]);
      }
    }
    if (!n.skip.empty()) op.skip = source(n.out, n.skip, ignored);
    if ((op.gather[0] || op.gather[1] || ignored) && n.kind != "einsum")
      throw unsupported(l, n, "only einsums read a split sequence whole");
    check_supported(l, op, f);
    if (!n.out.id.empty()) produced[n.out.id] = f;
    ops_.push_back(std::move(op));
  }
}

void MeshExecutor::check_supported(int l, const Op& op, int f) const {
  const NamedOp& n = op.named;
  if (const std::string why = missing_host_math(n); !why.empty()) throw unsupported(l, n, why);
  // What shards add: a bias over the trailing dimensions, every einsum dimension from an operand,
  // a causal softmax whole along what it normalizes, the lookup first.
  auto suffix_bias = [&] {
    if (n.b.dims.size() > n.a.dims.size()) return false;
    for (std::size_t j = 0; j < n.b.dims.size(); ++j)
      if (n.b.dims[j].name != n.a.dims[n.a.dims.size() - n.b.dims.size() + j].name) return false;
    return true;
  };
  using M = NamedOp::Math;
  if (n.kind == "einsum") {
    const Names an = names_of(n.a), bn = names_of(n.b), on = names_of(n.out);
    for (const auto& d : an)
      if (!has(bn, d) && !has(on, d)) throw unsupported(l, n, "a dimension summed out of one operand alone");
    for (const auto& d : on)
      if (!has(an, d) && !has(bn, d)) throw unsupported(l, n, "an output dimension from no operand");
    if (op.b == -1 && !n.b.weight) throw unsupported(l, n, "no second operand");
  } else if (n.kind == "elementwise") {
    const bool gated = n.math == M::GatedSilu || n.math == M::GatedGelu;
    if ((!gated && !suffix_bias()) || ((n.math == M::Residual || n.math == M::ResidualRelu) && op.skip < 0))
      throw unsupported(l, n, "a bias over other than the trailing dimensions, or a residual of nothing");
  } else if (n.kind == "reduction") {
    if (n.math == M::CausalSoftmax && (split(n.reduce_dim) || n.a.dims.size() < 2))
      throw unsupported(l, n, "a causal softmax split along the positions it normalizes");
  } else if (n.kind == "gather") {
    if (f != 0 || n.a.dims.size() != 2 || n.out.dims.size() != 3)
      throw unsupported(l, n, "a lookup other than the model's token embedding");
  } else {
    // Convolutions, batch norms and pools run their whole-tensor math on a core's examples: the
    // batch may be split (each replica's batch norm over its own examples, as in data
    // parallelism), not the image or the channels (halos and split statistics have no host math).
    for (const NamedTensor* t : {&n.a, &n.b, &n.out})
      for (const auto& d : t->dims)
        if (d.name != "batch" && split(d.name))
          throw unsupported(l, n, "a " + n.kind + " with " + d.name + " split: no host math on such shards");
  }
  if (f > 0 && ops_.back().named.math == M::SoftmaxXent) throw unsupported(l, n, "it follows the loss");
}

void MeshExecutor::match_params(int l) {
  // The layer function's parameters are its named weights, in op order (one per copy).
  const auto init = rt_.fn(l).init(0);
  const auto& params = params_.back();
  bool match = init.size() == params.size();
  for (std::size_t k = 0; match && k < params.size(); ++k)
    match = double(init[k].size()) == params[k].tensor.elements();
  if (!match)
    throw ConfigError(
        study_.file, "model.kind",
        "\"" + study_.model.kind + "\" (layer " + study_.model.layers[std::size_t(l)].name + ")",
        "layers whose named weights are their functional parameters");
}

MeshExecutor::Box MeshExecutor::box(const NamedTensor& t, int core) const {
  Box b;
  for (const auto& d : t.dims) {
    std::int64_t n = 1, at = 0;
    if (auto it = layout_.find(d.name); it != layout_.end())
      for (std::size_t m = 0; m < mesh_.size(); ++m)
        if (mesh_[m].first == it->second) {
          n = mesh_[m].second;
          at = coords_[std::size_t(core)][m];
        }
    b.whole.push_back(d.size);
    b.local.push_back(d.size / n);
    b.offset.push_back(at * (d.size / n));
  }
  return b;
}

std::vector<Tensor> MeshExecutor::slice(int core, int layer, const std::vector<Tensor>& whole) const {
  std::vector<Tensor> pieces;
  const auto& params = params_[std::size_t(layer)];
  for (std::size_t k = 0; k < params.size(); ++k) {
    const Box b = box(params[k].tensor, core);
    Tensor piece(std::size_t(b.elements()));
    for_each_element(
        b, [&](std::int64_t l, std::int64_t w) { piece[std::size_t(l)] = whole[k][std::size_t(w)]; });
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

void MeshExecutor::place(int core, int layer, const std::vector<Tensor>& pieces,
                         std::vector<Tensor>& whole) const {
  const auto& params = params_[std::size_t(layer)];
  for (std::size_t k = 0; k < params.size(); ++k) {
    for_each_element(box(params[k].tensor, core), [&](std::int64_t l, std::int64_t w) {
      whole[k][std::size_t(w)] = pieces[k][std::size_t(l)];
    });
  }
}

bool MeshExecutor::first_replica(int core, const std::vector<std::string>& dims) const {
  for (std::size_t m = 0; m < mesh_.size(); ++m) {
    bool splits = false;
    for (const auto& d : dims) splits |= layout_.count(d) && layout_.at(d) == mesh_[m].first;
    if (!splits && coords_[std::size_t(core)][m] != 0) return false;
  }
  return true;
}

const Tensor& MeshExecutor::operand(int core, int f, int which) {
  const Op& op = ops_[std::size_t(f)];
  if (op.gather[which]) return gathered_[std::size_t(core)].at(2 * f + which);
  return value(core, which ? op.b : op.a);
}

MeshExecutor::Box MeshExecutor::piece_in_gathered(int f, int which, int core, int m) const {
  const Op& op = ops_[std::size_t(f)];
  const NamedTensor& read = which ? op.named.b : op.named.a;
  const NamedTensor& produced = ops_[std::size_t(which ? op.b : op.a)].named.out;
  const Box mine = box(read, core), piece = box(produced, m);
  Box b{mine.local, std::vector<std::int64_t>(mine.local.size(), 0), piece.local};
  for (std::size_t d = 0; d < read.dims.size(); ++d)
    if (read.dims[d].name == "seq_k") b.offset[d] = piece.offset[d];
  return b;
}

void MeshExecutor::hold() {
  const LayerRange all{0, int(study_.model.layers.size())};
  for (int c = 0; c < int(coords_.size()); ++c) rt_.hold_shards(c, all, shared_from_this());
}

std::vector<std::int32_t> MeshExecutor::per_row(int core, const NamedTensor& rows,
                                                const std::vector<std::int32_t>& of_examples) const {
  // `of_examples` covers this core's examples whole along the other dimensions.
  Box b = box(rows, core);
  b.whole[0] = b.local[0];
  b.offset[0] = 0;
  std::vector<std::int32_t> out(std::size_t(b.elements()));
  for_each_element(
      b, [&](std::int64_t l, std::int64_t w) { out[std::size_t(l)] = of_examples[std::size_t(w)]; });
  return out;
}

const Tensor& MeshExecutor::value(int core, int producer) {
  if (producer >= 0) return out_[std::size_t(core)].at(producer);
  // The model's input: this core's examples and its piece of their features.
  Tensor& x = input_[std::size_t(core)];
  if (x.empty()) {
    Box b = box(ops_.front().named.a, core);
    const Tensor data = rt_.fn(0).input(rt_.batch(b.offset[0], b.local[0]));
    b.whole[0] = b.local[0];
    b.offset[0] = 0;
    x.resize(std::size_t(b.elements()));
    for_each_element(b, [&](std::int64_t l, std::int64_t w) { x[std::size_t(l)] = data[std::size_t(w)]; });
  }
  return x;
}

void MeshExecutor::add_pending(int core, int producer, Tensor g) {
  auto& store = pending_[std::size_t(core)];
  auto it = store.find(producer);
  if (it == store.end())
    store.emplace(producer, std::move(g));
  else
    add_into(it->second, g);
}

void MeshExecutor::accumulate(int core, int producer, Tensor g) {
  if (producer < 0) return;
  auto& store = dout_[std::size_t(core)];
  auto it = store.find(producer);
  if (it == store.end())
    store.emplace(producer, std::move(g));
  else
    add_into(it->second, g);
}

void MeshExecutor::run(int core, int f, const MeshAction& action) {
  if (f == 0 && action.what == MeshAction::Forward) {
    // A new step: the model's input and every gradient start afresh.
    const std::size_t c = std::size_t(core);
    input_[c].clear();
    dout_[c].clear();
    partial_[c].clear();
    pending_[c].clear();
    gathered_[c].clear();
    extras_[c].clear();
    backward_run_[c].clear();
  }
  const NamedOp& n = ops_[std::size_t(f)].named;
  if (n.kind == "einsum") return run_einsum(core, f, action);
  if (n.kind == "gather") return run_gather(core, f, action.what);
  if (n.kind != "reduction") return run_on_piece(core, f, action.what);
  if (n.math == NamedOp::Math::CausalSoftmax) return run_causal_softmax(core, f, action.what);
  if (n.math == NamedOp::Math::LayerNorm) return run_layer_norm(core, f, action.what);
  return run_softmax_xent(core, f, action.what);
}

NamedOp MeshExecutor::local_op(const NamedOp& n, int core) const {
  NamedOp local = n;
  for (NamedTensor* t : {&local.a, &local.b, &local.out}) {
    const Box b = box(*t, core);
    for (std::size_t d = 0; d < t->dims.size(); ++d) t->dims[d].size = b.local[d];
  }
  return local;
}

void MeshExecutor::run_on_piece(int core, int f, MeshAction::What what) {
  // The kind's own whole-tensor math on this core's pieces: check_supported admits only ops whose
  // pieces are computed independently (element-wise ones; a split batch).
  const std::size_t c = std::size_t(core);
  const NamedOp local = local_op(ops_[std::size_t(f)].named, core);
  if (what == MeshAction::Forward) return piece_forward(core, f, local);
  // The whole backward at the op's first backward action (a convolution's weight gradient comes
  // with its input gradient, or alone where it reads the model's input).
  const auto dy = dout_[c].find(f);
  if (dy != dout_[c].end() && backward_run_[c].insert(f).second) piece_backward(core, f, local, dy->second);
}

void MeshExecutor::piece_forward(int core, int f, const NamedOp& local) {
  static const NoData no_data;
  static const Batch batch;
  const Op& op = ops_[std::size_t(f)];
  const NamedOpKind& kind = op_kind(local);
  std::vector<Tensor>& extras = extras_[std::size_t(core)][f];
  extras.assign(std::size_t(kind.saved_extras(local)), Tensor{});
  Saved saved;
  double loss = 0;
  HostForward in{value(core, op.a),
                 op.b >= 0 ? &value(core, op.b) : nullptr,
                 op.skip >= 0 ? &value(core, op.skip) : nullptr,
                 first_param(core, op, false),
                 extras.data(),
                 saved,
                 no_data,
                 batch,
                 loss};
  out_[std::size_t(core)][f] = kind.host_forward(local, in);
}

void MeshExecutor::piece_backward(int core, int f, const NamedOp& local, Tensor& dy) {
  static const Batch batch;
  const Op& op = ops_[std::size_t(f)];
  Saved saved;
  HostBackward g{value(core, op.a),
                 op.b >= 0 ? &value(core, op.b) : nullptr,
                 out_[std::size_t(core)].at(f),
                 first_param(core, op, false),
                 extras_[std::size_t(core)][f].data(),
                 saved,
                 batch,
                 dy,
                 first_param(core, op, true),
                 {},
                 {},
                 {}};
  op_kind(local).host_backward(local, g);
  if (!g.dskip.empty()) accumulate(core, op.skip, std::move(g.dskip));
  if (!g.da.empty()) accumulate(core, op.a, std::move(g.da));
  if (!g.db.empty()) accumulate(core, op.b, std::move(g.db));
}

Tensor* MeshExecutor::first_param(int core, const Op& op, bool gradient) {
  if (op.params.empty()) return nullptr;
  auto& held = gradient ? rt_.grads(core, op.layer) : rt_.params(core, op.layer);
  return &held[std::size_t(op.params[0])];
}

void MeshExecutor::run_einsum(int core, int f, const MeshAction& action) {
  const std::size_t c = std::size_t(core);
  const Op& op = ops_[std::size_t(f)];
  const NamedOp& n = op.named;
  std::map<std::string, std::int64_t> size;
  for (const NamedTensor* t : {&n.a, &n.b, &n.out}) {
    const Box b = box(*t, core);
    for (std::size_t i = 0; i < t->dims.size(); ++i) size[t->dims[i].name] = b.local[i];
  }
  const Names an = names_of(n.a), bn = names_of(n.b), on = names_of(n.out);
  const Tensor& B = n.b.weight ? rt_.params(core, op.layer)[std::size_t(op.params[0])] : operand(core, f, 1);
  if (action.what == MeshAction::Forward) {
    out_[c][f] = einsum(operand(core, f, 0), an, B, bn, on, size);
  } else if (action.what == MeshAction::Backward) {
    if (op.a < 0) return;  // the model's input needs no gradient
    Tensor da = einsum(dout_[c].at(f), on, B, bn, an, size);
    if (op.gather[0])
      partial_[c][2 * f] = std::move(da);
    else if (action.partial)
      add_pending(core, op.a, std::move(da));
    else
      accumulate(core, op.a, std::move(da));
  } else {
    Tensor db = einsum(operand(core, f, 0), an, dout_[c].at(f), on, bn, size);
    if (n.b.weight)
      add_into(rt_.grads(core, op.layer)[std::size_t(op.params[0])], db);
    else if (op.gather[1])
      partial_[c][2 * f + 1] = std::move(db);
    else if (action.partial)
      add_pending(core, op.b, std::move(db));
    else
      accumulate(core, op.b, std::move(db));
  }
}

void MeshExecutor::run_causal_softmax(int core, int f, MeshAction::What what) {
  // Rows: [..., query position, positions attended to]; the query's position in the sequence.
  const Op& op = ops_[std::size_t(f)];
  const Box in = box(op.named.a, core);
  const kernels::I cols = in.local.back(), rows = in.elements() / cols;
  const Tensor& x = value(core, op.a);
  Tensor y(x.size());
  if (what == MeshAction::Forward) {
    kernels::softmax_forward(x.data(), y.data(), rows, cols, op.named.scale, in.local[in.local.size() - 2],
                             in.offset[in.offset.size() - 2]);
    out_[std::size_t(core)][f] = std::move(y);
  } else {
    kernels::softmax_backward(out_[std::size_t(core)].at(f).data(), dout_[std::size_t(core)].at(f).data(),
                              y.data(), rows, cols, op.named.scale);
    accumulate(core, op.a, std::move(y));
  }
}

void MeshExecutor::run_layer_norm(int core, int f, MeshAction::What what) {
  // Per row, the sums over this core's part of the row; the rows' statistics when the row is
  // whole here, otherwise after the all-reduce of the sums over the split.
  const std::size_t c = std::size_t(core);
  const Op& op = ops_[std::size_t(f)];
  const Box in = box(op.named.a, core);
  const kernels::I cols = in.local.back(), rows = in.elements() / cols;
  const Tensor& x = value(core, op.a);
  std::vector<double> sums(std::size_t(2 * rows));
  if (what == MeshAction::Forward) {
    kernels::layernorm_sums(x.data(), sums.data(), rows, cols);
    stats_[c][2 * f] = std::move(sums);
    if (!split(op.named.reduce_dim)) finish_layer_norm(core, f);
  } else {
    auto& grads = rt_.grads(core, op.layer);
    kernels::layernorm_gradient_sums(x.data(), rt_.params(core, op.layer)[std::size_t(op.params[0])].data(),
                                     stats_[c].at(2 * f).data(), dout_[c].at(f).data(),
                                     grads[std::size_t(op.params[0])].data(),
                                     grads[std::size_t(op.params[1])].data(), sums.data(), rows, cols);
    stats_[c][2 * f + 1] = std::move(sums);
    if (!split(op.named.reduce_dim)) finish_layer_norm_gradient(core, f);
  }
}

void MeshExecutor::run_softmax_xent(int core, int f, MeshAction::What what) {
  const std::size_t c = std::size_t(core);
  const Op& op = ops_[std::size_t(f)];
  const NamedOp& n = op.named;
  const Box in = box(n.a, core);
  const kernels::I cols = in.local.back(), rows = in.elements() / cols;
  const Tensor& x = value(core, op.a);
  if (what == MeshAction::Forward) {
    // Per row, (max, sum of exponentials) over this core's part of the row.
    std::vector<double> s(std::size_t(2 * rows));
    kernels::softmax_row_statistics(x.data(), s.data(), rows, cols);
    stats_[c][2 * f] = std::move(s);
    NamedTensor row_dims = n.a;
    row_dims.dims.pop_back();
    targets_[c] = per_row(core, row_dims, rt_.fn(op.layer).targets(rt_.batch(in.offset[0], in.local[0])));
    if (!split(n.reduce_dim)) finish_softmax_xent(core, f);
    return;
  }
  // d logits = (softmax - one-hot(target)) / rows of the whole batch.
  const auto& lse = stats_[c].at(2 * f);
  const auto& t = targets_[c];
  double whole_rows = 1;
  for (std::size_t d = 0; d + 1 < in.whole.size(); ++d) whole_rows *= double(in.whole[d]);
  Tensor dx(x.size());
  kernels::softmax_xent_gradient(x.data(), lse.data(), t.data(), dx.data(), rows, cols, in.offset.back(),
                                 1.0 / whole_rows);
  accumulate(core, op.a, std::move(dx));
}

void MeshExecutor::run_gather(int core, int f, MeshAction::What what) {
  // Token embedding: each core looks up the rows of the table it holds (zeros for the others;
  // the all-reduce over a split vocabulary sums them).
  using kernels::I;
  const std::size_t c = std::size_t(core);
  const Op& op = ops_[std::size_t(f)];
  const NamedOp& n = op.named;
  const Box in = box(n.a, core), table = box(n.b, core);
  const I width = table.local[1], first_row = table.offset[0], held_rows = table.local[0];
  if (what == MeshAction::Forward)
    tokens_[c] = per_row(core, n.a, rt_.fn(op.layer).tokens(rt_.batch(in.offset[0], in.local[0])));
  const auto& ids = tokens_[c];
  if (what == MeshAction::Forward) {
    const Tensor& t = rt_.params(core, op.layer)[std::size_t(op.params[0])];
    Tensor y(ids.size() * std::size_t(width), 0.0f);
    for (std::size_t r = 0; r < ids.size(); ++r) {
      const I row = ids[r] - first_row;
      if (row >= 0 && row < held_rows)
        std::copy_n(t.begin() + row * width, width, y.begin() + std::int64_t(r) * width);
    }
    out_[c][f] = std::move(y);
  } else {
    const Tensor& dy = dout_[c].at(f);
    Tensor& dt = rt_.grads(core, op.layer)[std::size_t(op.params[0])];
    for (std::size_t r = 0; r < ids.size(); ++r) {
      const I row = ids[r] - first_row;
      if (row >= 0 && row < held_rows)
        for (I j = 0; j < width; ++j)
          dt[std::size_t(row * width + j)] += dy[r * std::size_t(width) + std::size_t(j)];
    }
  }
}

void MeshExecutor::finish_layer_norm(int core, int f) {
  const Op& op = ops_[std::size_t(f)];
  const auto& params = rt_.params(core, op.layer);
  const Tensor& x = value(core, op.a);
  const Box in = box(op.named.a, core);
  const std::int64_t cols = in.local.back(), rows = in.elements() / cols;
  auto& stats = stats_[std::size_t(core)].at(2 * f);
  kernels::layernorm_statistics(stats.data(), rows, double(in.whole.back()), kLayerNormEpsilon);
  Tensor y(x.size());
  kernels::layernorm_apply(x.data(), params[std::size_t(op.params[0])].data(),
                           params[std::size_t(op.params[1])].data(), stats.data(), y.data(), rows, cols);
  out_[std::size_t(core)][f] = std::move(y);
}

void MeshExecutor::finish_layer_norm_gradient(int core, int f) {
  const Op& op = ops_[std::size_t(f)];
  const Tensor& x = value(core, op.a);
  const Box in = box(op.named.a, core);
  const std::int64_t cols = in.local.back(), rows = in.elements() / cols;
  Tensor dx(x.size());
  kernels::layernorm_gradient_apply(
      x.data(), rt_.params(core, op.layer)[std::size_t(op.params[0])].data(),
      stats_[std::size_t(core)].at(2 * f).data(), dout_[std::size_t(core)].at(f).data(),
      stats_[std::size_t(core)].at(2 * f + 1).data(), dx.data(), rows, cols, double(in.whole.back()));
  accumulate(core, op.a, std::move(dx));
}

void MeshExecutor::finish_softmax_xent(int core, int f) {
  // Rows' log-sum-exp; this core's share of the loss: each row's log-sum-exp once per piece of
  // rows, each target logit once, on the core holding it.
  const NamedOp& n = ops_[std::size_t(f)].named;
  const Box in = box(n.a, core);
  const std::int64_t cols = in.local.back(), rows = in.elements() / cols;
  const Tensor& x = value(core, ops_[std::size_t(f)].a);
  const auto& t = targets_[std::size_t(core)];
  auto& s = stats_[std::size_t(core)].at(2 * f);
  std::vector<double> lse = kernels::softmax_log_sum_exp(s.data(), rows);
  Names row_dims = names_of(n.a);
  row_dims.pop_back();
  const bool count_rows = first_replica(core, row_dims);
  row_dims.push_back(n.reduce_dim);
  const bool count_targets = first_replica(core, row_dims);
  double loss = 0, whole_rows = 1;
  for (std::size_t d = 0; d + 1 < in.whole.size(); ++d) whole_rows *= double(in.whole[d]);
  for (std::int64_t r = 0; r < rows; ++r) {
    if (count_rows) loss += lse[std::size_t(r)];
    const std::int64_t j = t[std::size_t(r)] - in.offset.back();
    if (count_targets && j >= 0 && j < cols) loss -= double(x[std::size_t(r * cols + j)]);
  }
  s = std::move(lse);
  rt_.add_loss(loss / whole_rows);
}

void MeshExecutor::reduce(const std::vector<int>& group, int f, MeshAction::What what, int which) {
  const Op& op = ops_[std::size_t(f)];
  const bool layer_norm = op.named.math == NamedOp::Math::LayerNorm;
  if (what == MeshAction::CombineStatistics && !layer_norm) return combine_softmax_statistics(group, f);
  if (what == MeshAction::CombineStatistics || what == MeshAction::CombineGradientStatistics)
    return combine_layer_norm_sums(group, f, what == MeshAction::CombineGradientStatistics);
  std::vector<Tensor*> pieces;
  if (what == MeshAction::SumWeightGradient && op.named.b.weight) {
    for (int p : op.params) {
      pieces.clear();
      for (int c : group) pieces.push_back(&rt_.grads(c, op.layer)[std::size_t(p)]);
      sum_all(pieces);
    }
    return;
  }
  if (what == MeshAction::SumOutput) {
    for (int c : group) pieces.push_back(&out_[std::size_t(c)].at(f));
    sum_all(pieces);
    return;
  }
  if (what == MeshAction::GatherOperand) return gather_operand(group, f, which);
  // A partial input gradient: summed, then it joins the operand's gradient (for an operand
  // read whole along a split sequence, each member takes its piece of the sum).
  if (what == MeshAction::SumWeightGradient) which = 1;
  if (what == MeshAction::SumInputGradient) which = 0;
  if (!op.gather[which]) {
    // The pending sum of the producer's gradient (several readers may have added to it).
    const int producer = which ? op.b : op.a;
    for (int c : group) pieces.push_back(&pending_[std::size_t(c)].at(producer));
    sum_all(pieces);
    for (int c : group) {
      accumulate(c, producer, std::move(pending_[std::size_t(c)].at(producer)));
      pending_[std::size_t(c)].erase(producer);
    }
    return;
  }
  const int key = 2 * f + which;
  for (int c : group) pieces.push_back(&partial_[std::size_t(c)].at(key));
  sum_all(pieces);
  // Then the reduce-scatter over the sequence, unless this is it.
  if (what == MeshAction::ScatterOperandGradient) scatter_operand_gradient(group, f, which);
}

void MeshExecutor::combine_softmax_statistics(const std::vector<int>& group, int f) {
  // (max, sum of exponentials) pairs combine exactly.
  std::vector<double*> pieces;
  for (int c : group) pieces.push_back(stats_[std::size_t(c)].at(2 * f).data());
  kernels::softmax_combine_statistics(pieces,
                                      kernels::I(stats_[std::size_t(group.front())].at(2 * f).size() / 2));
  for (int c : group) finish_softmax_xent(c, f);
}

void MeshExecutor::combine_layer_norm_sums(const std::vector<int>& group, int f, bool gradient) {
  // Row sums add up.
  const int key = 2 * f + (gradient ? 1 : 0);
  std::vector<std::vector<double>*> s;
  for (int c : group) s.push_back(&stats_[std::size_t(c)].at(key));
  for (std::size_t i = 0; i < s.front()->size(); ++i) {
    double sum = 0;
    for (auto* v : s) sum += (*v)[i];
    for (auto* v : s) (*v)[i] = sum;
  }
  for (int c : group) {
    if (gradient)
      finish_layer_norm_gradient(c, f);
    else
      finish_layer_norm(c, f);
  }
}

void MeshExecutor::gather_operand(const std::vector<int>& group, int f, int which) {
  // Every member's piece of the operand, placed along the sequence.
  const Op& op = ops_[std::size_t(f)];
  for (int c : group) {
    Tensor whole(std::size_t(box(which ? op.named.b : op.named.a, c).elements()));
    for (int m : group) {
      const Tensor& piece = value(m, which ? op.b : op.a);
      for_each_element(piece_in_gathered(f, which, c, m), [&](std::int64_t l, std::int64_t at) {
        whole[std::size_t(at)] = piece[std::size_t(l)];
      });
    }
    gathered_[std::size_t(c)][2 * f + which] = std::move(whole);
  }
}

void MeshExecutor::scatter_operand_gradient(const std::vector<int>& group, int f, int which) {
  // Each member takes its piece of the summed gradient of an operand read whole.
  const Op& op = ops_[std::size_t(f)];
  const int key = 2 * f + which;
  for (int m : group) {
    const Tensor& sum = partial_[std::size_t(m)].at(key);
    const Box b = piece_in_gathered(f, which, m, m);
    Tensor mine(std::size_t(b.elements()));
    for_each_element(b,
                     [&](std::int64_t l, std::int64_t at) { mine[std::size_t(l)] = sum[std::size_t(at)]; });
    accumulate(m, which ? op.b : op.a, std::move(mine));
  }
  for (int c : group) partial_[std::size_t(c)].erase(key);
}

FunctionalRuntime::Closure MeshExecutor::compute(int core, int layer, std::vector<MeshAction> actions) {
  return [this, core, layer, actions = std::move(actions)] {
    for (const auto& a : actions) run(core, flat(layer, a.op), a);
  };
}

FunctionalRuntime::Closure MeshExecutor::collective(std::vector<std::vector<int>> groups, int layer,
                                                    MeshAction action) {
  return [this, groups = std::move(groups), layer, action] {
    for (const auto& g : groups) reduce(g, flat(layer, action.op), action.what, action.operand);
  };
}

FunctionalRuntime::Closure MeshExecutor::update(int core, int layer,
                                                const std::vector<ShardedWeight>& sharded) {
  std::vector<std::pair<int, int>> pieces(params_[std::size_t(layer)].size(), {0, 1});
  for (const auto& w : sharded)
    for (const auto& g : w.groups)
      if (auto it = std::find(g.begin(), g.end(), core); it != g.end())
        for (int p : ops_[std::size_t(flat(layer, w.op))].params)
          pieces[std::size_t(p)] = {int(it - g.begin()), int(g.size())};
  return rt_.update_pieces(core, layer, std::move(pieces));
}

FunctionalRuntime::Closure MeshExecutor::gather(int layer, ShardedWeight weight) {
  return [this, layer, weight = std::move(weight)] {
    for (int k : ops_[std::size_t(flat(layer, weight.op))].params)
      for (const auto& g : weight.groups)
        for (std::size_t s = 0; s < g.size(); ++s) {
          const Tensor& src = rt_.params(g[s], layer)[std::size_t(k)];
          const auto [lo, hi] = FunctionalRuntime::piece(std::int64_t(src.size()), int(s), int(g.size()));
          for (int c : g)
            if (c != g[s])
              std::copy(src.begin() + lo, src.begin() + hi,
                        rt_.params(c, layer)[std::size_t(k)].begin() + lo);
        }
  };
}

}  // namespace tpusim
