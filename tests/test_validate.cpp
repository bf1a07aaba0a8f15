// `tpusim validate` without the engine: case files parse (and broken ones are rejected with
// their JSON path), the predicted value is read from the output the command would print, the
// error and the summary are computed as documented, and every shipped case is well-formed.
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "hardware/hardware_spec.hpp"
#include "reports/report_html.hpp"
#include "reports/validation_report.hpp"
#include "schedules/study.hpp"
#include "workflows/validate.hpp"

using namespace tpusim;
using namespace tpusim::workflows;

namespace {

Json step_case() {
  return Json::parse(
      R"({"schema": "tpusim.validation_case/1", "id": "demo", "description": "d", "study": "../studies/default.json",
    "set": ["batch=64"], "quantity": "step_time_s",
    "measured": {"value": 0.1, "unit": "s", "source": "somewhere"}, "tolerance": {"relative": 0.1, "source": "why"}})");
}

std::string problems_text(const Json& j, const std::string& file = "/cases/demo.json") {
  Problems p(file);
  parse_validation_case(j, file, p);
  try {
    p.throw_if_any();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a case parses: study resolved against its folder, overrides, command", "[validate]") {
  Problems p("x");
  const ValidationCase c = parse_validation_case(step_case(), "/cfg/validation/demo.json", p);
  REQUIRE(p.empty());
  CHECK(c.study == "/cfg/studies/default.json");
  CHECK(c.measured == 0.1);
  CHECK(c.command() ==
        std::vector<std::string>{"run", "/cfg/studies/default.json", "--json", "--set", "batch=64"});
}

TEST_CASE("a fit case runs tpusim fit over its field and bounds", "[validate]") {
  Json j = step_case();
  j["quantity"] = "max_fitting";
  j["measured"]["unit"] = "layers";
  j["fit"] = Json{{"maximize", "model.layers"}, {"min", 8}, {"max", 824}, {"step", 1}};
  Problems p("x");
  const ValidationCase c = parse_validation_case(j, "/v/demo.json", p);
  REQUIRE(p.empty());
  CHECK(c.command() == std::vector<std::string>{"fit", "/studies/default.json", "--maximize", "model.layers",
                                                "--min", "8", "--max", "824", "--step", "1", "--json",
                                                "--set", "batch=64"});
}

TEST_CASE("broken cases name the JSON path, the value and what is expected", "[validate]") {
  Json j = step_case();
  j["quantity"] = "speed";
  CHECK_THAT(problems_text(j), Catch::Contains("quantity") && Catch::Contains("\"speed\""));
  j = step_case();
  j["measured"]["value"] = -1;
  CHECK_THAT(problems_text(j), Catch::Contains("measured.value"));
  j = step_case();
  j["tolerence"] = 0.1;  // a typo is never ignored
  CHECK_THAT(problems_text(j), Catch::Contains("tolerence"));
  j = step_case();
  j["measured"]["unit"] = "ms";  // a step time is given in seconds
  CHECK_THAT(problems_text(j), Catch::Contains("measured.unit") && Catch::Contains("\"s\""));
  j = step_case();
  j["set"] = Json::array({"batch"});
  CHECK_THAT(problems_text(j), Catch::Contains("set[0]"));
  j = step_case();
  CHECK_THAT(problems_text(j, "/cases/other.json"), Catch::Contains("id") && Catch::Contains("other"));
  j = step_case();
  j["quantity"] = "max_fitting";  // without a fit
  CHECK_THAT(problems_text(j), Catch::Contains("fit"));
  j = step_case();
  j["fit"] = Json{{"maximize", "model.layers"},
                  {"min", 8},
                  {"max", 4},
                  {"step", 1}};  // a fit on a step-time case, max < min
  CHECK_THAT(problems_text(j), Catch::Contains("fit.max"));
}

TEST_CASE("predicted values come from the command's own output", "[validate]") {
  Problems p("x");
  ValidationCase c = parse_validation_case(step_case(), "/v/demo.json", p);
  CHECK(*predicted_value(c, Json{{"step_time_s", 0.125}}) == 0.125);
  c.quantity = "activation_bytes_total";
  const Json run = Json::parse(
      R"({"cores": [{"hbm_at_peak": {"activations": 3, "workspace": 2, "weights": 100, "optimizer": 7}},
                    {"hbm_at_peak": {"activations": 5}}]})");
  CHECK(*predicted_value(c, run) == 10);  // activations and workspace: all but parameter memory
  c.quantity = "max_fitting";
  CHECK(*predicted_value(c, Json{{"max_fitting", 13}}) == 13);
  CHECK_FALSE(predicted_value(c, Json{{"max_fitting", nullptr}}));
}

