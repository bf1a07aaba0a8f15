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

TEST_CASE("the interval combines each assumption's log-ratio to the point in quadrature, and contains it",
          "[intervals]") {
  // No assumption, or ends equal to the point: nothing moves.
  CHECK(interval_of(10, {}) == std::array<double, 2>{10, 10});
  CHECK(interval_of(10, {{std::optional<double>(), std::optional<double>()}}) ==
        std::array<double, 2>{10, 10});
  // One figure moving it down at one end and up at the other; one moving it up at both ends (the
  // larger counts); a failed end moves nothing.
  const auto iv = interval_of(10, {{9.0, 12.0}, {11.0, 13.0}, {std::optional<double>(), 8.5}});
  CHECK(iv[0] == Approx(10 * std::exp(-std::hypot(std::log(0.9), std::log(0.85)))));
  CHECK(iv[1] == Approx(10 * std::exp(std::hypot(std::log(1.2), std::log(1.3)))));
  // Narrower than every assumption at its worst at once, wider than the largest alone.
  CHECK(iv[0] > 10 * 0.9 * 0.85);
  CHECK(iv[0] < 8.5);
  CHECK(iv[1] < 10 * 1.2 * 1.3);
  CHECK(iv[1] > 13);
  CHECK(iv[0] <= 10);
  CHECK(iv[1] >= 10);
}

