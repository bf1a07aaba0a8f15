#include <cmath>

#include "models/functional.hpp"
#include "models/kernels/kernels.hpp"

namespace tpusim {

using kernels::I;

std::uint64_t mix(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) {
  std::uint64_t x = a;
  for (std::uint64_t v : {b, c, d}) {
    x += 0x9e3779b97f4a7c15ULL + v;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
  }
  return x;
}

float unit(std::uint64_t h) { return float(double(h >> 11) * (2.0 / 9007199254740992.0) - 1.0); }

namespace {

/// A vector of tensors moved in (a braced list would copy them: its elements are const).
template <class... T>
std::vector<Tensor> take(T&&... tensors) {
  std::vector<Tensor> v;
  v.reserve(sizeof...(T));
  (v.push_back(std::forward<T>(tensors)), ...);
  return v;
}

/// Xavier-uniform matrix, zero vector, or ones (for norm scales).
Tensor init_tensor(std::uint64_t seed, int index, std::int64_t rows, std::int64_t cols, const char* kind) {
  Tensor t(std::size_t(rows * cols));
  if (std::string_view(kind) == "zeros") return t;
  if (std::string_view(kind) == "ones") {
    std::fill(t.begin(), t.end(), 1.0f);
    return t;
  }
  const float a = std::sqrt(6.0f / float(rows + cols));
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = a * unit(mix(seed, std::uint64_t(index), i));
  return t;
}

/// The mlp's synthetic data: features uniform in [-1, 1); the class a fixed random linear
/// teacher scores highest (learnable by the model).
struct MlpData {
  std::int64_t input, classes;
  float feature(const Batch& b, std::int64_t e, std::int64_t j) const {
    return unit(mix(b.seed, std::uint64_t(b.step) + 1, std::uint64_t(b.first + e), std::uint64_t(j)));
  }
  Tensor features(const Batch& b) const {
    Tensor x(std::size_t(b.count * input));
    for (std::int64_t e = 0; e < b.count; ++e)
      for (std::int64_t j = 0; j < input; ++j) x[std::size_t(e * input + j)] = feature(b, e, j);
    return x;
  }
  std::vector<std::int32_t> targets(const Batch& b) const {
    std::vector<std::int32_t> t(std::size_t(b.count));
    for (std::int64_t e = 0; e < b.count; ++e) {
      double best = -1e300;
      for (std::int64_t c = 0; c < classes; ++c) {
        double score = 0;
        for (std::int64_t j = 0; j < input; ++j) score += double(unit(mix(b.seed ^ 0x7ea0, std::uint64_t(c), std::uint64_t(j)))) * feature(b, e, j);
        if (score > best) {
          best = score;
          t[std::size_t(e)] = std::int32_t(c);
        }
      }
    }
    return t;
  }
};

class MlpDense : public LayerFunction {
 public:
  MlpDense(std::int64_t in, std::int64_t out, bool first, MlpData data) : in_(in), out_(out), first_(first), data_(data) {}
  Tensor input(const Batch& b) const override { return first_ ? data_.features(b) : Tensor{}; }
  std::vector<Tensor> init(std::uint64_t seed) const override {
    return {init_tensor(seed, 0, in_, out_, "xavier"), init_tensor(seed, 1, 1, out_, "zeros")};
  }
  Tensor forward(const std::vector<Tensor>& p, Tensor in, const Batch& b, Saved& s, double&) const override {
    Tensor x = first_ ? data_.features(b) : std::move(in);
    Tensor y(std::size_t(b.count * out_));
    kernels::dense_forward(x.data(), p[0].data(), p[1].data(), y.data(), b.count, in_, out_);
    kernels::relu_forward(y.data(), y.data(), I(y.size()));
    s.tensors = take(std::move(x), Tensor(y));
    return y;
  }
  Tensor backward(const std::vector<Tensor>& p, const Tensor& dout, const Batch& b, const Saved& s, std::vector<Tensor>& g) const override {
    Tensor dz(dout.size());
    kernels::relu_backward(s.tensors[1].data(), dout.data(), dz.data(), I(dz.size()));
    Tensor dx(first_ ? 0 : std::size_t(b.count * in_));
    kernels::dense_backward(s.tensors[0].data(), p[0].data(), dz.data(), first_ ? nullptr : dx.data(), g[0].data(), g[1].data(),
                            b.count, in_, out_);
    return dx;
  }

