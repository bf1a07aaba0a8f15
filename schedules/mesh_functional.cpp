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

/// Sums `pieces` element-wise (in double, in group order) and gives every one the sum.
void sum_all(const std::vector<Tensor*>& pieces) {
  std::vector<double> sum(pieces.front()->size(), 0.0);
  for (const Tensor* p : pieces)
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += (*p)[i];
  for (Tensor* p : pieces)
    for (std::size_t i = 0; i < sum.size(); ++i) (*p)[i] = float(sum[i]);
}

}  // namespace

MeshExecutor::MeshExecutor(const Study& study, FunctionalRuntime& runtime,
                           std::vector<std::pair<std::string, int>> mesh,
                           std::map<std::string, std::string> layout, std::vector<std::vector<int>> coords,
                           int micro_batches)
    : study_(study),
      rt_(runtime),
      mesh_(std::move(mesh)),
      layout_(std::move(layout)),
      coords_(std::move(coords)),
      micro_batches_(micro_batches) {
  const std::size_t cores = coords_.size();
  micro_.assign(cores, -1);
  out_.resize(cores);
  dout_.resize(cores);
  partial_.resize(cores);
  pending_.resize(cores);
  gathered_.resize(cores);
  stats_.resize(cores);
  extras_.resize(cores);
  backward_run_.resize(cores);
  ids_.resize(cores);
  input_.resize(cores);
  int last_of_previous = -1;
  for (int l = 0; l < int(study.model.layers.size()); ++l) {
    add_layer_ops(l, last_of_previous);
    last_of_previous = int(ops_.size()) - 1;
    match_params(l);
  }
  if (ops_.empty() || !op_kind(ops_.back().named).is_loss(ops_.back().named))
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
  auto named = study_.model.layers[std::size_t(l)].named_ops(study_.batch / micro_batches_);
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
    if ((op.gather[0] || op.gather[1] || ignored) && !op_kind(n).reads_split_sequence_whole())
      throw unsupported(l, n, "only einsums read a split sequence whole");
    check_supported(l, op, f);
    if (!n.out.id.empty()) produced[n.out.id] = f;
    ops_.push_back(std::move(op));
  }
}

void MeshExecutor::check_supported(int l, const Op& op, int f) const {
  const NamedOp& n = op.named;
  const NamedOpKind& kind = op_kind(n);
  if (const std::string why = missing_host_math(n); !why.empty()) throw unsupported(l, n, why);
  const ShardSupport support{[this](const std::string& d) { return split(d); }, op.b >= 0, op.skip >= 0,
                             f == 0};
  if (const std::string why = kind.missing_shard_math(n, support); !why.empty()) throw unsupported(l, n, why);
  if (f > 0 && op_kind(ops_.back().named).is_loss(ops_.back().named))
    throw unsupported(l, n, "it follows the loss");
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
    const Tensor data = rt_.fn(0).input(examples(core, b));
    b.whole[0] = b.local[0];
    b.offset[0] = 0;
    x.resize(std::size_t(b.elements()));
    for_each_element(b, [&](std::int64_t l, std::int64_t w) { x[std::size_t(l)] = data[std::size_t(w)]; });
  }
  return x;
}

