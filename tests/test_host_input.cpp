// The hosts' side of a step without the engine: which host feeds which chip, what each
// schedule's cores read, and the infeed and preparation times against hand-derived values.
#include <catch2/catch.hpp>

#include "schedules/host_input.hpp"

using namespace tpusim;

namespace {

Study study(const std::string& slice, std::int64_t batch, const Json& schedule, const Json& model = nullptr) {
  Json j = Json::parse(R"({"hardware": "tpu-v3", "optimizer": {"kind": "sgd"},
    "model": {"kind": "resnet50", "image_size": 64, "classes": 10}})");
  if (!model.is_null()) j["model"] = model;
  j["slice"] = slice;
  j["batch"] = batch;
  j["schedule"] = schedule;
  return parse_study(j, "test");
}

}  // namespace

TEST_CASE("a host feeds a 2x2 block of chips, numbered x fastest", "[host_input]") {
  const Study s = study("v3-32", 32, Json{{"kind", "data_parallel"}});  // 4 x 4 chips
  const auto& chip = s.hardware.chip;
  REQUIRE(chip.host_board_chips == std::vector<int>{2, 2});
  // Chip (x, y) = (1, 1) is chip 5, on host 0; (2, 0) is chip 2, host 1; (3, 3) chip 15, host 3.
  CHECK(host_of_chip(s.slice, chip, 5) == 0);
  CHECK(host_of_chip(s.slice, chip, 2) == 1);
  CHECK(host_of_chip(s.slice, chip, 8) == 2);
  CHECK(host_of_chip(s.slice, chip, 15) == 3);
  CHECK(host_input(s).hosts == 4);
}

TEST_CASE("data parallelism: every core reads its share, a host prepares its 8 cores' examples",
          "[host_input]") {
  const Study s = study("v3-32", 256, Json{{"kind", "data_parallel"}});
  const auto in = s.schedule->input(s);
  REQUIRE(in.size() == 32);
  for (const auto& c : in) CHECK(c.examples == 8);
  const HostInput h = host_input(s);
  const double image = 64.0 * 64 * 3 * 2;  // bf16 pixels of one 64 x 64 RGB image
  CHECK(h.bytes_per_example == Approx(image));
  CHECK(h.chip_bytes == Approx(2 * 8 * image));
  CHECK(h.infeed_s == Approx(2 * 8 * image / 16e9));
  CHECK(h.host_examples == 64);  // 4 chips x 2 cores x 8
  CHECK(h.preparation_s == 0);   // no rate given: the hosts keep up
  CHECK(h.bound_s() == h.infeed_s);
}

TEST_CASE("a preparation rate bounds the step by the busiest host's examples", "[host_input]") {
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8", "batch": 64, "optimizer": {"kind": "sgd"},
    "model": {"kind": "resnet50", "image_size": 64, "classes": 10}, "schedule": {"kind": "data_parallel"},
    "input_pipeline": {"examples_per_s_per_host": 1000}})");
  const HostInput h = host_input(parse_study(j, "test"));
  CHECK(h.host_examples == 64);
  CHECK(h.preparation_s == Approx(0.064));
  CHECK(h.bound_s() == Approx(0.064));
  j["input_pipeline"]["examples_per_s_per_host"] = 0;
  CHECK_THROWS_WITH(parse_study(j, "test"), Catch::Contains("input_pipeline.examples_per_s_per_host"));
  j["input_pipeline"] = Json{{"examples_per_second", 10}};
  CHECK_THROWS_WITH(parse_study(j, "test"), Catch::Contains("input_pipeline.examples_per_second"));
}