 private:
  std::int64_t in_, out_;
  bool first_;
  MlpData data_;
};

class MlpClassifier : public LayerFunction {
 public:
  MlpClassifier(std::int64_t in, std::int64_t classes, bool first, MlpData data) : in_(in), classes_(classes), first_(first), data_(data) {}
  Tensor input(const Batch& b) const override { return first_ ? data_.features(b) : Tensor{}; }
  std::vector<std::int32_t> targets(const Batch& b) const override { return data_.targets(b); }
  std::vector<Tensor> init(std::uint64_t seed) const override {
    return {init_tensor(seed, 0, in_, classes_, "xavier"), init_tensor(seed, 1, 1, classes_, "zeros")};
  }
  Tensor forward(const std::vector<Tensor>& p, Tensor in, const Batch& b, Saved& s, double& loss) const override {
    Tensor x = first_ ? data_.features(b) : std::move(in);
    Tensor logits(std::size_t(b.count * classes_)), probs(logits.size());
    kernels::dense_forward(x.data(), p[0].data(), p[1].data(), logits.data(), b.count, in_, classes_);
    s.ids = data_.targets(b);
    loss += kernels::softmax_xent_forward(logits.data(), s.ids.data(), probs.data(), b.count, classes_, 1.0 / double(b.global));
    s.tensors = take(std::move(x), std::move(probs));
    return Tensor{};
  }
  Tensor backward(const std::vector<Tensor>& p, const Tensor&, const Batch& b, const Saved& s, std::vector<Tensor>& g) const override {
    Tensor dlogits(s.tensors[1].size());
    kernels::softmax_xent_backward(s.tensors[1].data(), s.ids.data(), dlogits.data(), b.count, classes_, 1.0 / double(b.global));
    Tensor dx(first_ ? 0 : std::size_t(b.count * in_));
    kernels::dense_backward(s.tensors[0].data(), p[0].data(), dlogits.data(), first_ ? nullptr : dx.data(), g[0].data(), g[1].data(),
                            b.count, in_, classes_);
    return dx;
  }

 private:
  std::int64_t in_, classes_;
  bool first_;
  MlpData data_;
};

/// A language model's synthetic data: random tokens; the target of each position is the next
/// token id modulo the vocabulary (learnable through the embedding and output layers).
std::vector<std::int32_t> lm_tokens(const Batch& b, std::int64_t seq, std::int64_t vocab, bool targets) {
  std::vector<std::int32_t> ids(std::size_t(b.count * seq));
  for (std::int64_t e = 0; e < b.count; ++e)
    for (std::int64_t t = 0; t < seq; ++t) {
      const auto token = std::int32_t(mix(b.seed, std::uint64_t(b.step) + 1, std::uint64_t(b.first + e), std::uint64_t(t)) % std::uint64_t(vocab));
      ids[std::size_t(e * seq + t)] = targets ? std::int32_t((token + 1) % vocab) : token;
    }
  return ids;
}

class Embedding : public LayerFunction {
 public:
  Embedding(std::int64_t vocab, std::int64_t d, std::int64_t seq) : vocab_(vocab), d_(d), seq_(seq) {}
  std::vector<Tensor> init(std::uint64_t seed) const override { return {init_tensor(seed, 0, vocab_, d_, "xavier")}; }
  std::vector<std::int32_t> tokens(const Batch& b) const override { return lm_tokens(b, seq_, vocab_, false); }
  Tensor forward(const std::vector<Tensor>& p, Tensor, const Batch& b, Saved& s, double&) const override {
    s.ids = lm_tokens(b, seq_, vocab_, false);
    Tensor out(s.ids.size() * std::size_t(d_));
    kernels::embedding_forward(s.ids.data(), p[0].data(), out.data(), I(s.ids.size()), d_);
    return out;
  }
  Tensor backward(const std::vector<Tensor>&, const Tensor& dout, const Batch&, const Saved& s, std::vector<Tensor>& g) const override {
    kernels::embedding_backward(s.ids.data(), dout.data(), g[0].data(), I(s.ids.size()), d_);
    return Tensor{};
  }

