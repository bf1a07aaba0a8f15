// Engine benchmarks. SimGrid runs one simulation per process, so every engine benchmark does
// exactly one iteration and scripts/bench.sh runs each in its own process
// (--benchmark_filter=NAME). Graph building and lowering need no engine and iterate normally.
#include <benchmark/benchmark.h>

#include "schedules/study.hpp"
#include "sim/engine.hpp"

using namespace tpusim;

namespace {

/// One simulation of the study `json` (graph built in the timed region), with its figures as
/// counters.
void simulate_study(benchmark::State& state, const char* json) {
  for (auto _ : state) {
    const Study s = parse_study(Json::parse(json), "bench");
    const BuiltStep step = s.schedule->build(s);
    const auto r = sim::simulate(step.graph, s.hardware, s.slice);
    state.counters["tasks"] = double(step.graph.size());
    state.counters["flows"] = double(r.flows_simulated);
    state.counters["step_time_ms"] = r.step_time_s * 1e3;
  }
}

Study transformer_dp(const std::string& slice, int batch, int layers) {
  Json j = Json::parse(R"({"hardware": "tpu-v3",
    "model": {"kind": "transformer", "activation": "relu", "d_model": 1024, "d_ff": 4096, "heads": 16, "vocab": 32768, "seq_len": 512},
    "optimizer": {"kind": "adam"}, "schedule": {"kind": "data_parallel"}})");
  j["slice"] = slice;
  j["batch"] = batch;
  j["model"]["layers"] = layers;
  return parse_study(j, "bench");
}

/// A data-parallel 24-layer Transformer step on v3-2048 (2048 cores): study, graph, simulation.
void BM_Engine_DataParallelTransformer24_v3_2048(benchmark::State& state) {
  simulate_study(state, R"({"hardware": "tpu-v3", "slice": "v3-2048", "batch": 4096,
    "model": {"kind": "transformer", "activation": "relu", "layers": 24, "d_model": 1024, "d_ff": 4096, "heads": 16, "vocab": 32768, "seq_len": 512},
    "optimizer": {"kind": "adam"}, "schedule": {"kind": "data_parallel"}})");
}
BENCHMARK(BM_Engine_DataParallelTransformer24_v3_2048)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void allreduce_1024_chips(benchmark::State& state, bool symmetric) {
  for (auto _ : state) {
    const HardwareSpec hw = load_hardware("tpu-v3");
    const SliceSpec& slice = hw.slices.at("v3-2048");
    sim::TaskGraph g(sim::slice_cores(hw, slice));
    sim::Task t;
    t.kind = sim::TaskKind::Collective;
    t.name = "allreduce";
    t.group.resize(g.cores());
    for (int c = 0; c < g.cores(); ++c) t.group[c] = c;
    t.bytes = 100e6;
    g.add(std::move(t));
    sim::EngineOptions options;
    options.symmetric_collectives = symmetric;
    const auto r = sim::simulate(g, hw, slice, options);
    state.counters["flows"] = double(r.flows_simulated);
    state.counters["allreduce_ms"] = r.step_time_s * 1e3;
  }
}

/// One 100 MB all-reduce over every core of v3-2048 (1024 chips), every ring simulated.
void BM_Engine_AllReduce1024Chips_Full(benchmark::State& state) { allreduce_1024_chips(state, false); }
BENCHMARK(BM_Engine_AllReduce1024Chips_Full)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

/// The same with the exact representative-ring reduction.
void BM_Engine_AllReduce1024Chips_Symmetric(benchmark::State& state) { allreduce_1024_chips(state, true); }
BENCHMARK(BM_Engine_AllReduce1024Chips_Symmetric)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// GPipe Transformer-48 (d_model 2048) with K = 8 stages and M = 32 micro-batches on v3-8:
/// study, partition, graph and simulation, in-process.
void BM_Engine_GPipeTransformer48_K8_M32(benchmark::State& state) {
  simulate_study(state, R"({"hardware": "tpu-v3", "slice": "v3-8",
      "model": {"kind": "transformer", "activation": "relu", "layers": 48, "d_model": 2048, "d_ff": 8192, "heads": 32, "vocab": 32000, "seq_len": 1024},
      "batch": 32, "optimizer": {"kind": "rmsprop"},
      "schedule": {"kind": "gpipe", "stages": 8, "microbatches": 32, "remat": true}})");
}
BENCHMARK(BM_Engine_GPipeTransformer48_K8_M32)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

