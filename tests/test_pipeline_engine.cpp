// Pipeline schedules on the engine, against the oracles of shared/MODELS.md ("GPipe
// mechanisms"). One simulation per test case (catch_discover_tests: one process each).
#include <catch2/catch.hpp>

#include "schedules/pipeline.hpp"
#include "schedules/step_builder.hpp"
#include "sim/engine.hpp"

using namespace tpusim;

namespace {

/// An mlp of identical layers (input = width, the classifier small) on a v3 slice, the study
/// then patched in memory. `free_communication`: ICI and on-chip links with no latency and
/// unbounded bandwidth.
Study mlp_pipeline(const std::string& kind, int K, int M, bool remat, std::int64_t micro_batch, int layers,
                   bool free_communication, int virtual_stages = 1) {
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-32",
    "model": {"kind": "mlp", "width": 1024, "input": 1024, "classes": 1024},
    "optimizer": {"kind": "sgd"}})");
  j["model"]["layers"] = layers;
  j["batch"] = micro_batch * M;
  j["schedule"] = Json{{"kind", kind}, {"stages", K}, {"microbatches", M}, {"remat", remat}};
  if (virtual_stages > 1) j["schedule"]["virtual_stages"] = virtual_stages;
  Study s = parse_study(j, "test");
  if (free_communication) {
    s.hardware.chip.ici_bandwidth_bytes_per_s = 1e30;
    s.hardware.chip.ici_latency_s = 0;
    s.hardware.chip.onchip_bandwidth_bytes_per_s = 1e30;
    s.hardware.chip.onchip_latency_s = 0;
  }
  return s;
}

double bubble_fraction(const sim::TaskGraph& g, const sim::SimResult& r) {
  double idle = 0;
  int used = 0;
  for (int c = 0; c < g.cores(); ++c) {
    if (g.program(c).empty()) continue;
    ++used;
    idle += (r.step_time_s - r.cores[c].busy_s) / r.step_time_s;
  }
  return idle / used;
}

void check_bubble(int K, int M, const std::string& kind = "gpipe") {
  // 8 layers per stage (the classifier is as wide as the hidden layers), large micro-batches so
  // compute dwarfs the update and per-op overhead. Without re-materialization: recomputing
  // while waiting for a gradient would fill part of the bubble, which the oracle ignores.
  const Study s = mlp_pipeline(kind, K, M, false, 16384, 8 * K - 1, true);
  const BuiltStep step = s.schedule->build(s);
  const auto r = sim::simulate(step.graph, s.hardware, s.slice);
  const double ideal = double(K - 1) / double(M + K - 1);
  INFO(kind << " K=" << K << " M=" << M << " ideal " << ideal);
  const double measured = bubble_fraction(step.graph, r);
  INFO("measured " << measured);
  CHECK(std::fabs(measured - ideal) <= 0.02);
}

/// Interleaved 1F1B: 32 identical layers in K x V chunks; the bubble shrinks by V (Narayanan et
/// al., 2021: (K - 1) / (V M + K - 1)).
void check_interleaved_bubble(int K, int M, int V) {
  const Study s = mlp_pipeline("one_f_one_b", K, M, false, 16384, 31, true, V);
  const BuiltStep step = s.schedule->build(s);
  const auto r = sim::simulate(step.graph, s.hardware, s.slice);
  const double ideal = double(K - 1) / double(V * M + K - 1);
  INFO("K=" << K << " M=" << M << " V=" << V << " ideal " << ideal);
  const double measured = bubble_fraction(step.graph, r);
  INFO("measured " << measured);
  CHECK(std::fabs(measured - ideal) <= 0.03);
  CHECK(step.details["bubble_fraction_ideal"].get<double>() == Approx(ideal));
}

}  // namespace

TEST_CASE("interleaved 1F1B bubble with free communication K=4 M=8 V=2", "[pipeline][oracle][interleaved]") {
  check_interleaved_bubble(4, 8, 2);
}
TEST_CASE("interleaved 1F1B bubble with free communication K=4 M=8 V=4", "[pipeline][oracle][interleaved]") {
  check_interleaved_bubble(4, 8, 4);
}

// 1F1B (PipeDream-flush) only reorders the work between warm-up and drain: with balanced stages
// its bubble is GPipe's, (K - 1) / (M + K - 1) (Narayanan et al., 2021).
#define BUBBLE_1F1B_CASE(K, M)                                                            \
  TEST_CASE("1F1B bubble with free communication K=" #K " M=" #M, "[pipeline][oracle]") { \
    check_bubble(K, M, "one_f_one_b");                                                    \
  }
