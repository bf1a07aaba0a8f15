#include "schedules/mesh_functional.hpp"

#include <algorithm>
#include <cmath>

#include "models/kernels/kernels.hpp"

namespace tpusim {

namespace {

bool same_dims(const NamedTensor& x, const NamedTensor& y) {
  if (x.dims.size() != y.dims.size()) return false;
  for (std::size_t i = 0; i < x.dims.size(); ++i)
    if (x.dims[i].name != y.dims[i].name || x.dims[i].size != y.dims[i].size) return false;
  return true;
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

}  // namespace

std::int64_t MeshExecutor::Box::elements() const {
  std::int64_t n = 1;
  for (auto l : local) n *= l;
  return n;
}

MeshExecutor::MeshExecutor(const Study& study, FunctionalRuntime& runtime, std::vector<std::pair<std::string, int>> mesh,
                           std::map<std::string, std::string> layout, std::vector<std::vector<int>> coords)
    : study_(study), rt_(runtime), mesh_(std::move(mesh)), layout_(std::move(layout)), coords_(std::move(coords)) {
  const int layers = int(study.model.layers.size());
  auto unsupported = [&](int layer, const NamedOp& op, const std::string& why) {
    return ConfigError(study.file, "schedule.kind",
                       "\"mesh\" with op " + study.model.layers[std::size_t(layer)].name + "/" + op.name + " (" + why + ")",
                       "a model functional mode executes on mesh shards: chains of dense layers (two-dimensional einsums with a "
                       "weight, bias, ReLU, softmax cross-entropy), as mlp has");
  };
  for (int l = 0; l < layers; ++l) {
    first_op_.push_back(int(ops_.size()));
    params_.emplace_back();
    for (auto& op : study.model.layers[std::size_t(l)].named_ops(study.batch)) {
      const bool first = ops_.empty();
      const NamedOp* prev = first ? nullptr : &ops_.back();
      if (prev && !same_dims(prev->out, op.a)) throw unsupported(l, op, "its input is not the previous op's output");
      if (first && (op.a.dims.empty() || op.a.dims.front().name != "batch")) throw unsupported(l, op, "the model's input is not [batch, ...]");
      if (prev && prev->math == NamedOp::Math::SoftmaxXent) throw unsupported(l, op, "it follows the loss");
      int param = -1;
      if (op.a.weight) throw unsupported(l, op, "a weight as first operand");
      if (op.b.weight) {
        param = int(params_.back().size());
        params_.back().push_back(op.b);
      }
      switch (op.kind) {
        case NamedOp::Kind::Einsum:
          if (op.a.dims.size() != 2 || op.b.dims.size() != 2 || !op.b.weight || op.a.dims[1].name != op.b.dims[0].name ||
              op.out.dims.size() != 2 || op.out.dims[0].name != op.a.dims[0].name || op.out.dims[1].name != op.b.dims[1].name)
            throw unsupported(l, op, "an einsum other than [b, i] . weight [i, o] -> [b, o]");
          break;
        case NamedOp::Kind::Elementwise:
          if ((op.math != NamedOp::Math::Bias && op.math != NamedOp::Math::BiasRelu) || op.b.dims.size() != 1 ||
              op.b.dims[0].name != op.a.dims.back().name || op.b.copies != 1)
            throw unsupported(l, op, "an element-wise op other than a bias (+ ReLU) over the last dimension");
          break;
        case NamedOp::Kind::Reduction:
          if (op.math != NamedOp::Math::SoftmaxXent || op.a.dims.size() != 2 || op.reduce_dim != op.a.dims.back().name || !op.b.dims.empty())
            throw unsupported(l, op, "a reduction other than softmax cross-entropy over the last dimension");
          break;
        default:
          throw unsupported(l, op, "no host math for this kind of op on shards");
      }
      param_of_.push_back(param);
      layer_of_.push_back(l);
      ops_.push_back(std::move(op));
    }
    // The named weights must be the layer function's parameters, in order.
    const auto init = runtime.fn(l).init(0);
    bool match = init.size() == params_.back().size();
    for (std::size_t k = 0; match && k < init.size(); ++k) match = double(init[k].size()) == params_.back()[k].elements();
    if (!match)
      throw ConfigError(study.file, "model.kind", "\"" + study.model.kind + "\" (layer " + study.model.layers[std::size_t(l)].name + ")",
                        "layers whose named weights are their functional parameters, in order");
  }
  if (ops_.empty() || ops_.back().math != NamedOp::Math::SoftmaxXent)
    throw ConfigError(study.file, "model.kind", "\"" + study.model.kind + "\"", "a model ending in softmax cross-entropy for functional mesh layouts");
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

Tensor MeshExecutor::slice(int core, int layer, std::size_t k, const Tensor& whole) const {
  const Box b = box(params_[std::size_t(layer)][k], core);
  Tensor piece(std::size_t(b.elements()));
  for_each_element(b, [&](std::int64_t l, std::int64_t w) { piece[std::size_t(l)] = whole[std::size_t(w)]; });
  return piece;
}

void MeshExecutor::place(int core, int layer, std::size_t k, const Tensor& piece, Tensor& whole) const {
  for_each_element(box(params_[std::size_t(layer)][k], core),
                   [&](std::int64_t l, std::int64_t w) { whole[std::size_t(w)] = piece[std::size_t(l)]; });
}

bool MeshExecutor::first_replica(int core, const std::vector<std::string>& dims) const {
  for (std::size_t m = 0; m < mesh_.size(); ++m) {
    bool splits = false;
    for (const auto& d : dims) splits |= layout_.count(d) && layout_.at(d) == mesh_[m].first;
    if (!splits && coords_[std::size_t(core)][m] != 0) return false;
  }
  return true;
}

void MeshExecutor::hold() {
  const LayerRange all{0, int(study_.model.layers.size())};
  for (int c = 0; c < int(coords_.size()); ++c) rt_.hold_shards(c, all, shared_from_this());
}

const Tensor& MeshExecutor::input_of(int core, int f) {
  if (f > 0) return out_.at({core, f - 1});
  // The model's input: this core's examples (rows) and its piece of the features.
  auto it = input_.find(core);
  if (it != input_.end() && it->second.first == rt_.step()) return it->second.second;
  Box b = box(op(0).a, core);
  const Tensor data = rt_.fn(0).input(rt_.batch(b.offset[0], b.local[0]));
  b.whole[0] = b.local[0];
  b.offset[0] = 0;
  Tensor x(std::size_t(b.elements()));
  for_each_element(b, [&](std::int64_t l, std::int64_t w) { x[std::size_t(l)] = data[std::size_t(w)]; });
  return (input_[core] = {rt_.step(), std::move(x)}).second;
}

void MeshExecutor::run(int core, int f, MeshAction::What what) {
  using kernels::I;
  const NamedOp& o = op(f);
  const int l = layer_of_[std::size_t(f)];
  const Box in = box(o.a, core), out = box(o.out, core);
  const I rows = in.local[0], k = in.local.back(), n = out.local.back();
  switch (o.kind) {
    case NamedOp::Kind::Einsum: {
      const Tensor& W = rt_.params(core, l)[std::size_t(param_of_[std::size_t(f)])];
      if (what == MeshAction::Forward) {
        Tensor y(std::size_t(rows * n));
        kernels::gemm(false, false, rows, n, k, 1.0f, input_of(core, f).data(), W.data(), 0.0f, y.data());
        out_[{core, f}] = std::move(y);
      } else if (what == MeshAction::Backward) {
        if (f == 0) return;  // the model's input needs no gradient
        Tensor dx(std::size_t(rows * k));
        kernels::gemm(false, true, rows, k, n, 1.0f, dout_.at({core, f}).data(), W.data(), 0.0f, dx.data());
        dout_[{core, f - 1}] = std::move(dx);
      } else {
        Tensor& dW = rt_.grads(core, l)[std::size_t(param_of_[std::size_t(f)])];
        kernels::gemm(true, false, k, n, rows, 1.0f, input_of(core, f).data(), dout_.at({core, f}).data(), 1.0f, dW.data());
      }
      return;
    }
    case NamedOp::Kind::Elementwise: {
      const bool relu = o.math == NamedOp::Math::BiasRelu;
      const std::size_t p = std::size_t(param_of_[std::size_t(f)]);
      if (what == MeshAction::Forward) {
        Tensor y = input_of(core, f);
        const Tensor& bias = rt_.params(core, l)[p];
        for (I r = 0; r < rows; ++r)
          for (I j = 0; j < n; ++j) {
            float& v = y[std::size_t(r * n + j)];
            v += bias[std::size_t(j)];
            if (relu) v = std::max(v, 0.0f);
          }
        out_[{core, f}] = std::move(y);
      } else {
        Tensor dz = dout_.at({core, f});
        if (relu) kernels::relu_backward(out_.at({core, f}).data(), dz.data(), dz.data(), I(dz.size()));
        Tensor& db = rt_.grads(core, l)[p];
        for (I r = 0; r < rows; ++r)
          for (I j = 0; j < n; ++j) db[std::size_t(j)] += dz[std::size_t(r * n + j)];
        if (f > 0) dout_[{core, f - 1}] = std::move(dz);
      }
      return;
    }
    case NamedOp::Kind::Reduction: {  // softmax cross-entropy over the (maybe split) last dimension
      const Tensor& x = input_of(core, f);
      if (what == MeshAction::Forward) {
        std::vector<double> s(std::size_t(2 * rows));
        for (I r = 0; r < rows; ++r) {
          double m = -INFINITY, e = 0;
          for (I j = 0; j < k; ++j) m = std::max(m, double(x[std::size_t(r * k + j)]));
          for (I j = 0; j < k; ++j) e += std::exp(double(x[std::size_t(r * k + j)]) - m);
          s[std::size_t(2 * r)] = m;
          s[std::size_t(2 * r + 1)] = e;
        }
        stats_[{core, f}] = std::move(s);
        targets_[core] = rt_.fn(layer_of_.back()).targets(rt_.batch(in.offset[0], rows));
        bool split = false;
        for (const auto& d : o.a.dims) split |= d.name == o.reduce_dim && layout_.count(d.name);
        if (!split) finish_softmax(core, f);
      } else {
        // d logits = (softmax - one-hot(target)) / global batch.
        const auto& lse = stats_.at({core, f});
        const auto& t = targets_.at(core);
        const double scale = 1.0 / double(study_.batch);
        Tensor dx(x.size());
        for (I r = 0; r < rows; ++r)
          for (I j = 0; j < k; ++j) {
            const double p = std::exp(double(x[std::size_t(r * k + j)]) - lse[std::size_t(r)]);
            dx[std::size_t(r * k + j)] = float((p - (in.offset.back() + j == t[std::size_t(r)] ? 1.0 : 0.0)) * scale);
          }
        if (f > 0) dout_[{core, f - 1}] = std::move(dx);
      }
      return;
    }
    default:
      throw SimulationError("functional mesh: op " + o.name + " has no host math");
  }
}

void MeshExecutor::finish_softmax(int core, int f) {
  // Rows' log-sum-exp; this core's share of the loss: each row's log-sum-exp once per batch
  // piece, each target logit once, on the core holding it.
  const NamedOp& o = op(f);
  const Box in = box(o.a, core);
  const auto rows = in.local[0], k = in.local.back();
  const Tensor& x = input_of(core, f);
  const auto& t = targets_.at(core);
  auto& s = stats_.at({core, f});
  std::vector<double> lse(static_cast<std::size_t>(rows));
  double loss = 0;
  const bool count_rows = first_replica(core, {o.a.dims[0].name});
  const bool count_targets = first_replica(core, {o.a.dims[0].name, o.reduce_dim});
  for (std::int64_t r = 0; r < rows; ++r) {
    lse[std::size_t(r)] = s[std::size_t(2 * r)] + std::log(s[std::size_t(2 * r + 1)]);
    if (count_rows) loss += lse[std::size_t(r)];
    const std::int64_t j = t[std::size_t(r)] - in.offset.back();
    if (count_targets && j >= 0 && j < k) loss -= double(x[std::size_t(r * k + j)]);
  }
  s = std::move(lse);
  rt_.add_loss(loss / double(study_.batch));
}

void MeshExecutor::reduce(const std::vector<int>& group, int f, MeshAction::What what) {
  const int l = layer_of_[std::size_t(f)];
  if (what == MeshAction::CombineStatistics) {
    // (max, sum of exponentials) pairs combine exactly: M = max m, S = sum s * exp(m - M).
    const std::size_t rows = stats_.at({group.front(), f}).size() / 2;
    for (std::size_t r = 0; r < rows; ++r) {
      double m = -INFINITY, e = 0;
      for (int c : group) m = std::max(m, stats_.at({c, f})[2 * r]);
      for (int c : group) e += stats_.at({c, f})[2 * r + 1] * std::exp(stats_.at({c, f})[2 * r] - m);
      for (int c : group) {
        stats_.at({c, f})[2 * r] = m;
        stats_.at({c, f})[2 * r + 1] = e;
      }
    }
    for (int c : group) finish_softmax(c, f);
    return;
  }
  std::vector<Tensor*> pieces;
  for (int c : group) {
    if (what == MeshAction::SumOutput) pieces.push_back(&out_.at({c, f}));
    else if (what == MeshAction::SumInputGradient) pieces.push_back(&dout_.at({c, f - 1}));
    else pieces.push_back(&rt_.grads(c, l)[std::size_t(param_of_[std::size_t(f)])]);
  }
  std::vector<double> sum(pieces.front()->size(), 0.0);
  for (const Tensor* p : pieces)
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += (*p)[i];
  for (Tensor* p : pieces)
    for (std::size_t i = 0; i < sum.size(); ++i) (*p)[i] = float(sum[i]);
}

FunctionalRuntime::Closure MeshExecutor::compute(int core, int layer, std::vector<MeshAction> actions) {
  return [this, core, layer, actions = std::move(actions)] {
    for (const auto& a : actions) run(core, flat(layer, a.op), a.what);
  };
}

FunctionalRuntime::Closure MeshExecutor::collective(std::vector<std::vector<int>> groups, int layer, MeshAction action) {
  return [this, groups = std::move(groups), layer, action] {
    for (const auto& g : groups) reduce(g, flat(layer, action.op), action.what);
  };
}

FunctionalRuntime::Closure MeshExecutor::update(int core, int layer, const std::vector<ShardedWeight>& sharded) {
  std::vector<std::pair<int, int>> pieces(params_[std::size_t(layer)].size(), {0, 1});
  for (const auto& w : sharded)
    for (const auto& g : w.groups)
      if (auto it = std::find(g.begin(), g.end(), core); it != g.end())
        pieces[std::size_t(param_of_[std::size_t(flat(layer, w.op))])] = {int(it - g.begin()), int(g.size())};
  return rt_.update_pieces(core, layer, std::move(pieces));
}

FunctionalRuntime::Closure MeshExecutor::gather(int layer, ShardedWeight weight) {
  return [this, layer, weight = std::move(weight)] {
    const std::size_t k = std::size_t(param_of_[std::size_t(flat(layer, weight.op))]);
    for (const auto& g : weight.groups)
      for (std::size_t s = 0; s < g.size(); ++s) {
        const Tensor& src = rt_.params(g[s], layer)[k];
        const auto [lo, hi] = FunctionalRuntime::piece(std::int64_t(src.size()), int(s), int(g.size()));
        for (int c : g)
          if (c != g[s]) std::copy(src.begin() + lo, src.begin() + hi, rt_.params(c, layer)[k].begin() + lo);
      }
  };
}

}  // namespace tpusim
