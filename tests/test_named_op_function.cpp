// Functional mode's host math interpreted from the named ops, without the engine: every layer's
// backward against finite differences of its forward, and a batch split in two adding up to the
// whole batch.
#include <catch2/catch.hpp>
#include <cmath>

#include "models/named_op_function.hpp"
#include "schedules/study.hpp"

using namespace tpusim;

namespace {

Study tiny(const Json& model) {
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8", "batch": 4, "optimizer": {"kind": "sgd"},
    "schedule": {"kind": "data_parallel", "replicas": 1}})");
  j["model"] = model;
  return parse_study(j, "test");
}

const Json kGeluTransformer = Json::parse(
    R"({"kind": "transformer", "layers": 1, "d_model": 8, "d_ff": 12, "heads": 2, "vocab": 7, "seq_len": 3,
        "activation": "gelu"})");

/// Convolutions (one strided), their ReLUs, a global average pool and a classifier.
const Json kConvNet = Json::parse(R"({"kind": "sequential", "layers": [
    {"kind": "conv2d", "size": 6, "in_channels": 2, "out_channels": 3, "kernel": 3, "batch_norm": false},
    {"kind": "conv2d", "size": 6, "in_channels": 3, "out_channels": 4, "kernel": 3, "stride": 2,
     "batch_norm": false},
    {"kind": "global_pool"}, {"kind": "classifier", "in": 4, "classes": 3}]})");
/// The same with batch norms after the convolutions (statistics over the call's examples).
const Json kConvBnNet = Json::parse(R"({"kind": "sequential", "layers": [
    {"kind": "conv2d", "size": 6, "in_channels": 2, "out_channels": 3, "kernel": 3},
    {"kind": "conv2d", "size": 6, "in_channels": 3, "out_channels": 4, "kernel": 3, "stride": 2},
    {"kind": "global_pool"}, {"kind": "classifier", "in": 4, "classes": 3}]})");

/// The same model with another feed-forward activation (the gated ones: SwiGLU, GEGLU).
Json with_activation(Json model, const std::string& activation) {
  model["activation"] = activation;
  return model;
}

/// The same model with grouped key/value heads (1: multi-query attention).
Json with_kv_heads(Json model, int kv_heads) {
  model["kv_heads"] = kv_heads;
  return model;
}

/// Loss of a layer call as a function of its parameters and input: the layer's own loss, or the
/// sum of its output times fixed weights `r`.
struct Probe {
  const LayerFunction& fn;
  Batch batch;
  Tensor in, r;
  double operator()(const std::vector<Tensor>& params, const Tensor& x) const {
    Saved s;
    double loss = 0;
    const Tensor y = fn.forward(params, x, batch, s, loss);
    for (std::size_t i = 0; i < y.size(); ++i) loss += double(y[i]) * r[i];
    return loss;
  }
};

Tensor noise(std::size_t n, std::uint64_t salt) {
  Tensor t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = unit(mix(salt, i));
  return t;
}

}  // namespace

TEST_CASE("every named-op layer's backward matches finite differences of its forward",
          "[functional][kernels]") {
  for (const Json& model : {kGeluTransformer, with_activation(kGeluTransformer, "swiglu"),
                            with_activation(kGeluTransformer, "geglu"),
                            Json::parse(R"({"kind": "mlp", "layers": 2, "width": 6, "input": 5,
                                                               "classes": 4})"),
                            kConvNet, kConvBnNet}) {
    const Study s = tiny(model);
    for (std::size_t l = 0; l < s.model.layers.size(); ++l) {
      const LayerFunction& fn = *s.model.layers[l].function;
      std::vector<Tensor> params = fn.init(l + 3);
      for (auto& p : params)  // away from zero biases and unit norm scales: every path matters
        for (std::size_t i = 0; i < p.size(); ++i) p[i] += 0.1f * unit(mix(l, i, p.size()));
      const Batch batch{0, 4, 4, 0, 5};
      Saved saved;
      double loss = 0;
      // The previous layer's output for the batch of 4 (what the layer's boundary says it reads).
      const std::size_t width =
          l == 0 ? 0 : std::size_t(s.model.layers[l].work(4).input_bytes / s.model.activation_bytes);
      const Tensor in = noise(width, 17 + l);
      const Tensor y = fn.forward(params, in, batch, saved, loss);
      const Probe probe{fn, batch, in, noise(y.size(), 29 + l)};
      std::vector<Tensor> grads;
      for (const auto& p : params) grads.emplace_back(p.size(), 0.0f);
      const Tensor dx = fn.backward(params, probe.r, batch, saved, grads);
      INFO(model["kind"] << " layer " << s.model.layers[l].name);
      // A ReLU's kink must not fall within the step: smaller ones for the mlp and the convolutions.
      const double h = model["kind"] == "transformer" ? 1e-2 : model["kind"] == "mlp" ? 1e-3 : 2e-4;
      for (std::size_t k = 0; k < params.size(); ++k)
        for (std::size_t i = 0; i < params[k].size(); i += 1 + params[k].size() / 7) {
          auto up = params, down = params;
          up[k][i] += float(h);
          down[k][i] -= float(h);
          const double numeric = (probe(up, in) - probe(down, in)) / (2 * h);
          INFO("parameter " << k << " element " << i);
          CHECK(grads[k][i] == Approx(numeric).margin(2e-3).epsilon(2e-2));
        }
      for (std::size_t i = 0; i < dx.size(); i += 1 + dx.size() / 9) {
        Tensor up = in, down = in;
        up[i] += float(h);
        down[i] -= float(h);
        INFO("input element " << i);
        CHECK(dx[i] ==
              Approx((probe(params, up) - probe(params, down)) / (2 * h)).margin(2e-3).epsilon(2e-2));
      }
    }
  }
}