BUBBLE_1F1B_CASE(2, 4)
BUBBLE_1F1B_CASE(4, 4)
BUBBLE_1F1B_CASE(4, 8)
BUBBLE_1F1B_CASE(4, 32)
BUBBLE_1F1B_CASE(8, 16)

#define BUBBLE_CASE(K, M)                                                                  \
  TEST_CASE("GPipe bubble with free communication K=" #K " M=" #M, "[pipeline][oracle]") { \
    check_bubble(K, M);                                                                    \
  }
BUBBLE_CASE(2, 1)
BUBBLE_CASE(2, 4)
BUBBLE_CASE(2, 8)
BUBBLE_CASE(2, 32)
BUBBLE_CASE(4, 1)
BUBBLE_CASE(4, 4)
BUBBLE_CASE(4, 8)
BUBBLE_CASE(4, 32)
BUBBLE_CASE(8, 1)
BUBBLE_CASE(8, 4)
BUBBLE_CASE(8, 8)
BUBBLE_CASE(8, 32)

namespace {

/// Peak activation bytes on stage 0's core, with the oracle quantities of that stage.
struct StageMemory {
  double peak_activations = 0;
  double stage_stash = 0;  // one micro-batch of the stage's activations
  double stage_input = 0;  // one micro-batch of the stage's input
};

StageMemory run_memory(const std::string& kind, int K, int M, bool remat) {
  const Study s = mlp_pipeline(kind, K, M, remat, 64, 4 * K - 1, false);
  const auto* p = dynamic_cast<const Pipeline*>(s.schedule.get());
  REQUIRE(p);
  const BuiltStep step = s.schedule->build(s);
  const auto r = sim::simulate(step.graph, s.hardware, s.slice);
  const int core = p->placement(s)[0][0];
  StepBuilder b(s, s.cores());
  const auto sizes = p->partition(s).sizes;
  const LayerCost c = b.cost(LayerRange{0, sizes[0]}, 64);
  return {r.cores[core].hbm_at_peak[int(sim::MemoryCategory::Activations)], c.stash_bytes, c.input_bytes};
}

}  // namespace

TEST_CASE("without re-materialization GPipe keeps every micro-batch's activations (M=8)",
          "[pipeline][memory]") {
  const auto m = run_memory("gpipe", 4, 8, false);
  CHECK(m.peak_activations == Approx(8 * m.stage_stash).epsilon(1e-9));
}

TEST_CASE("without re-materialization GPipe keeps every micro-batch's activations (M=2)",
          "[pipeline][memory]") {
  const auto m = run_memory("gpipe", 4, 2, false);
  CHECK(m.peak_activations == Approx(2 * m.stage_stash).epsilon(1e-9));
}

TEST_CASE("with re-materialization GPipe keeps inputs plus one micro-batch of a stage (M=8)",
          "[pipeline][memory]") {
  const auto m = run_memory("gpipe", 4, 8, true);
  CHECK(m.peak_activations == Approx(8 * m.stage_input + m.stage_stash).epsilon(1e-9));
  CHECK(m.peak_activations < 0.5 * 8 * m.stage_stash);
}

TEST_CASE("1F1B keeps at most K micro-batches in flight on the first stage", "[pipeline][memory]") {
  const auto m = run_memory("one_f_one_b", 4, 8, false);
  CHECK(m.peak_activations == Approx(4 * m.stage_stash).epsilon(1e-9));
}

TEST_CASE("1F1B with re-materialization", "[pipeline][memory]") {
  const auto m = run_memory("one_f_one_b", 4, 8, true);
  CHECK(m.peak_activations == Approx(4 * m.stage_input + m.stage_stash).epsilon(1e-9));
}

TEST_CASE("GPipe with K=1 is the single-core step: forward + backward + update", "[pipeline][oracle]") {
  const Study s = mlp_pipeline("gpipe", 1, 1, false, 256, 4, false);
  const BuiltStep step = s.schedule->build(s);
  const auto r = sim::simulate(step.graph, s.hardware, s.slice);
  const CostModel cm(s.hardware.core);
  double expected = 0;
  for (const auto& layer : s.model.layers) {
    const auto w = layer.work(256);
    for (const auto& op : w.forward) expected += cm.cost(op).seconds;
    for (const auto& op : w.backward) expected += cm.cost(op).seconds;
    expected += cm.cost(s.optimizer.update_op(s.model, layer)).seconds;
  }
  CHECK(r.step_time_s == Approx(expected).epsilon(1e-9));
}

