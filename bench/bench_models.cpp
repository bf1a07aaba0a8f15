// Model-library benchmarks (no engine): building a model's description and lowering every
// layer through the cost model, as `tpusim describe model` does.
#include <benchmark/benchmark.h>

#include "hardware/hardware_spec.hpp"
#include "models/describe.hpp"

using namespace tpusim;

namespace {

void describe(benchmark::State& state, const char* json, std::int64_t batch) {
  const CostModel cost(load_hardware("tpu-v3").core);
  for (auto _ : state) {
    Problems problems("bench");
    const Model m = build_model(Json::parse(json), "model", problems);
    const auto rows = describe_layers(m, cost, batch);
    benchmark::DoNotOptimize(rows.data());
    state.counters["layers"] = double(rows.size());
  }
}

/// Transformer-1663 (the GPipe paper's 83.9B-parameter model): build + lower 1665 layers.
void BM_Describe_Transformer1663(benchmark::State& state) {
  describe(
      state,
      R"({"kind": "transformer", "activation": "relu", "layers": 1663, "d_model": 2048, "d_ff": 8192, "heads": 32, "vocab": 32000, "seq_len": 1024})",
      1);
}
BENCHMARK(BM_Describe_Transformer1663)->Unit(benchmark::kMillisecond);

/// AmoebaNet-D(72, 512): build + lower 78 cells of the real cell graph.
void BM_Describe_AmoebaNet72_512(benchmark::State& state) {
  describe(state, R"({"kind": "amoebanet_d", "normal_cells": 72, "filters": 512})", 1);
}
BENCHMARK(BM_Describe_AmoebaNet72_512)->Unit(benchmark::kMillisecond);

}  // namespace