TEST_CASE("a named-op layer's parameters are its ops' weights, one tensor per copy", "[functional]") {
  const Study s = tiny(kGeluTransformer);
  const auto& block = s.model.layers[1];
  const auto params = block.function->init(1);
  std::size_t expected = 0;
  for (const auto& op : block.named_ops(1))
    if (op.b.weight) expected += std::size_t(op.b.copies);
  REQUIRE(params.size() == expected);
  CHECK(params[0] == Tensor(8, 1.0f));  // the first layer norm's scale
  CHECK(params[1] == Tensor(8, 0.0f));  // and its shift
  double elements = 0;
  for (const auto& p : params) elements += double(p.size());
  CHECK(elements == double(block.params()));  // the same weights the cost model counts
}

TEST_CASE("layers without host math get no function: functional mode refuses the model", "[functional]") {
  Json dropout = kGeluTransformer;
  dropout["dropout"] = 0.1;
  for (const auto& layer : tiny(dropout).model.layers) CHECK(layer.function == nullptr);
  Json shared = kGeluTransformer;
  shared["shared_embeddings"] = true;
  for (const auto& layer : tiny(shared).model.layers) CHECK(layer.function == nullptr);
}

TEST_CASE("windowed max and average pools' backward matches finite differences", "[functional][kernels]") {
  // One layer: convolution, ReLU, 3x3 max pool with stride 2, 2x2 average pool, global average
  // pool, a classifier; its parameters' gradients against central differences of its loss.
  const auto ops = [](std::int64_t b) {
    const Dim B{"batch", b}, C{"channels", 3}, V{"vocab", 4};
    NamedOp average = pool("average", b, 3, 3, 2, 1);
    average.math = NamedOp::Math::AveragePool;
    NamedOp bias = elementwise("bias", act({B, V}), 1, weight({V}));
    bias.math = NamedOp::Math::Bias;
    NamedOp xent = reduction("xent", act({B, V}, true), "vocab");
    xent.math = NamedOp::Math::SoftmaxXent;
    return std::vector<NamedOp>{conv("conv", b, 6, 2, 3, 3, 1),
                                relu("relu", image(b, 6, 3)),
                                pool("max", b, 6, 3, 3, 2),
                                average,
                                pool("global", b, 3, 3, 3, 1),
                                einsum("fc", act({B, C}, true), weight({C, V}), act({B, V})),
                                bias,
                                xent};
  };
  REQUIRE(has_host_math(ops(1)));
  const auto fn = named_op_function(ops, mlp_data(6 * 6 * 2, 4), true);
  std::vector<Tensor> params = fn->init(3);
  for (auto& p : params)
    for (std::size_t i = 0; i < p.size(); ++i) p[i] += 0.1f * unit(mix(7, i, p.size()));
  const Batch batch{0, 4, 4, 0, 5};
  const Probe probe{*fn, batch, {}, {}};
  Saved saved;
  double loss = 0;
  fn->forward(params, {}, batch, saved, loss);
  std::vector<Tensor> grads;
  for (const auto& p : params) grads.emplace_back(p.size(), 0.0f);
  fn->backward(params, {}, batch, saved, grads);
  const double h = 1e-3;
  for (std::size_t k = 0; k < params.size(); ++k)
    for (std::size_t i = 0; i < params[k].size(); i += 1 + params[k].size() / 11) {
      auto up = params, down = params;
      up[k][i] += float(h);
      down[k][i] -= float(h);
      INFO("parameter " << k << " element " << i);
      CHECK(grads[k][i] == Approx((probe(up, {}) - probe(down, {})) / (2 * h)).margin(2e-3).epsilon(2e-2));
    }
}