/// One MLPerf ResNet-50 step (LARS, batch 32768, weight-update sharding) on v3-2048 (2048 cores).
void BM_Engine_ResNet50Sharded_v3_2048(benchmark::State& state) {
  simulate_study(state,
                 R"({"hardware": "tpu-v3", "slice": "v3-2048", "model": {"kind": "resnet50"}, "batch": 32768,
      "optimizer": {"kind": "lars"}, "schedule": {"kind": "data_parallel", "weight_update": "sharded"}})");
}
BENCHMARK(BM_Engine_ResNet50Sharded_v3_2048)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

/// The Mesh-TensorFlow 4.9B language model (s = 5) on 512 TPU-v2 cores, mesh batch:16 x
/// model:32 with the paper's layout: study, layout, graph and simulation.
void BM_Engine_MeshLM49B_v2_512(benchmark::State& state) {
  simulate_study(
      state,
      R"({"hardware": "tpu-v2", "slice": "v2-512", "model": {"kind": "mesh_lm", "size": 5}, "batch": 256,
      "optimizer": {"kind": "adafactor"}, "schedule": {"kind": "mesh", "mesh": [["batch", 16], ["model", 32]],
      "layout": {"batch": "batch", "vocab": "model", "d_ff": "model", "heads": "model"}}})");
}
BENCHMARK(BM_Engine_MeshLM49B_v2_512)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

/// Building (no simulation) the 2048-core data-parallel graph.
void BM_BuildGraph_DataParallelTransformer24_v3_2048(benchmark::State& state) {
  const Study s = transformer_dp("v3-2048", 4096, 24);
  for (auto _ : state) {
    BuiltStep step = s.schedule->build(s);
    benchmark::DoNotOptimize(step.graph.size());
  }
}
BENCHMARK(BM_BuildGraph_DataParallelTransformer24_v3_2048)->Unit(benchmark::kMillisecond);

/// ResNet-50 on v4-8192 (4096 megacore devices, LARS, sharded updates, batch-norm groups of 8):
/// data parallelism, a mesh splitting only the batch, each normalization's statistics where the
/// program has them.
void BM_BuildGraph_ResNet50_v4_8192_DataParallel(benchmark::State& state) {
  const Study s = parse_study(Json::parse(R"({"hardware": "tpu-v4", "slice": "v4-8192", "megacore": true,
    "model": {"kind": "resnet50"}, "batch": 65536, "optimizer": {"kind": "lars"},
    "schedule": {"kind": "data_parallel", "weight_update": "sharded", "batch_norm_group": 8}})"),
                              "bench");
  for (auto _ : state) {
    BuiltStep step = s.schedule->build(s);
    state.counters["tasks"] = double(step.graph.size());
  }
}
BENCHMARK(BM_BuildGraph_ResNet50_v4_8192_DataParallel)->Unit(benchmark::kMillisecond);

/// Building the 175B Transformer's batch:512 x model:8 mesh on a full v4 pod
/// (bench/studies/transformer-175b-mesh-v4-8192.json): the largest graph tests/cli/pod_mesh.sh builds.
void BM_BuildGraph_Transformer175B_Mesh_v4_8192(benchmark::State& state) {
  const Study s = parse_study(Json::parse(R"({"hardware": "tpu-v4", "slice": "v4-8192",
    "model": {"kind": "transformer", "layers": 96, "d_model": 12288, "d_ff": 49152, "heads": 96,
              "vocab": 50257, "seq_len": 2048, "activation": "gelu"},
    "batch": 4096, "optimizer": {"kind": "adam"},
    "schedule": {"kind": "mesh", "mesh": [["batch", 512], ["model", 8]],
                 "layout": {"batch": "batch", "d_ff": "model", "heads": "model", "vocab": "model"}}})"),
                              "bench");
  for (auto _ : state) {
    BuiltStep step = s.schedule->build(s);
    state.counters["tasks"] = double(step.graph.size());
  }
}
BENCHMARK(BM_BuildGraph_Transformer175B_Mesh_v4_8192)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