 private:
  std::int64_t vocab_, d_, seq_;
};

class Block : public LayerFunction {
 public:
  Block(std::int64_t d, std::int64_t ff, std::int64_t heads, std::int64_t dkv, std::int64_t seq, bool biases)
      : d_(d), ff_(ff), h_(heads), dkv_(dkv), seq_(seq), biases_(biases) {}

  std::vector<Tensor> init(std::uint64_t seed) const override {
    const std::int64_t inner = h_ * dkv_;
    std::vector<Tensor> p;
    int i = 0;
    auto dense = [&](std::int64_t k, std::int64_t n) {
      p.push_back(init_tensor(seed, i++, k, n, "xavier"));
      if (biases_) p.push_back(init_tensor(seed, i++, 1, n, "zeros"));
    };
    p.push_back(init_tensor(seed, i++, 1, d_, "ones"));
    p.push_back(init_tensor(seed, i++, 1, d_, "zeros"));
    dense(d_, 3 * inner);
    dense(inner, d_);
    p.push_back(init_tensor(seed, i++, 1, d_, "ones"));
    p.push_back(init_tensor(seed, i++, 1, d_, "zeros"));
    dense(d_, ff_);
    dense(ff_, d_);
    return p;
  }

  // Parameter indices in init()'s order.
  struct Idx {
    int ln1g, ln1b, wqkv, bqkv, wo, bo, ln2g, ln2b, w1, b1, w2, b2;
  };
  Idx idx() const {
    if (biases_) return {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    return {0, 1, 2, -1, 3, -1, 4, 5, 6, -1, 7, -1};
  }
  // The named ops' weights: layer norm scale and shift, q, k, v projections (and biases) inside
  // the fused qkv parameter, output projection (bias), layer norm, feed-forward (biases).
  std::vector<ParamView> param_views() const override {
    const Idx k = idx();
    auto whole = [](int param, std::vector<std::int64_t> shape) {
      std::vector<int> axes(shape.size());
      for (std::size_t i = 0; i < axes.size(); ++i) axes[i] = int(i);
      return ParamView{param, shape, axes, std::vector<std::int64_t>(shape.size(), 0)};
    };
    std::vector<ParamView> v = {whole(k.ln1g, {d_}), whole(k.ln1b, {d_})};
    for (std::int64_t which = 0; which < 3; ++which) {
      v.push_back(ParamView{k.wqkv, {d_, 3, h_, dkv_}, {0, 2, 3}, {0, which, 0, 0}});
      if (biases_) v.push_back(ParamView{k.bqkv, {3, h_, dkv_}, {1, 2}, {which, 0, 0}});
    }
    v.push_back(whole(k.wo, {h_, dkv_, d_}));
    if (biases_) v.push_back(whole(k.bo, {d_}));
    v.push_back(whole(k.ln2g, {d_}));
    v.push_back(whole(k.ln2b, {d_}));
    v.push_back(whole(k.w1, {d_, ff_}));
    if (biases_) v.push_back(whole(k.b1, {ff_}));
    v.push_back(whole(k.w2, {ff_, d_}));
    if (biases_) v.push_back(whole(k.b2, {d_}));
    return v;
  }
  static const float* bias(const std::vector<Tensor>& p, int i) { return i < 0 ? nullptr : p[std::size_t(i)].data(); }
  static float* bias(std::vector<Tensor>& g, int i) { return i < 0 ? nullptr : g[std::size_t(i)].data(); }

  // Saved tensors: 0 x, 1 h1, 2 mean1, 3 rstd1, 4 qkv, 5 probs, 6 ctx, 7 x2, 8 h2, 9 mean2, 10 rstd2, 11 f.
  Tensor forward(const std::vector<Tensor>& p, Tensor x, const Batch& b, Saved& s, double&) const override {
    const Idx k = idx();
    const I T = b.count * seq_, inner = h_ * dkv_;
    Tensor h1(x.size()), mean1(static_cast<std::size_t>(T)), rstd1(static_cast<std::size_t>(T)), qkv(std::size_t(T * 3 * inner));
    Tensor probs(std::size_t(b.count * h_ * seq_ * seq_)), ctx(std::size_t(T * inner)), x2(x.size());
    kernels::layernorm_forward(x.data(), p[std::size_t(k.ln1g)].data(), p[std::size_t(k.ln1b)].data(), h1.data(), mean1.data(), rstd1.data(), T, d_);
    kernels::dense_forward(h1.data(), p[std::size_t(k.wqkv)].data(), bias(p, k.bqkv), qkv.data(), T, d_, 3 * inner);
    kernels::attention_forward(qkv.data(), ctx.data(), probs.data(), b.count, seq_, h_, dkv_);
    kernels::dense_forward(ctx.data(), p[std::size_t(k.wo)].data(), bias(p, k.bo), x2.data(), T, inner, d_);
    kernels::add(x2.data(), x.data(), x2.data(), I(x2.size()));
    Tensor h2(x.size()), mean2(static_cast<std::size_t>(T)), rstd2(static_cast<std::size_t>(T)), f(std::size_t(T * ff_)), y(x.size());
    kernels::layernorm_forward(x2.data(), p[std::size_t(k.ln2g)].data(), p[std::size_t(k.ln2b)].data(), h2.data(), mean2.data(), rstd2.data(), T, d_);
    kernels::dense_forward(h2.data(), p[std::size_t(k.w1)].data(), bias(p, k.b1), f.data(), T, d_, ff_);
    kernels::relu_forward(f.data(), f.data(), I(f.size()));
    kernels::dense_forward(f.data(), p[std::size_t(k.w2)].data(), bias(p, k.b2), y.data(), T, ff_, d_);
    kernels::add(y.data(), x2.data(), y.data(), I(y.size()));
    s.tensors = take(std::move(x), std::move(h1), std::move(mean1), std::move(rstd1), std::move(qkv), std::move(probs), std::move(ctx),
                 std::move(x2), std::move(h2), std::move(mean2), std::move(rstd2), std::move(f));
    return y;
  }

  Tensor backward(const std::vector<Tensor>& p, const Tensor& dy, const Batch& b, const Saved& s, std::vector<Tensor>& g) const override {
    const Idx k = idx();
    const I T = b.count * seq_, inner = h_ * dkv_;
    const auto& t = s.tensors;
    Tensor df(t[11].size()), dh2(dy.size()), dx2(dy.size());
    kernels::dense_backward(t[11].data(), p[std::size_t(k.w2)].data(), dy.data(), df.data(), g[std::size_t(k.w2)].data(), bias(g, k.b2), T, ff_, d_);
    kernels::relu_backward(t[11].data(), df.data(), df.data(), I(df.size()));
    kernels::dense_backward(t[8].data(), p[std::size_t(k.w1)].data(), df.data(), dh2.data(), g[std::size_t(k.w1)].data(), bias(g, k.b1), T, d_, ff_);
    kernels::layernorm_backward(t[7].data(), p[std::size_t(k.ln2g)].data(), t[9].data(), t[10].data(), dh2.data(), dx2.data(),
                                g[std::size_t(k.ln2g)].data(), g[std::size_t(k.ln2b)].data(), T, d_);
    kernels::add(dx2.data(), dy.data(), dx2.data(), I(dx2.size()));  // residual around the feed-forward
    Tensor dctx(t[6].size()), dqkv(t[4].size()), dh1(dy.size()), dx(dy.size());
    kernels::dense_backward(t[6].data(), p[std::size_t(k.wo)].data(), dx2.data(), dctx.data(), g[std::size_t(k.wo)].data(), bias(g, k.bo), T, inner, d_);
    kernels::attention_backward(t[4].data(), t[5].data(), dctx.data(), dqkv.data(), b.count, seq_, h_, dkv_);
    kernels::dense_backward(t[1].data(), p[std::size_t(k.wqkv)].data(), dqkv.data(), dh1.data(), g[std::size_t(k.wqkv)].data(), bias(g, k.bqkv), T, d_,
                            3 * inner);
    kernels::layernorm_backward(t[0].data(), p[std::size_t(k.ln1g)].data(), t[2].data(), t[3].data(), dh1.data(), dx.data(),
                                g[std::size_t(k.ln1g)].data(), g[std::size_t(k.ln1b)].data(), T, d_);
    kernels::add(dx.data(), dx2.data(), dx.data(), I(dx.size()));  // residual around the attention
    return dx;
  }

 private:
  std::int64_t d_, ff_, h_, dkv_, seq_;
  bool biases_;
};

class LmOutput : public LayerFunction {
 public:
  LmOutput(std::int64_t d, std::int64_t vocab, std::int64_t seq) : d_(d), vocab_(vocab), seq_(seq) {}
  std::vector<std::int32_t> targets(const Batch& b) const override { return lm_tokens(b, seq_, vocab_, true); }
  std::vector<Tensor> init(std::uint64_t seed) const override {
    return {init_tensor(seed, 0, 1, d_, "ones"), init_tensor(seed, 1, 1, d_, "zeros"), init_tensor(seed, 2, d_, vocab_, "xavier")};
  }
  // Saved: 0 x, 1 h, 2 mean, 3 rstd, 4 probs.
  Tensor forward(const std::vector<Tensor>& p, Tensor x, const Batch& b, Saved& s, double& loss) const override {
    const I T = b.count * seq_;
    Tensor h(x.size()), mean(static_cast<std::size_t>(T)), rstd(static_cast<std::size_t>(T)), logits(std::size_t(T * vocab_)), probs(logits.size());
    kernels::layernorm_forward(x.data(), p[0].data(), p[1].data(), h.data(), mean.data(), rstd.data(), T, d_);
    kernels::dense_forward(h.data(), p[2].data(), nullptr, logits.data(), T, d_, vocab_);
    s.ids = lm_tokens(b, seq_, vocab_, true);
    loss += kernels::softmax_xent_forward(logits.data(), s.ids.data(), probs.data(), T, vocab_, 1.0 / double(b.global * seq_));
    s.tensors = take(std::move(x), std::move(h), std::move(mean), std::move(rstd), std::move(probs));
    return Tensor{};
  }
  Tensor backward(const std::vector<Tensor>& p, const Tensor&, const Batch& b, const Saved& s, std::vector<Tensor>& g) const override {
    const I T = b.count * seq_;
    const auto& t = s.tensors;
    Tensor dlogits(t[4].size()), dh(t[0].size()), dx(t[0].size());
    kernels::softmax_xent_backward(t[4].data(), s.ids.data(), dlogits.data(), T, vocab_, 1.0 / double(b.global * seq_));
    kernels::dense_backward(t[1].data(), p[2].data(), dlogits.data(), dh.data(), g[2].data(), nullptr, T, d_, vocab_);
    kernels::layernorm_backward(t[0].data(), p[0].data(), t[2].data(), t[3].data(), dh.data(), dx.data(), g[0].data(), g[1].data(), T, d_);
    return dx;
  }