TEST_CASE("a host's work per step adds to its examples' preparation, with a rate or alone", "[host_input]") {
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8", "batch": 64, "optimizer": {"kind": "sgd"},
    "model": {"kind": "resnet50", "image_size": 64, "classes": 10}, "schedule": {"kind": "data_parallel"},
    "input_pipeline": {"examples_per_s_per_host": 1000, "seconds_per_step_per_host": 0.01}})");
  // 10 ms of per-step work and 64 images at 1000 per second.
  CHECK(host_input(parse_study(j, "test")).preparation_s == Approx(0.074));
  j["input_pipeline"].erase("examples_per_s_per_host");
  const HostInput alone = host_input(parse_study(j, "test"));
  CHECK(alone.preparation_s == Approx(0.01));
  CHECK(alone.bound_s() == Approx(0.01));
  j["input_pipeline"]["seconds_per_step_per_host"] = -1;
  CHECK_THROWS_WITH(parse_study(j, "test"), Catch::Contains("input_pipeline.seconds_per_step_per_host"));
  // Neither figure: the rate is asked for.
  j["input_pipeline"] = Json::object();
  CHECK_THROWS_WITH(parse_study(j, "test"), Catch::Contains("input_pipeline.examples_per_s_per_host"));
}

TEST_CASE("a pipeline's first stage reads each replica's batch, a split stage's cores read the same examples",
          "[host_input]") {
  const Json model = Json::parse(
      R"({"kind": "transformer", "activation": "relu", "layers": 4, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64})");
  const Study s =
      study("v3-8", 32, Json{{"kind", "gpipe"}, {"stages", 2}, {"microbatches", 4}, {"replicas", 2}}, model);
  const auto in = s.schedule->input(s);
  double examples = 0;
  int readers = 0;
  for (const auto& c : in) {
    examples += c.examples;
    readers += c.examples > 0;
  }
  CHECK(readers == 2);    // stage 0 of each replica
  CHECK(examples == 32);  // the whole batch, once
  const HostInput h = host_input(s);
  CHECK(h.bytes_per_example == Approx(64 * 4));  // int32 token ids
  CHECK(h.host_examples == 32);

  const Study t = study(
      "v3-8", 32, Json{{"kind", "gpipe"}, {"stages", 2}, {"microbatches", 4}, {"tensor_parallel", 2}}, model);
  const HostInput ht = host_input(t);
  CHECK(ht.host_examples == 32);  // the two cores of stage 0 read the same 32: prepared once
  CHECK(ht.chip_bytes == Approx(2 * 32 * 64 * 4));  // each core receives its own copy
}

TEST_CASE("a mesh: a batch shard is prepared once per host, a spatial split reads part of each image",
          "[host_input]") {
  const Study s = study("v3-8", 16,
                        Json{{"kind", "mesh"},
                             {"mesh", Json::array({Json::array({"batch", 2}), Json::array({"spatial", 4})})},
                             {"layout", {{"batch", "batch"}, {"height", "spatial"}}}});
  const auto in = s.schedule->input(s);
  for (const auto& c : in) {
    CHECK(c.examples == 8);
    CHECK(c.part == Approx(0.25));
  }
  const HostInput h = host_input(s);
  CHECK(h.host_examples == 16);  // two shards of 8 on the one host
  CHECK(h.chip_bytes == Approx(2 * 8 * 0.25 * 64 * 64 * 3 * 2));
}

TEST_CASE("the host's work between device loops adds its share to every step", "[host_input]") {
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8", "batch": 64, "optimizer": {"kind": "sgd"},
    "model": {"kind": "resnet50", "image_size": 64, "classes": 10}, "schedule": {"kind": "data_parallel"},
    "training_loop": {"steps_per_loop": 40, "host_seconds_per_loop": 0.8}})");
  const HostInput h = host_input(parse_study(j, "test"));
  CHECK(h.loop_overhead_s == Approx(0.02));
  CHECK(h.bound_s() == h.infeed_s);  // it does not overlap the TPUs: not a bound on the input
  j["training_loop"]["steps_per_loop"] = 0;
  CHECK_THROWS_WITH(parse_study(j, "test"), Catch::Contains("training_loop.steps_per_loop"));
  j["training_loop"] = Json{{"steps_per_loop", 10}};
  CHECK_THROWS_WITH(parse_study(j, "test"), Catch::Contains("training_loop.host_seconds_per_loop"));
}
