// Schedules build graphs without the engine: structure, memory effects, FLOP totals.
#include <catch2/catch.hpp>

#include "schedules/study.hpp"

using namespace tpusim;

namespace {

Study study(const std::string& optimizer = "adam", int batch = 64, const std::string& slice = "v3-8") {
  Json j = Json::parse(R"({
    "hardware": "tpu-v3",
    "model": {"kind": "transformer", "layers": 4, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64},
    "schedule": {"kind": "data_parallel", "gradient_bucket_bytes": 4000000}})");
  j["slice"] = slice;
  j["batch"] = batch;
  j["optimizer"] = Json{{"kind", optimizer}};
  return parse_study(j, "test");
}

}  // namespace

TEST_CASE("data parallel: per-core forward/backward/update and bucketed all-reduces", "[schedules]") {
  const Study s = study();
  const BuiltStep step = s.schedule->build(s);
  const int layers = int(s.model.layers.size());
  REQUIRE_NOTHROW(step.graph.validate());
  for (int c = 0; c < s.cores(); ++c) CHECK(int(step.graph.program(c).size()) == 2 * layers + 1);
  int collectives = 0;
  double reduced = 0;
  for (int id = 0; id < step.graph.size(); ++id) {
    const auto& t = step.graph.task(id);
    if (t.kind != sim::TaskKind::Collective) continue;
    ++collectives;
    reduced += t.bytes;
    CHECK(int(t.group.size()) == s.cores());
    CHECK((t.bytes <= 4000000 || step.graph.predecessors(id).size() == std::size_t(s.cores())));
  }
  CHECK(collectives == int(step.details["gradient_buckets"].size()));
  CHECK(collectives > 1);
  CHECK(reduced == Approx(4.0 * double(s.model.params())));  // every gradient reduced once
}

TEST_CASE("data parallel: the step's model FLOPs are 3x forward over the batch", "[schedules]") {
  const Study s = study();
  const BuiltStep step = s.schedule->build(s);
  double forward = 0;
  for (const auto& l : s.model.layers)
    for (const auto& op : l.work(s.batch / s.cores()).forward) forward += op.model_flops();
  CHECK(step.model_flops == Approx(3 * forward * s.cores()));
  CHECK(step.hardware_flops >= step.model_flops);
}

TEST_CASE("data parallel: resident weights and optimizer slots per core", "[schedules]") {
  const auto P = double(study().model.params());
  for (auto [opt, slots] : {std::pair{"sgd", 0}, {"momentum", 1}, {"rmsprop", 1}, {"adam", 2}, {"lars", 1}}) {
    const Study s = study(opt);
    const BuiltStep step = s.schedule->build(s);
    INFO(opt);
    CHECK(step.graph.resident()[3][int(sim::MemoryCategory::Weights)] == Approx(4 * P));
    CHECK(step.graph.resident()[3][int(sim::MemoryCategory::Optimizer)] == Approx(4 * P * slots));
  }
  const Study ada = study("adafactor");
  const BuiltStep step = ada.schedule->build(ada);
  const double slots = step.graph.resident()[0][int(sim::MemoryCategory::Optimizer)];
  CHECK(slots > 0);
  CHECK(slots < 0.1 * 4 * P);  // factored: rows + columns, not whole matrices
}

TEST_CASE("a single chip all-reduces over its two cores", "[schedules]") {
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": {"chips": [1, 1], "wraparound": [false, false]},
    "model": {"kind": "mlp", "layers": 2, "width": 128, "input": 128, "classes": 10},
    "batch": 8, "optimizer": {"kind": "sgd"}, "schedule": {"kind": "data_parallel"}})");
  apply_override(j, "hardware=" + (config_dir() / "hardware" / "tpu-v3.json").string());
  const Study s = parse_study(j, "test");
  CHECK(s.cores() == 2);
  const BuiltStep step = s.schedule->build(s);
  CHECK(step.details["gradient_buckets"].size() >= 1);
}

TEST_CASE("every registered schedule kind is listed", "[schedules][registry]") {
  CHECK(schedule_registry().size() == 3);
  for (const char* kind : {"data_parallel", "gpipe", "one_f_one_b"}) CHECK(schedule_registry().count(kind));
}