 private:
  std::int64_t d_, vocab_, seq_;
};

}  // namespace

std::shared_ptr<const LayerFunction> mlp_dense_function(std::int64_t in, std::int64_t out, bool first, std::int64_t input,
                                                        std::int64_t classes) {
  return std::make_shared<MlpDense>(in, out, first, MlpData{input, classes});
}
std::shared_ptr<const LayerFunction> mlp_classifier_function(std::int64_t in, std::int64_t classes, bool first, std::int64_t input) {
  return std::make_shared<MlpClassifier>(in, classes, first, MlpData{input, classes});
}
std::shared_ptr<const LayerFunction> embedding_function(std::int64_t vocab, std::int64_t d, std::int64_t seq) {
  return std::make_shared<Embedding>(vocab, d, seq);
}
std::shared_ptr<const LayerFunction> block_function(std::int64_t d, std::int64_t ff, std::int64_t heads, std::int64_t dkv, std::int64_t seq,
                                                   bool biases) {
  return std::make_shared<Block>(d, ff, heads, dkv, seq, biases);
}
std::shared_ptr<const LayerFunction> lm_output_function(std::int64_t d, std::int64_t vocab, std::int64_t seq) {
  return std::make_shared<LmOutput>(d, vocab, seq);
}

}  // namespace tpusim
