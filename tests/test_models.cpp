// Model descriptions: parameter counts and FLOPs against hand-derived formulas.
#include <catch2/catch.hpp>

#include "models/model.hpp"

using namespace tpusim;

namespace {

Model build(const std::string& text) {
  Problems problems("test");
  Model m = build_model(Json::parse(text), "model", problems);
  problems.throw_if_any();
  return m;
}

double total_flops(const Model& m, std::int64_t batch, bool backward) {
  double f = 0;
  for (const auto& l : m.layers)
    for (const auto& op : backward ? l.work(batch).backward : l.work(batch).forward) f += op.model_flops();
  return f;
}

}  // namespace

TEST_CASE("transformer parameters: 12 d^2 L + 2 V d plus biases and norms, exactly", "[models]") {
  const std::int64_t L = 48, d = 2048, ff = 8192, V = 32000;
  const Model m = build(R"({"kind": "transformer", "layers": 48, "d_model": 2048, "d_ff": 8192, "heads": 32, "vocab": 32000, "seq_len": 1024})");
  const std::int64_t block = 4 * d * d + 2 * d * ff + (3 * d + d + ff + d) + 4 * d;
  CHECK(m.params() == L * block + V * d + (V * d + 2 * d));
  CHECK(double(m.params()) == Approx(2.55e9).epsilon(0.01));  // MODELS.md check value for L = 48
  CHECK(m.layers.size() == 50);
}

TEST_CASE("transformer forward FLOPs per token: 2 x matmul params + attention", "[models]") {
  const std::int64_t d = 512, ff = 2048, s = 128, V = 1000, L = 2;
  const Model m = build(R"({"kind": "transformer", "layers": 2, "d_model": 512, "d_ff": 2048, "heads": 8, "vocab": 1000, "seq_len": 128})");
  const double matmul_params = double(L) * (4 * d * d + 2 * d * ff) + double(V) * d;
  const double per_token = 2 * matmul_params + double(L) * 4 * s * d;
  CHECK(total_flops(m, 3, false) == Approx(3 * s * per_token));
  CHECK(total_flops(m, 3, true) == Approx(2 * total_flops(m, 3, false)));
}

TEST_CASE("mlp parameters and FLOPs", "[models]") {
  const Model m = build(R"({"kind": "mlp", "layers": 3, "width": 100, "input": 50, "classes": 10})");
  CHECK(m.params() == (50 * 100 + 100) + 2 * (100 * 100 + 100) + (100 * 10 + 10));
  CHECK(total_flops(m, 4, false) == Approx(2.0 * 4 * (50 * 100 + 2 * 100 * 100 + 100 * 10)));
}

TEST_CASE("activation stash grows linearly with the batch", "[models]") {
  const Model m = build(R"({"kind": "transformer", "layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 100, "seq_len": 64})");
  const auto& block = m.layers[1];
  CHECK(block.work(8).stash_bytes == Approx(2 * block.work(4).stash_bytes));
  CHECK(block.work(4).output_bytes == Approx(4.0 * 64 * 256 * 2));
}

TEST_CASE("model validation names the field", "[models]") {
  Problems problems("test");
  build_model(Json::parse(R"({"kind": "transformer", "layers": 0, "d_model": 100, "d_ff": 1, "heads": 3, "vocab": 1, "seq_len": 1, "bogus": 1})"),
              "model", problems);
  CHECK_THROWS_WITH(problems.throw_if_any(), Catch::Contains("model.layers") && Catch::Contains("model.bogus"));
  Problems p2("test");
  build_model(Json::parse(R"({"kind": "transformer", "layers": 1, "d_model": 100, "d_ff": 1, "heads": 3, "vocab": 1, "seq_len": 1})"), "model", p2);
  CHECK_THROWS_WITH(p2.throw_if_any(), Catch::Contains("model.heads"));
  Problems p3("test");
  build_model(Json::parse(R"({"kind": "resnet9000"})"), "model", p3);
  CHECK_THROWS_WITH(p3.throw_if_any(), Catch::Contains("model.kind") && Catch::Contains("transformer"));
}

TEST_CASE("every registered model kind builds", "[models][registry]") {
  CHECK(model_builders().size() == 2);
  CHECK(model_builders().count("mlp"));
  CHECK(model_builders().count("transformer"));
}
