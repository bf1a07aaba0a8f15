// Functional mode's host math: one training step of a 4-layer Transformer (d_model 512,
// batch 16, sequence 128) on one core, against the raw OpenBLAS sgemm rate measured in the same
// run (the kernels' efficiency = step FLOP/s over sgemm FLOP/s).
#include <benchmark/benchmark.h>

#include <chrono>

#include "models/kernels/kernels.hpp"
#include "schedules/functional_runtime.hpp"

using namespace tpusim;

namespace {

/// The step's matmul FLOPs: forward, input and weight gradients, from the model's lowering.
double step_flops(const Study& s) {
  double flops = 0;
  for (const auto& layer : s.model.layers) {
    const auto w = layer.work(s.batch);
    for (const auto& op : w.forward) flops += op.model_flops();
    for (const auto& op : w.backward) flops += op.model_flops();
  }
  return flops;
}

Study transformer4() {
  return parse_study(Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8", "batch": 16,
    "model": {"kind": "transformer", "activation": "relu", "layers": 4, "d_model": 512, "d_ff": 2048, "heads": 8, "vocab": 8192, "seq_len": 128},
    "optimizer": {"kind": "adam"}, "schedule": {"kind": "data_parallel", "replicas": 1}})"),
                     "bench");
}

/// sgemm at the step's largest shape (2048 tokens x 512 x 2048).
void BM_Sgemm_2048x512x2048(benchmark::State& state) {
  const kernels::I m = 2048, k = 512, n = 2048;
  std::vector<float> a(std::size_t(m * k), 0.5f), b(std::size_t(k * n), 0.25f), c(std::size_t(m * n));
  for (auto _ : state) {
    kernels::gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data());
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Sgemm_2048x512x2048)->Unit(benchmark::kMillisecond)->UseRealTime();

/// One functional training step (forward, backward, Adam update) on one core.
void BM_FunctionalStep_Transformer4(benchmark::State& state) {
  const Study s = transformer4();
  FunctionalRuntime rt(s, 1);
  const LayerRange all{0, int(s.model.layers.size())};
  rt.hold(0, all);
  int step = 0;
  for (auto _ : state) {
    rt.begin_step(step++);
    rt.forward(0, all, 0, s.batch, Keep::All)();
    rt.backward(0, all, 0, s.batch)();
    rt.update(0, all, 0, 1)();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(step_flops(s) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_FunctionalStep_Transformer4)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
