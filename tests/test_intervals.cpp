// Prediction intervals without the engine: ranges in hardware files and study assumptions parse
// (and bad ones are refused with their JSON path), every shipped assumption has a range, the
// interval multiplies each assumption's ratio to the point, and validate's coverage is counted right.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

#include "hardware/hardware_spec.hpp"
#include "schedules/study.hpp"
#include "test_support.hpp"
#include "workflows/intervals.hpp"
#include "workflows/model_error.hpp"
#include "workflows/validate.hpp"

using namespace tpusim;
using tpusim::test::problem_paths;
using namespace tpusim::workflows;
namespace fs = std::filesystem;

namespace {

Json v3_json() { return read_json_file(config_dir() / "hardware" / "tpu-v3.json"); }

Json gpipe_study() { return read_json_file(config_dir() / "studies" / "gpipe-transformer-v3-k8.json"); }

}  // namespace

TEST_CASE("every assumed figure of the shipped hardware has a range with its source", "[intervals]") {
  for (const char* name : {"tpu-v2", "tpu-v3", "tpu-v4"}) {
    const HardwareSpec hw = load_hardware(name);
    for (const auto& [path, source] : hw.sources) {
      if (source.rfind("assumption", 0) != 0) continue;
      INFO(name << " " << path);
      REQUIRE(hw.ranges.count(path) == 1);
      CHECK(!hw.ranges.at(path).source.empty());
    }
  }
}

TEST_CASE("a figure's range must contain its value and say where it comes from", "[intervals]") {
  Json j = v3_json();
  j["core"]["op_overhead_s"]["range"] = Json::array({2e-6, 5e-6});  // the value 1e-6 is below it
  CHECK(problem_paths([&] { parse_hardware(j, "t"); }) ==
        std::vector<std::string>{"core.op_overhead_s.range"});
  j = v3_json();
  j["core"]["op_overhead_s"].erase("range_source");
  CHECK(problem_paths([&] { parse_hardware(j, "t"); }) ==
        std::vector<std::string>{"core.op_overhead_s.range_source"});
  j = v3_json();
  j["core"]["fuse_elementwise"]["range"] = Json::array({0, 1});  // a flag's range is of flags
  CHECK(problem_paths([&] { parse_hardware(j, "t"); }) ==
        std::vector<std::string>{"core.fuse_elementwise.range"});
}

TEST_CASE("a figure the study overrides is its choice: no range, no interval from it", "[intervals]") {
  Json study = gpipe_study();
  study["hardware"] = Json{{"base", "tpu-v3"}, {"override", {{"core.op_overhead_s", 3e-6}}}};
  const Study s = parse_study(study, "t");
  CHECK(s.hardware.ranges.count("core.op_overhead_s") == 0);
  CHECK(s.hardware.ranges.count("core.hbm_sustained_bandwidth_fraction") == 1);
  bool listed = false;
  for (const auto& r : assumed_ranges(s)) listed = listed || r.name == "core.op_overhead_s";
  CHECK(!listed);
}

TEST_CASE("a study's assumptions: a key of the study, a range around it, ends the study is valid with",
          "[intervals]") {
  Json study = gpipe_study();
  const Study s = parse_study(study, "t");
  REQUIRE(s.assumptions.size() == 1);
  CHECK(s.assumptions[0].key == "schedule.microbatches");
  CHECK(s.assumptions[0].value == 8);
  const auto ranges = assumed_ranges(s);
  CHECK(ranges.back().kind == "study");
  CHECK(variant_args(s, ranges.back(), ranges.back().low, "unused") ==
        std::vector<std::string>{"--set", "schedule.microbatches=4"});

  study["assumptions"][0]["key"] = "schedule.microbatchs";
  CHECK(problem_paths([&] { parse_study(study, "t"); }) == std::vector<std::string>{"assumptions[0].key"});
  study = gpipe_study();
  study["assumptions"][0]["range"] = Json::array({4, 64});  // 64 micro-batches of a batch of 32
  CHECK(problem_paths([&] { parse_study(study, "t"); }) ==
        std::vector<std::string>{"assumptions[0].range[1]"});
  study = gpipe_study();
  study["assumptions"][0]["range"] = Json::array({16, 32});  // does not contain 8
  CHECK(problem_paths([&] { parse_study(study, "t"); }) == std::vector<std::string>{"assumptions[0].range"});
  // The cases a value was inferred from: ids, or a clear error.
  study = gpipe_study();
  study["assumptions"][0]["inferred_from"] = Json::array({"case-a", "case-b"});
  CHECK(parse_study(study, "t").assumptions[0].inferred_from == std::vector<std::string>{"case-a", "case-b"});
  study["assumptions"][0]["inferred_from"] = "case-a";
  CHECK(problem_paths([&] { parse_study(study, "t"); }) ==
        std::vector<std::string>{"assumptions[0].inferred_from"});
}

