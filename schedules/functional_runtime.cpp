#include "schedules/functional_runtime.hpp"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "models/named_op_function.hpp"
#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

/// What keeps a model from functional mode: the first layer whose ops lack host math, with its
/// first such op and why; else the first layer (the model's builder attached no functions: its
/// data or loss is not one functional mode reads).
std::string unsupported_layer(const Model& model) {
  for (const auto& layer : model.layers) {
    const auto ops = layer.named_ops ? layer.named_ops(1) : std::vector<NamedOp>{};
    if (layer.function || has_host_math(ops)) continue;
    for (const auto& op : ops)
      if (const std::string why = missing_host_math(op); !why.empty())
        return layer.name + ", op " + op.name + ": " + why;
    return layer.name;
  }
  return model.layers.empty() ? "none" : model.layers.front().name;
}

}  // namespace

bool FunctionalRuntime::has_batch_norm(const Model& model) {
  for (const auto& layer : model.layers)
    for (const auto& op : layer.named_ops ? layer.named_ops(1) : std::vector<NamedOp>{})
      if (op_kind(op).replica_statistics_channels(op) > 0) return true;
  return false;
}

void FunctionalRuntime::check_supported(const Study& study) {
  const auto& layers = study.model.layers;
  // The routing (top-k gates, slots, dropped tokens) is priced and held, not computed.
  if (study.model.mixture_of_experts)
    throw ConfigError(study.file, "model.moe", "mixture-of-experts layers",
                      "a model without \"moe\" in functional mode (its routing is modelled for time and "
                      "memory, not computed)");
  if (std::any_of(layers.begin(), layers.end(), [](const Layer& l) { return !l.function; }))
    throw ConfigError(study.file, "model.kind",
                      "\"" + study.model.kind + "\" (layer " + unsupported_layer(study.model) + ")",
                      "a model whose every layer's named ops have host math (einsums, a bias, ReLU or GELU, "
                      "residual adds, layer norms, causal softmaxes, softmax cross-entropy, a first table "
                      "lookup, convolutions, pools) and that ends in its loss: mlp, mesh_lm, sequential "
                      "with a classifier, or a decoder-only transformer without shared embeddings, picked "
                      "positions or dropout");
  // Cross-replica batch norm combines statistics across replicas, which functional mode's
  // per-replica layer calls do not.
  if (study.schedule->batch_norm_group() > 1 && has_batch_norm(study.model))
    throw ConfigError(study.file, "schedule.batch_norm_group",
                      std::to_string(study.schedule->batch_norm_group()),
                      "1 in functional mode (each replica's batch norms use its own examples' statistics)");
  if (!study.optimizer.rule->functional()) {
    std::string kinds;
    for (const auto& [kind, rule] : optimizer_rules())
      if (rule->functional()) kinds += (kinds.empty() ? "" : ", ") + kind;
    throw ConfigError(study.file, "optimizer.kind", "\"" + study.optimizer.kind + "\"",
                      "an optimizer functional mode updates with: " + kinds);
  }
}

double FunctionalRuntime::host_bytes_needed(const Study& study, int cores_holding_weights) {
  const double params = double(study.model.params());
  const double per_copy = kFp32Bytes * params * (2.0 + study.optimizer.rule->slots());
  double activations = 0;  // fp32 activations kept for backward, for the whole batch, unpadded
  for (const auto& layer : study.model.layers)
    activations += layer.lower(1, 0, layer.weight_bytes).stash_bytes * 4.0 / study.model.activation_bytes;
  // The simulated run and the one-core reference.
  return per_copy * (cores_holding_weights + 1) + 2.0 * activations * double(study.batch);
}