TEST_CASE("stage transfers cost what the link says", "[pipeline][oracle]") {
  // Two stages on two chips (placement given): the only communication is one activation and one
  // gradient transfer of the boundary, each latency + bytes / bandwidth, on the critical path.
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8",
    "model": {"kind": "mlp", "layers": 3, "width": 1024, "input": 1024, "classes": 8}, "batch": 64,
    "optimizer": {"kind": "sgd"},
    "schedule": {"kind": "gpipe", "stages": 2, "microbatches": 1, "remat": false, "partition": [2, 2], "placement": [[0, 2]]}})");
  const Study s = parse_study(j, "test");
  const BuiltStep step = s.schedule->build(s);
  const auto r = sim::simulate(step.graph, s.hardware, s.slice);
  StepBuilder b(s, s.cores());
  const LayerCost c0 = b.cost(LayerRange{0, 2}, 64), c1 = b.cost(LayerRange{2, 4}, 64);
  const CostModel cm(s.hardware.core);
  double update0 = 0;
  for (int l = 0; l < 2; ++l) update0 += cm.cost(s.optimizer.update_op(s.model, s.model.layers[l])).seconds;
  const double hop =
      s.hardware.chip.ici_latency_s + c0.output_bytes / s.hardware.chip.ici_bandwidth_bytes_per_s;
  CHECK(c0.output_bytes == Approx(64.0 * 1024 * 2));
  CHECK(r.step_time_s ==
        Approx(c0.forward_s + hop + c1.forward_s + c1.backward_s + hop + c0.backward_s + update0)
            .epsilon(1e-9));
}

TEST_CASE("a range's backward holds one layer's gradients beyond what it kept, less what later layers freed",
          "[pipeline][memory]") {
  // mlp of width 1024 (bf16), micro-batch 64. A hidden layer keeps its input and its ReLU output
  // (2 x 64 x 1024 x 2 B) and its backward holds its output and input gradients (the same). The
  // classifier keeps its input and the logits' gradient, computed with the loss in the forward;
  // its backward writes only its input gradient (64 x 1024 x 2 B). Run last to first: the
  // classifier's 128 KiB first; when the hidden layer below runs, the classifier's 256 KiB are
  // freed, more than its 256 KiB of gradients need: the range holds 128 KiB beyond its start.
  const Study s = mlp_pipeline("gpipe", 1, 1, false, 64, 3, false);
  StepBuilder b(s, s.cores());
  const double row = 64.0 * 1024 * 2;
  CHECK(b.cost(LayerRange{0, 4}, 64).backward_workspace_bytes == Approx(row));
  CHECK(b.cost(LayerRange{3, 4}, 64).backward_workspace_bytes == Approx(row));
  CHECK(b.cost(LayerRange{0, 3}, 64).backward_workspace_bytes == Approx(2 * row));
  CHECK(b.cost(LayerRange{1, 2}, 64).stash_bytes == Approx(2 * row));
  CHECK(b.cost(LayerRange{3, 4}, 64).stash_bytes == Approx(2 * row));
}

namespace {

/// Each stage's peak walked from its program (what the memory-aware partition checks) against
/// the engine's simulated peak of that stage's core.
void check_stage_peaks(const std::string& kind, bool remat) {
  const Study s = mlp_pipeline(kind, 4, 8, remat, 64, 15, false);
  const auto* p = dynamic_cast<const Pipeline*>(s.schedule.get());
  REQUIRE(p);
  const BuiltStep step = s.schedule->build(s);
  const auto r = sim::simulate(step.graph, s.hardware, s.slice);
  StepBuilder b(s, s.cores());
  const auto sizes = p->partition(s).sizes;
  for (int stage = 0, first = 0; stage < 4; first += sizes[stage], ++stage) {
    INFO(kind << " remat " << remat << " stage " << stage);
    const int core = p->placement(s)[0][stage];
    CHECK(p->stage_peak_bytes(b, s, {first, first + sizes[stage]}, stage) ==
          Approx(r.cores[core].peak_hbm_bytes).epsilon(1e-9));
  }
}

}  // namespace

TEST_CASE("a GPipe stage's peak walked from its program is the simulated peak (remat)",
          "[pipeline][memory]") {
  check_stage_peaks("gpipe", true);
}
TEST_CASE("a GPipe stage's peak walked from its program is the simulated peak", "[pipeline][memory]") {
  check_stage_peaks("gpipe", false);
}
TEST_CASE("a 1F1B stage's peak walked from its program is the simulated peak (remat)", "[pipeline][memory]") {
  check_stage_peaks("one_f_one_b", true);
}
TEST_CASE("a 1F1B stage's peak walked from its program is the simulated peak", "[pipeline][memory]") {
  check_stage_peaks("one_f_one_b", false);
}