TEST_CASE("setting an assumed value makes it a choice: the assumption goes", "[intervals]") {
  const fs::path file = config_dir() / "studies" / "gpipe-transformer-v3-k8.json";
  CHECK(load_study(file).assumptions.size() == 1);
  CHECK(load_study(file, {"schedule.microbatches=4"}).assumptions.empty());
  CHECK(load_study(file, {"schedule={\"kind\": \"gpipe\", \"stages\": 8, \"microbatches\": 2}"})
            .assumptions.empty());
  CHECK(load_study(file, {"batch=64"}).assumptions.size() == 1);
}

TEST_CASE("the interval multiplies each assumption's ratio to the point, and contains the point",
          "[intervals]") {
  // No assumption, or ends equal to the point: nothing moves.
  CHECK(interval_of(10, {}) == std::array<double, 2>{10, 10});
  CHECK(interval_of(10, {{std::optional<double>(), std::optional<double>()}}) ==
        std::array<double, 2>{10, 10});
  // One figure moving it down at one end and up at the other; one moving it up at both ends (the
  // larger counts); a failed end moves nothing.
  const auto iv = interval_of(10, {{9.0, 12.0}, {11.0, 13.0}, {std::optional<double>(), 8.5}});
  CHECK(iv[0] == Approx(10 * 0.9 * 0.85));
  CHECK(iv[1] == Approx(10 * 1.2 * 1.3));
  CHECK(iv[0] <= 10);
  CHECK(iv[1] >= 10);
}

TEST_CASE("many assumptions pulling a positive quantity down leave its low end above zero", "[intervals]") {
  // The round-4 reproducer's shape: shifts that summed to more than the point (13.5 - 20.4 < 0).
  const std::vector<std::array<std::optional<double>, 2>> ends(6, {3.0, 20.0});
  const auto iv = interval_of(13.5, ends);
  CHECK(iv[0] > 0);
  CHECK(iv[0] == Approx(13.5 * std::pow(3.0 / 13.5, 6)));
  CHECK(iv[1] >= 13.5);
  // An end at zero (nothing left) gives a low end of zero, never below.
  CHECK(interval_of(5, {{0.0, 6.0}, {1.0, 7.0}})[0] == 0);
}

TEST_CASE("intervals_json gives each quantity's interval and each assumption's ends", "[intervals]") {
  const std::vector<AssumedRange> ranges = {
      {"core.op_overhead_s", "hardware", 1e-6, 5e-7, 5e-6, "why"},
      {"core.fuse_elementwise", "hardware", true, true, true, "not varied"}};
  std::vector<std::array<EndResult, 2>> ends(2);
  ends[0][0].values = {{"step_time_s", 0.9}};
  ends[0][1].values = {{"step_time_s", 1.4}};
  const Json j = intervals_json({{"step_time_s", 1.0}}, ranges, ends, {"chip.x"});
  CHECK(j["step_time_s"][0].get<double>() == Approx(0.9));
  CHECK(j["step_time_s"][1].get<double>() == Approx(1.4));
  CHECK(j["assumptions"][1]["at_low"].is_null());  // a range that does not vary moves nothing
  CHECK(j["assumed_without_range"] == Json::array({"chip.x"}));
}