TEST_CASE("many assumptions pulling a positive quantity down leave its low end above zero", "[intervals]") {
  // The round-4 reproducer's shape: shifts that summed to more than the point (13.5 - 20.4 < 0).
  const std::vector<std::array<std::optional<double>, 2>> ends(6, {3.0, 20.0});
  const auto iv = interval_of(13.5, ends);
  CHECK(iv[0] > 0);
  CHECK(iv[0] == Approx(13.5 * std::pow(3.0 / 13.5, std::sqrt(6.0))));
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

TEST_CASE("validate's bands count the predictions proper inside them, an unbounded band apart",
          "[intervals]") {
  auto c = [](bool inside, Json width) {
    return Json{{"band", {1.0, width.is_null() ? Json(nullptr) : Json(2.0)}},
                {"band_inside", inside},
                {"band_relative_width", width}};
  };
  const Json cases = Json::array({c(true, 0.3), c(false, 0.5), c(true, nullptr), Json{{"interval", {1, 2}}}});
  const Json b = band_summary(cases);
  CHECK(b["cases"] == 3);
  CHECK(b["inside"] == 2);
  CHECK(b["coverage"].get<double>() == Approx(2.0 / 3.0));
  CHECK(b["mean_relative_width"].get<double>() == Approx(0.4));  // the bounded two
  CHECK(b["unbounded"] == 1);
  CHECK(b["method"].get<std::string>().find("leave-one-out") == 0);
}

TEST_CASE("the model's validated error widens the assumption interval by the conformal bound of n cases",
          "[intervals]") {
  ValidatedError e;
  e.family = "language models";
  e.cases = {"a", "b", "c", "d", "e"};
  e.all_cases = 9;
  e.error_bound = 0.2;
  e.rank = 5;
  const Json intervals = {{"step_time_s", {1.0, 2.0}}, {"examples_per_s", {50.0, 100.0}}};
  const Json j = with_model_error(e, intervals);
  CHECK(j["family"] == "language models");
  CHECK(j["coverage"].get<double>() == Approx(5.0 / 6.0));
  CHECK_FALSE(j.contains("note"));
  // The measured step is predicted / (1 + error), error in [-E, E].
  CHECK(j["step_time_s"][0].get<double>() == Approx(1.0 / 1.2));
  CHECK(j["step_time_s"][1].get<double>() == Approx(2.0 / 0.8));
  CHECK(j["examples_per_s"][0].get<double>() == Approx(50.0 * 0.8));
  CHECK(j["examples_per_s"][1].get<double>() == Approx(100.0 * 1.2));
  // An error of 100 % or more leaves the step unbounded above.
  e.error_bound = 1.5;
  CHECK(with_model_error(e, intervals)["step_time_s"][1].is_null());
  // A family of fewer than five takes every family's error, and says so; below three cases in
  // all, no interval.
  e.error_bound = 0.4;
  e.rank = 8;
  e.cases = {"a", "b"};
  e.widened = true;
  const Json wide = with_model_error(e, intervals);
  CHECK(wide["coverage"].get<double>() == Approx(8.0 / 10.0));
  CHECK(wide["step_time_s"][0].get<double>() == Approx(1.0 / 1.4));
  CHECK(wide["note"].get<std::string>().find("only 2 validated step-time predictions of language models") ==
        0);
  e.all_cases = 2;
  const Json few = with_model_error(e, intervals);
  CHECK_FALSE(few.contains("step_time_s"));
  CHECK(few["note"].get<std::string>().find("too few validated predictions") == 0);
}

TEST_CASE("leave-one-out sizes a case's model error from the other cases only", "[intervals]") {
  // By hand: family f1 of six residuals, f2 of one.
  const std::vector<Residual> r = {{"a", "f1", 0.1},   {"b", "f1", -0.3}, {"c", "f1", 0.05}, {"d", "f1", 0.2},
                                   {"e", "f1", -0.15}, {"f", "f1", 0.12}, {"g", "f2", 0.5}};
  // a's band: the other five of f1 (|errors| 0.05, 0.12, 0.15, 0.2, 0.3); k = min(5, ceil(0.8 x
  // 6)) = 5: the largest, 0.3 (b's).
  const ValidatedError a = leave_one_out(r, "a", "f1");
  CHECK(a.cases.size() == 5);
  CHECK_FALSE(a.widened);
  CHECK(a.rank == 5);
  CHECK(a.error_bound == Approx(0.3));
  CHECK(a.coverage() == Approx(5.0 / 6.0));
  // b's own 0.3 is not in its band: the others' largest is d's 0.2.
  CHECK(leave_one_out(r, "b", "f1").error_bound == Approx(0.2));
  // g's family has no other case: it takes every other's, 0.3 (k = min(6, ceil(5.6)) = 6), widened.
  const ValidatedError g = leave_one_out(r, "g", "f2");
  CHECK(g.widened);
  CHECK(g.all_cases == 6);
  CHECK(g.error_bound == Approx(0.3));
  // Ten residuals 0.01 .. 0.10 for a new case: k = ceil(0.8 x 11) = 9, the ninth smallest, 0.09,
  // covering a new case with probability 9/11.
  std::vector<Residual> ten;
  for (int i = 1; i <= 10; ++i) ten.push_back({"c" + std::to_string(i), "f", (i % 2 ? 1 : -1) * 0.01 * i});
  const ValidatedError n10 = leave_one_out(ten, "", "f");
  CHECK(n10.rank == 9);
  CHECK(n10.error_bound == Approx(0.09));
  CHECK(n10.coverage() == Approx(9.0 / 11.0));
  // A rate's error is its step's; the band widens a step time below by 1 + e, above by 1 - e.
  CHECK(*step_error("mxu_utilization", 0.52, 0.8) == Approx(0.52 / 0.8 - 1));
  CHECK(*step_error("examples_per_s", 100, 125) == Approx(-0.2));
  CHECK_FALSE(step_error("max_fitting", 3, 2));
  const auto w = widened_interval("step_time_s", {1.0, 2.0}, 0.25);
  CHECK(w[0].get<double>() == Approx(0.8));
  CHECK(w[1].get<double>() == Approx(2.0 / 0.75));
  const auto rate = widened_interval("examples_per_s", {1.0, 2.0}, 0.25);
  CHECK(rate[0].get<double>() == Approx(0.75));
  CHECK(rate[1].get<double>() == Approx(2.5));
}

TEST_CASE("the validated error counts a family's step-time predictions proper, never an in-sample case",
          "[intervals]") {
  // SSD's six v3 cases are in-sample (their studies' host figures were inferred from them): only
  // the two v4 runs count, too few for a family's own error: it takes every family's.
  const ValidatedError ssd = validated_error("object detectors");
  CHECK(ssd.cases == std::vector<std::string>{"mlperf07-ssd-v4-16", "mlperf07-ssd-v4-512"});
  CHECK(ssd.widened);
  CHECK(ssd.sized());
  const double n = double(ssd.all_cases);
  CHECK(ssd.rank == std::size_t(std::min(n, std::ceil(0.8 * (n + 1)))));
  // The language models' step-time cases: MaxText's 22B, BERT on v3 and v4, and Mesh-TF's LM,
  // whose MXU utilization is the inverse of its step (GPipe's cases predict the largest model
  // and its activations: not step times).
  const ValidatedError lm = validated_error("language models");
  CHECK(lm.cases == std::vector<std::string>{"maxtext-22b-v4-128", "meshtf-lm-4.9b-v2-512",
                                             "mlperf07-bert-v3-32", "mlperf07-bert-v4-16",
                                             "mlperf07-bert-v4-512"});
  CHECK_FALSE(lm.widened);
  // Five cases: k = min(5, ceil(0.8 x 6)) = 5, the largest |error| of the step each recorded
  // prediction implies.
  const Json recorded =
      read_json_file(config_dir() / "validation" / "recorded" / "predictions.json")["predictions"];
  double worst = 0;
  for (const auto& id : lm.cases) {
    const Json c = read_json_file(config_dir() / "validation" / (id + ".json"));
    const double ratio = recorded[id].get<double>() / c["measured"]["value"].get<double>();
    worst = std::max(worst, std::fabs(c["quantity"] == "step_time_s" ? ratio - 1 : 1 / ratio - 1));
  }
  CHECK(lm.rank == 5);
  CHECK(lm.error_bound == Approx(worst));
  CHECK(validated_error("multilayer perceptrons").cases.empty());
}