TEST_CASE("parameter memory and the run's own numbers are quantities too, a missing one is named",
          "[validate]") {
  Problems p("x");
  ValidationCase c = parse_validation_case(step_case(), "/v/demo.json", p);
  const Json run = Json::parse(
      R"({"params": 82e6, "examples_per_s": 45.5, "bubble_fraction": null,
          "cores": [{"hbm_at_peak": {"activations": 3, "workspace": 2, "weights": 100, "gradients": 100, "optimizer": 7}},
                    {"hbm_at_peak": {"activations": 5, "weights": 10}}]})");
  c.quantity = "parameter_bytes_total";
  CHECK(*predicted_value(c, run) == 217);  // weights, gradients and optimizer slots of both cores
  c.quantity = "params";
  CHECK(*predicted_value(c, run) == 82e6);
  c.quantity = "examples_per_s";
  CHECK(*predicted_value(c, run) == 45.5);
  c.quantity = "mxu_utilization";
  CHECK_THROWS_WITH(predicted_value(c, run), Catch::Contains("mxu_utilization"));
}

TEST_CASE("a case relative to a baseline compares the ratio of two runs of its study", "[validate]") {
  Json j = step_case();
  j["quantity"] = "examples_per_s";
  j["relative_to"] = Json{{"set", {"schedule.microbatches=1"}}};
  j["measured"]["unit"] = "ratio";
  Problems p("x");
  const ValidationCase c = parse_validation_case(j, "/cfg/validation/demo.json", p);
  REQUIRE(p.empty());
  CHECK(c.compared() == "examples_per_s/baseline");
  CHECK(c.baseline_command() == std::vector<std::string>{"run", "/cfg/studies/default.json", "--json",
                                                         "--set", "batch=64", "--set",
                                                         "schedule.microbatches=1"});
  const Json r = validation_record(c, 1.21);
  CHECK(r["quantity"] == "examples_per_s/baseline");
  CHECK_THAT(r["baseline_command"].get<std::string>(), Catch::EndsWith("--set schedule.microbatches=1"));
  j["measured"]["unit"] = "examples/s";  // a ratio has no unit of its own
  CHECK_THAT(problems_text(j), Catch::Contains("measured.unit") && Catch::Contains("\"ratio\""));
  j["measured"]["unit"] = "ratio";
  j["relative_to"] = Json{{"set", "schedule.microbatches=1"}};
  CHECK_THAT(problems_text(j), Catch::Contains("relative_to.set"));
}

TEST_CASE("error is predicted / measured - 1, within compares its magnitude with the tolerance",
          "[validate]") {
  Problems p("x");
  const ValidationCase c = parse_validation_case(step_case(), "/v/demo.json", p);
  const Json fast = validation_record(c, 0.08);
  CHECK(fast["error"].get<double>() == Approx(-0.2));
  CHECK_FALSE(fast["within"].get<bool>());
  const Json close = validation_record(c, 0.109);
  CHECK(close["within"].get<bool>());
  const Json none = validation_record(c, std::nullopt, "failed");
  CHECK(none["error"].is_null());
  CHECK_FALSE(none["within"].get<bool>());
  CHECK(none["failure"] == "failed");
}