TEST_CASE("validate's coverage counts the measured values inside their intervals", "[intervals]") {
  auto c = [](const char* q, double measured, double lo, double hi, double predicted) {
    return Json{{"quantity", q},
                {"measured", measured},
                {"predicted", predicted},
                {"interval", {lo, hi}},
                {"inside", lo <= measured && measured <= hi},
                {"relative_width", (hi - lo) / predicted}};
  };
  const Json cases = Json::array({c("step_time_s", 1.0, 0.9, 1.1, 1.0), c("step_time_s", 2.0, 0.9, 1.1, 1.0),
                                  c("max_fitting", 3, 2, 4, 2), Json{{"quantity", "step_time_s"}}});
  const Json s = interval_summary(cases);
  CHECK(s["cases"] == 3);
  CHECK(s["inside"] == 2);
  CHECK(s["coverage"].get<double>() == Approx(2.0 / 3.0));
  CHECK(s["mean_relative_width"].get<double>() == Approx((0.2 + 0.2 + 1.0) / 3.0));
  CHECK(s["per_quantity"]["step_time_s"]["coverage"].get<double>() == Approx(0.5));
  CHECK(s["per_quantity"]["max_fitting"]["inside"] == 1);
}

TEST_CASE("the model's validated error widens the assumption interval by the largest error of n cases",
          "[intervals]") {
  ValidatedError e;
  e.family = "language models";
  e.cases = {"a", "b", "c", "d"};
  e.worst_abs_error = 0.2;
  const Json intervals = {{"step_time_s", {1.0, 2.0}}, {"examples_per_s", {50.0, 100.0}}};
  const Json j = with_model_error(e, intervals);
  CHECK(j["family"] == "language models");
  CHECK(j["coverage"].get<double>() == Approx(4.0 / 5.0));
  // The measured step is predicted / (1 + error), error in [-E, E].
  CHECK(j["step_time_s"][0].get<double>() == Approx(1.0 / 1.2));
  CHECK(j["step_time_s"][1].get<double>() == Approx(2.0 / 0.8));
  CHECK(j["examples_per_s"][0].get<double>() == Approx(50.0 * 0.8));
  CHECK(j["examples_per_s"][1].get<double>() == Approx(100.0 * 1.2));
  // An error of 100 % or more leaves the step unbounded above.
  e.worst_abs_error = 1.5;
  CHECK(with_model_error(e, intervals)["step_time_s"][1].is_null());
  // Too few cases: no interval, and a note saying so.
  e.cases = {"a", "b"};
  const Json few = with_model_error(e, intervals);
  CHECK_FALSE(few.contains("step_time_s"));
  CHECK(few["note"].get<std::string>().find("too few validated predictions of language models") == 0);
}

TEST_CASE("the validated error counts a family's step-time predictions proper, never an in-sample case",
          "[intervals]") {
  // SSD's six v3 cases are in-sample (their studies' host figures were inferred from them): only
  // the two v4 runs count, too few to size an interval.
  const ValidatedError ssd = validated_error("object detectors");
  CHECK(ssd.cases == std::vector<std::string>{"mlperf07-ssd-v4-16", "mlperf07-ssd-v4-512"});
  CHECK_FALSE(ssd.sized());
  // The language models' step-time cases: MaxText's 22B, BERT on v3 and v4 (the Mesh-TF case
  // predicts a utilization, GPipe's the largest model and its activations: not step times).
  const ValidatedError lm = validated_error("language models");
  CHECK(lm.cases == std::vector<std::string>{"maxtext-22b-v4-128", "mlperf07-bert-v3-32",
                                             "mlperf07-bert-v4-16", "mlperf07-bert-v4-512"});
  CHECK(lm.sized());
  // E is the largest |recorded / measured - 1| among them.
  const Json recorded =
      read_json_file(config_dir() / "validation" / "recorded" / "predictions.json")["predictions"];
  double worst = 0;
  for (const auto& id : lm.cases) {
    const Json c = read_json_file(config_dir() / "validation" / (id + ".json"));
    worst =
        std::max(worst, std::fabs(recorded[id].get<double>() / c["measured"]["value"].get<double>() - 1.0));
  }
  CHECK(lm.worst_abs_error == Approx(worst));
  CHECK(validated_error("multilayer perceptrons").cases.empty());
}