FunctionalRuntime::FunctionalRuntime(const Study& study, std::uint64_t seed)
    : study_(study),
      seed_(seed),
      layers_(int(study.model.layers.size())),
      learning_rate_(study.optimizer.learning_rate) {
  // Every step allocates and frees the same large activation tensors. By default glibc maps
  // each large block afresh and unmaps it on free, so every step page-faults its tensors back
  // in (measured: a fifth of a step's time). Keep freed memory in the heap instead.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

FunctionalRuntime::Held& FunctionalRuntime::held(int core, int layer) {
  auto it = held_.find({core, layer});
  if (it == held_.end())
    throw SimulationError("functional mode: core " + std::to_string(core) + " does not hold layer " +
                          std::to_string(layer));
  return it->second;
}

std::vector<Tensor> FunctionalRuntime::initial_params(int layer) const {
  return fn(layer).init(mix(seed_, 0xC0FFEE, std::uint64_t(layer)));
}

void FunctionalRuntime::take(int core, int layer, std::vector<Tensor> params) {
  Held h;
  h.params = std::move(params);
  for (const auto& p : h.params) h.grads.emplace_back(p.size(), 0.0f);
  h.slots.assign(std::size_t(study_.optimizer.rule->slots()), h.grads);
  held_[{core, layer}] = std::move(h);
}

void FunctionalRuntime::hold(int core, LayerRange layers) {
  for (int l = layers.first; l < layers.last; ++l)
    if (!held_.count({core, l})) take(core, l, initial_params(l));
}

void FunctionalRuntime::hold_shards(int core, LayerRange layers, std::shared_ptr<const Shards> shards) {
  shards_ = std::move(shards);
  for (int l = layers.first; l < layers.last; ++l) take(core, l, shards_->slice(core, l, initial_params(l)));
}

Batch FunctionalRuntime::batch(std::int64_t first, std::int64_t count) const {
  return Batch{first, count, study_.batch, step_, seed_};
}

void FunctionalRuntime::begin_step(int step) {
  step_ = step;
  if (int(losses_.size()) <= step) losses_.resize(std::size_t(step) + 1, 0.0);
  losses_[std::size_t(step)] = 0.0;
  for (auto& [key, h] : held_)
    for (auto& g : h.grads) std::fill(g.begin(), g.end(), 0.0f);
  activations_.clear();
  gradients_.clear();
  saved_.clear();
}

void FunctionalRuntime::run_forward(int core, LayerRange r, std::int64_t first, std::int64_t count,
                                    bool keep_all, bool count_loss) {
  const Batch b = batch(first, count);
  // The input: moved out of the store when the forward keeps everything it needs (the
  // backward no longer reads it there), copied when a recompute will need it again.
  Tensor x;
  if (r.first > 0) {
    auto it = activations_.find({core, first, r.first});
    if (it == activations_.end())
      throw SimulationError("functional mode: forward of layer " + std::to_string(r.first) +
                            " before its input arrived");
    if (keep_all) {
      x = std::move(it->second);
      activations_.erase(it);
    } else {
      x = it->second;
    }
  }
  for (int l = r.first; l < r.last; ++l) {
    Saved s;
    double loss = 0;
    x = fn(l).forward(held(core, l).params, std::move(x), b, s, loss);
    if (count_loss) losses_[std::size_t(step_)] += loss;
    if (keep_all) saved_[{core, first, l}] = std::move(s);
  }
  if (r.last < layers_) activations_[{core, first, r.last}] = std::move(x);
}

FunctionalRuntime::Closure FunctionalRuntime::forward(int core, LayerRange r, std::int64_t first,
                                                      std::int64_t count, Keep keep) {
  return [=, this] { run_forward(core, r, first, count, keep == Keep::All, true); };
}

FunctionalRuntime::Closure FunctionalRuntime::recompute(int core, LayerRange r, std::int64_t first,
                                                        std::int64_t count) {
  return [=, this] { run_forward(core, r, first, count, true, false); };
}

FunctionalRuntime::Closure FunctionalRuntime::backward(int core, LayerRange r, std::int64_t first,
                                                       std::int64_t count) {
  return [=, this] {
    const Batch b = batch(first, count);
    Tensor d = r.last == layers_ ? Tensor{} : gradients_.at({core, first, r.last});
    for (int l = r.last - 1; l >= r.first; --l) {
      auto it = saved_.find({core, first, l});
      if (it == saved_.end())
        throw SimulationError("functional mode: backward of layer " + std::to_string(l) +
                              " without its forward");
      Held& h = held(core, l);
      d = fn(l).backward(h.params, d, b, it->second, h.grads);
      saved_.erase(it);
    }
    gradients_.erase({core, first, r.last});
    activations_.erase({core, first, r.first});
    if (r.first > 0) gradients_[{core, first, r.first}] = std::move(d);
  };
}

FunctionalRuntime::Closure FunctionalRuntime::transfer(int src, int dst, int boundary, std::int64_t first,
                                                       bool gradient) {
  return [=, this] {
    auto& store = gradient ? gradients_ : activations_;
    store[{dst, first, boundary}] = store.at({src, first, boundary});
  };
}

FunctionalRuntime::Closure FunctionalRuntime::reduce(std::vector<int> group, LayerRange r) {
  return [=, this] {
    for (int l = r.first; l < r.last; ++l) {
      Held& lead = held(group.front(), l);
      for (std::size_t t = 0; t < lead.grads.size(); ++t) {
        std::vector<double> sum(lead.grads[t].size(), 0.0);
        for (int c : group) {
          const Tensor& g = held(c, l).grads[t];
          for (std::size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
        }
        for (int c : group) {
          Tensor& g = held(c, l).grads[t];
          for (std::size_t i = 0; i < g.size(); ++i) g[i] = float(sum[i]);
        }
      }
    }
  };
}

void FunctionalRuntime::update_range(Held& h, std::size_t k, std::int64_t lo, std::int64_t hi) const {
  std::vector<float*> slots;
  for (auto& slot : h.slots) slots.push_back(slot[k].data());
  study_.optimizer.rule->update(h.params[k].data(), h.grads[k].data(), slots, lo, hi, learning_rate_,
                                double(step_) + 1);
}

FunctionalRuntime::Closure FunctionalRuntime::update(int core, LayerRange r, int shard, int shards) {
  return [=, this] {
    for (int l = r.first; l < r.last; ++l) {
      Held& h = held(core, l);
      for (std::size_t k = 0; k < h.params.size(); ++k) {
        const auto [lo, hi] = piece(std::int64_t(h.params[k].size()), shard, shards);
        update_range(h, k, lo, hi);
      }
    }
  };
}

std::pair<std::int64_t, std::int64_t> FunctionalRuntime::piece(std::int64_t n, int index, int count) {
  const std::int64_t size = (n + count - 1) / count;
  return {std::min(n, std::int64_t(index) * size), std::min(n, std::int64_t(index + 1) * size)};
}

FunctionalRuntime::Closure FunctionalRuntime::update_pieces(int core, int layer,
                                                            std::vector<std::pair<int, int>> pieces) {
  return [=, this] {
    Held& h = held(core, layer);
    for (std::size_t k = 0; k < h.params.size(); ++k) {
      const auto [lo, hi] = piece(std::int64_t(h.params[k].size()), pieces[k].first, pieces[k].second);
      update_range(h, k, lo, hi);
    }
  };
}

FunctionalRuntime::Closure FunctionalRuntime::gather(std::vector<int> group, LayerRange r) {
  return [=, this] {
    for (int l = r.first; l < r.last; ++l)
      for (std::size_t s = 0; s < group.size(); ++s) {
        const Held& from = held(group[s], l);
        for (std::size_t k = 0; k < from.params.size(); ++k) {
          const Tensor& src = from.params[k];
          const auto [lo, hi] = piece(std::int64_t(src.size()), int(s), int(group.size()));
          for (int c : group)
            if (c != group[s] && lo < hi)
              std::copy(src.begin() + lo, src.begin() + hi, held(c, l).params[k].begin() + lo);
        }
      }
  };
}

void FunctionalRuntime::replay(const sim::TaskGraph& graph, const std::vector<int>& order, int steps) {
  for (int s = 1; s < steps; ++s) {
    begin_step(s);
    for (int id : order)
      if (graph.task(id).host) graph.task(id).host();
  }
}

std::unique_ptr<FunctionalRuntime> FunctionalRuntime::reference(const Study& study, int steps,
                                                                std::uint64_t seed) {
  auto ref = std::make_unique<FunctionalRuntime>(study, seed);
  const LayerRange all{0, int(study.model.layers.size())};
  ref->hold(0, all);
  const std::int64_t group = has_batch_norm(study.model) ? study.schedule->layer_batch(study) : study.batch;
  for (int s = 0; s < steps; ++s) {
    ref->begin_step(s);
    for (std::int64_t first = 0; first < study.batch; first += group) {
      ref->forward(0, all, first, group, Keep::All)();
      ref->backward(0, all, first, group)();
    }
    if (s == 0) ref->keep_first_gradients();
    ref->update(0, all, 0, 1)();
  }
  return ref;
}

bool FunctionalRuntime::replicas_identical() const {
  if (shards_) return true;  // pieces, not replicas
  std::map<int, const Held*> first_holder;
  for (const auto& [key, held] : held_) {
    auto [it, fresh] = first_holder.emplace(key.second, &held);
    if (!fresh && held.params != it->second->params) return false;
  }
  return true;
}

std::string FunctionalRuntime::weights_fingerprint() const {
  std::uint64_t h = 1469598103934665603ULL;
  auto hash = [&](const Tensor& t) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(t.data());
    for (std::size_t i = 0; i < t.size() * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
  };
  if (shards_) {
    // Whole tensors reassembled from every core's piece (cores in order).
    for (int l = 0; l < layers_; ++l) {
      std::vector<Tensor> whole = initial_params(l);
      for (const auto& [key, held] : held_)
        if (key.second == l) shards_->place(key.first, l, held.params, whole);
      for (const auto& t : whole) hash(t);
    }
  } else {
    std::map<int, const Held*> first_holder;  // held_ is ordered by (core, layer)
    for (const auto& [key, held] : held_)
      if (!first_holder.count(key.second)) first_holder[key.second] = &held;
    for (const auto& [layer, held] : first_holder)
      for (const auto& t : held->params) hash(t);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

double FunctionalRuntime::rel_diff(int core, int layer, const std::vector<Tensor>& pieces,
                                   const std::vector<Tensor>& ref) const {
  // A core holding pieces: its pieces written over the reference's whole tensors, so only they
  // can differ from them.
  std::vector<Tensor> placed;
  if (shards_) {
    placed = ref;
    shards_->place(core, layer, pieces, placed);
  }
  const std::vector<Tensor>& w = shards_ ? placed : pieces;
  // Over the layer's tensors together: a tensor whose exact value is zero (attention's key bias
  // has an exactly zero gradient) holds only rounding noise, which its own scale would inflate.
  double diff = 0, scale = 1e-30;
  for (std::size_t k = 0; k < w.size(); ++k)
    for (std::size_t i = 0; i < w[k].size(); ++i) {
      scale = std::max(scale, std::fabs(double(ref[k][i])));
      diff = std::max(diff, std::fabs(double(w[k][i]) - ref[k][i]));
    }
  return diff / scale;
}

double FunctionalRuntime::max_rel_diff(const FunctionalRuntime& reference) const {
  double worst = 0;
  for (const auto& [key, h] : held_)
    worst = std::max(worst,
                     rel_diff(key.first, key.second, h.params, reference.held_.at({0, key.second}).params));
  return worst;
}

void FunctionalRuntime::keep_first_gradients() {
  first_grads_.clear();
  for (const auto& [key, h] : held_) first_grads_[key] = h.grads;
}

double FunctionalRuntime::gradient_max_rel_diff(const FunctionalRuntime& reference) const {
  double worst = 0;
  for (const auto& [key, grads] : first_grads_)
    worst =
        std::max(worst, rel_diff(key.first, key.second, grads, reference.first_grads_.at({0, key.second})));
  return worst;
}

}  // namespace tpusim