TEST_CASE("the summary gives mean and worst |error| per quantity and overall", "[validate]") {
  Json cases = Json::array();
  cases.push_back(Json{{"id", "a"}, {"quantity", "step_time_s"}, {"error", -0.2}, {"within", false}});
  cases.push_back(Json{{"id", "b"}, {"quantity", "step_time_s"}, {"error", 0.1}, {"within", true}});
  cases.push_back(Json{{"id", "c"}, {"quantity", "max_fitting"}, {"error", 0.4}, {"within", false}});
  cases.push_back(Json{{"id", "d"}, {"quantity", "max_fitting"}, {"error", nullptr}, {"within", false}});
  const Json s = validation_summary(cases);
  CHECK(s["cases"] == 4);
  CHECK(s["within"] == 1);
  CHECK(s["mean_abs_error"].get<double>() == Approx((0.2 + 0.1 + 0.4) / 3));
  CHECK(s["worst_case"] == "c");
  CHECK(s["per_quantity"]["step_time_s"]["mean_abs_error"].get<double>() == Approx(0.15));
  CHECK(s["per_quantity"]["step_time_s"]["worst_case"] == "a");
  CHECK(s["per_quantity"]["max_fitting"]["no_prediction"] == 1);
  // No case is in-sample: the predicted cases are all of them.
  CHECK(s["predicted"]["cases"] == 4);
  CHECK(s["predicted"]["mean_abs_error"].get<double>() == Approx(s["mean_abs_error"].get<double>()));
  // A case a study value was inferred from is left out of the predicted cases' summary.
  cases[2]["in_sample"] = true;
  const Json t = validation_summary(cases);
  CHECK(t["cases"] == 4);
  CHECK(t["predicted"]["cases"] == 3);
  CHECK(t["predicted"]["mean_abs_error"].get<double>() == Approx(0.15));
  CHECK(t["predicted"]["worst_case"] == "a");
}

TEST_CASE("every shipped case is well-formed and its study valid", "[validate]") {
  const auto cases = load_validation_cases(config_dir() / "validation", {});
  REQUIRE(cases.size() >= 20);
  for (const auto& c : cases) {
    INFO(c.id);
    CHECK_NOTHROW(load_study(c.study, c.sets));
    CHECK(c.tolerance > 0);
    CHECK_FALSE(c.source.empty());
    CHECK_FALSE(c.tolerance_source.empty());
  }
  CHECK_THROWS_AS(load_validation_cases(config_dir() / "validation", {"no-such-case"}), ConfigError);
  // A study value inferred from cases names shipped ones (a typo would leave a case "predicted").
  std::set<std::string> ids;
  for (const auto& c : cases) ids.insert(c.id);
  for (const auto& file : std::filesystem::directory_iterator(config_dir() / "studies"))
    for (const auto& a : load_study(file.path()).assumptions)
      for (const auto& id : a.inferred_from) {
        INFO(file.path().string() + ": " + a.key);
        CHECK(ids.count(id) == 1);
      }
}

TEST_CASE("the parity plot puts each case at (measured, predicted) on log axes", "[validate]") {
  Json report{{"cases", Json::array()}};
  report["cases"].push_back(Json{{"id", "a"},
                                 {"quantity", "q"},
                                 {"unit", "s"},
                                 {"measured", 0.1},
                                 {"predicted", 0.1},
                                 {"error", 0.0},
                                 {"tolerance", 0.1},
                                 {"within", true}});
  report["cases"].push_back(Json{{"id", "b"},
                                 {"quantity", "q"},
                                 {"unit", "s"},
                                 {"measured", 1.0},
                                 {"predicted", nullptr},
                                 {"error", nullptr},
                                 {"tolerance", 0.1},
                                 {"within", false}});
  const std::string svg = reports::parity_svg(report, "q");
  CHECK(svg.find("class=\"case\"") != std::string::npos);
  CHECK(svg.find("<title>a:") != std::string::npos);
  CHECK(svg.find("<title>b:") == std::string::npos);  // no prediction, no point
  CHECK(svg.find("class=\"diagonal\"") != std::string::npos);
  CHECK(reports::validation_value_text(0.1373, "s") == "137.3 ms");
  CHECK(reports::validation_value_text(6.4 * 1073741824.0, "bytes") == "6.40 GiB");
}