Batch MeshExecutor::examples(int core, const Box& b) const {
  // The core's piece of the whole batch, b.offset[0] * A onwards; its micro-batch a piece of that.
  return rt_.batch(b.offset[0] * micro_batches_ + micro_[std::size_t(core)] * b.local[0], b.local[0]);
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

int MeshExecutor::producer(int f, int which) const {
  const Op& op = ops_[std::size_t(f)];
  return which == 0 ? op.a : which == 1 ? op.b : op.skip;
}

/// Core `core`'s view of op f, through which the op's kind runs its shard math.
class MeshExecutor::CoreView : public ShardHost {
 public:
  CoreView(MeshExecutor& e, int core, int f) : e_(e), core_(core), f_(f), c_(std::size_t(core)) {}

  Box box(const NamedTensor& t) const override { return e_.box(t, core_); }
  bool split(const std::string& dim) const override { return e_.split(dim); }
  const Tensor& operand(int which) override { return e_.operand(core_, f_, which); }
  bool reads_gathered(int which) const override { return op().gather[which]; }
  bool produced(int which) const override { return e_.producer(f_, which) >= 0; }
  const Tensor* skip() override { return op().skip >= 0 ? &e_.value(core_, op().skip) : nullptr; }
  Tensor* weight(int k, bool gradient) override {
    if (std::size_t(k) >= op().params.size()) return nullptr;
    auto& held = gradient ? e_.rt_.grads(core_, op().layer) : e_.rt_.params(core_, op().layer);
    return &held[std::size_t(op().params[std::size_t(k)])];
  }
  Tensor& output() override { return e_.out_[c_][f_]; }
  Tensor& output_gradient() override { return e_.dout_[c_].at(f_); }
  bool has_output_gradient() const override { return e_.dout_[c_].count(f_) > 0; }
  void add_gradient(int which, Tensor g, Part part) override {
    if (part == Part::OfGathered)
      e_.partial_[c_][2 * f_ + which] = std::move(g);
    else if (part == Part::Pending)
      e_.add_pending(core_, e_.producer(f_, which), std::move(g));
    else
      e_.accumulate(core_, e_.producer(f_, which), std::move(g));
  }
  std::vector<double>& statistics(int slot) override { return e_.stats_[c_][2 * f_ + slot]; }
  std::vector<Tensor>& extras() override { return e_.extras_[c_][f_]; }
  std::vector<std::int32_t>& ids() override { return e_.ids_[c_][f_]; }
  bool first_backward() override { return e_.backward_run_[c_].insert(f_).second; }
  std::vector<std::int32_t> targets_per_row(const NamedTensor& rows) override {
    const Box b = box(rows);
    return e_.per_row(core_, rows, e_.rt_.fn(op().layer).targets(e_.examples(core_, b)));
  }
  std::vector<std::int32_t> tokens_per_row(const NamedTensor& rows) override {
    const Box b = box(rows);
    return e_.per_row(core_, rows, e_.rt_.fn(op().layer).tokens(e_.examples(core_, b)));
  }
  bool first_replica(const std::vector<std::string>& dims) const override {
    return e_.first_replica(core_, dims);
  }
  void add_loss(double loss) override { e_.rt_.add_loss(loss); }
  int micro_batches() const override { return e_.micro_batches_; }

 private:
  const Op& op() const { return e_.ops_[std::size_t(f_)]; }
  MeshExecutor& e_;
  int core_, f_;
  std::size_t c_;
};

void MeshExecutor::run(int core, int f, const MeshAction& action) {
  if (f == 0 && action.what == MeshAction::Forward) {
    // A new step, or micro-batch: the model's input and every gradient start afresh.
    const std::size_t c = std::size_t(core);
    micro_[c] = (micro_[c] + 1) % micro_batches_;
    input_[c].clear();
    dout_[c].clear();
    partial_[c].clear();
    pending_[c].clear();
    gathered_[c].clear();
    extras_[c].clear();
    backward_run_[c].clear();
  }
  const NamedOp& n = ops_[std::size_t(f)].named;
  const ShardStep step = action.what == MeshAction::Forward    ? ShardStep::Forward
                         : action.what == MeshAction::Backward ? ShardStep::Backward
                                                               : ShardStep::WeightGradient;
  CoreView view(*this, core, f);
  op_kind(n).shard_step(n, step, action.partial, view);
}

void MeshExecutor::reduce(const std::vector<int>& group, int f, MeshAction::What what, int which) {
  const Op& op = ops_[std::size_t(f)];
  if (what == MeshAction::CombineStatistics || what == MeshAction::CombineGradientStatistics) {
    std::vector<CoreView> views;
    views.reserve(group.size());
    for (int c : group) views.emplace_back(*this, c, f);
    std::vector<ShardHost*> hosts;
    for (auto& v : views) hosts.push_back(&v);
    return op_kind(op.named).shard_combine(op.named, what == MeshAction::CombineGradientStatistics, hosts);
  }
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