TEST_CASE("sensitivity scales one hardware figure of a copy of the file, or turns a flag over",
          "[validate]") {
  const Json hw = read_json_file(config_dir() / "hardware" / "tpu-v3.json");
  const auto scaled = scaled_hardware(hw, "core.op_overhead_s", 1.1);
  REQUIRE(scaled);
  CHECK((*scaled)["core"]["op_overhead_s"]["value"].get<double>() ==
        Approx(1.1 * hw["core"]["op_overhead_s"]["value"].get<double>()));
  CHECK((*scaled)["core"]["clock_hz"] == hw["core"]["clock_hz"]);                  // nothing else moves
  const auto flipped = scaled_hardware(hw, "core.pad_activations_to_lanes", 1.1);  // a flag turns over
  REQUIRE(flipped);
  CHECK((*flipped)["core"]["pad_activations_to_lanes"]["value"] ==
        !hw["core"]["pad_activations_to_lanes"]["value"].get<bool>());
  CHECK_FALSE(scaled_hardware(hw, "core.no_such_figure", 1.1));
  CHECK_NOTHROW(parse_hardware(*scaled, "scaled"));
  const auto rotated = scaled_hardware(hw, "chip.collective_algorithms", 1.1);  // the next choice first
  REQUIRE(rotated);
  CHECK((*rotated)["chip"]["collective_algorithms"]["value"] ==
        Json::array({"hierarchical_rings", "snake_ring", "recursive_doubling"}));
}

TEST_CASE("a run's HTML report renders report.md's constructs, escaped, with its charts inline",
          "[reports]") {
  const std::string md =
      "# a <b> & c\n\n| figure | value |\n| --- | ---: |\n| step | **1 ms** |\n\n"
      "A paragraph over\ntwo lines, with `code <x>`.\n\n![timeline](timeline.svg)\n\n![other](other.svg)\n";
  const std::string html = reports::report_html(md, {{"timeline.svg", "<svg id=\"t\"></svg>"}}, "title");
  CHECK_THAT(html, Catch::Contains("<h1>a &lt;b&gt; &amp; c</h1>"));
  CHECK_THAT(html, Catch::Contains("<tr><th>figure</th><th>value</th></tr>"));
  CHECK_THAT(html, Catch::Contains("<tr><td>step</td><td><strong>1 ms</strong></td></tr>"));
  CHECK_THAT(html, !Catch::Contains("---"));  // the separator row is not a row
  CHECK_THAT(html, Catch::Contains("<p>A paragraph over two lines, with <code>code &lt;x&gt;</code>.</p>"));
  CHECK_THAT(html, Catch::Contains("<figure><svg id=\"t\"></svg></figure>"));
  CHECK_THAT(html, Catch::Contains("<img alt=\"other\" src=\"other.svg\">"));
}

TEST_CASE("a fit case's tolerance may be steps of its grid: one layer of three is within, exactly",
          "[validate]") {
  Json j = Json::parse(
      R"({"schema": "tpusim.validation_case/1", "id": "demo", "description": "d", "study": "../studies/default.json",
    "quantity": "max_fitting", "fit": {"maximize": "model.layers", "min": 1, "max": 24, "step": 1},
    "measured": {"value": 3, "unit": "layers", "source": "s"},
    "tolerance": {"relative": 0.1, "grid_steps": 1, "source": "rule"}})");
  Problems p("x");
  const ValidationCase c = parse_validation_case(j, "/cfg/validation/demo.json", p);
  REQUIRE(p.empty());
  CHECK(c.tolerance_absolute == 1);
  CHECK(validation_record(c, 2.0)["within"] == true);  // 1/3 off: one step, no floating-point luck
  CHECK(validation_record(c, 4.0)["within"] == true);
  CHECK(validation_record(c, 5.0)["within"] == false);
  CHECK(validation_record(c, 2.0)["tolerance"].get<double>() == Approx(1.0 / 3.0));
  j["quantity"] = "step_time_s";
  j.erase("fit");
  j["measured"]["unit"] = "s";
  CHECK_THAT(problems_text(j), Catch::Contains("tolerance.grid_steps"));
}
