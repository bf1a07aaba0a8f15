// Sweep axes and points: parsing, ranges, products, zips, shards, identities.
#include <catch2/catch.hpp>

#include "hardware/errors.hpp"
#include "reports/sweep_report.hpp"
#include "workflows/sweep_grid.hpp"

using namespace tpusim;
using namespace tpusim::workflows;

TEST_CASE("axis values: numbers, strings, JSON, ranges", "[sweep]") {
  const Axis a = parse_axis("--grid", "schedule.stages=1,2,4,8");
  CHECK(a.path == "schedule.stages");
  CHECK(a.values == std::vector<Json>{1, 2, 4, 8});
  CHECK(parse_axis("--grid", "m=1..32:x2").values == std::vector<Json>{1, 2, 4, 8, 16, 32});
  CHECK(parse_axis("--grid", "m=1..5").values == std::vector<Json>{1, 2, 3, 4, 5});
  CHECK(parse_axis("--grid", "m=0..1:+0.25").values == std::vector<Json>{0, 0.25, 0.5, 0.75, 1});
  CHECK(parse_axis("--grid", "k=1,4..6,100").values == std::vector<Json>{1, 4, 5, 6, 100});
  CHECK(parse_axis("--grid", "schedule.kind=gpipe,one_f_one_b").values ==
        std::vector<Json>{"gpipe", "one_f_one_b"});
  CHECK(parse_axis("--grid", "x=true,false").values == std::vector<Json>{true, false});
  const Axis objects = parse_axis("--grid", R"(slice={"chips":[2,2],"wraparound":[false,false]},v3-32)");
  REQUIRE(objects.values.size() == 2);
  CHECK(objects.values[0]["chips"] == Json::array({2, 2}));
  CHECK(objects.values[1] == "v3-32");
  CHECK(parse_axis("--grid", R"(p=[[1,2],[3,4]])").values.size() == 2);
}

TEST_CASE("malformed axes are bad input", "[sweep]") {
  for (const char* text :
       {"stages", "=1,2", "m=", "m=8..1", "m=1..8:x1", "m=0..8:x2", "m=1..8:y2", "m=a..8"}) {
    INFO(text);
    CHECK_THROWS_AS(parse_axis("--grid", text), ConfigError);
  }
}

TEST_CASE("grid axes multiply, the first varying slowest, zip axes move together", "[sweep]") {
  const auto points = enumerate_points({parse_axis("--grid", "a=1,2"), parse_axis("--grid", "b=x,y,z")},
                                       {parse_axis("--zip", "c=10,20"), parse_axis("--zip", "d=100,200")});
  REQUIRE(points.size() == 12);
  CHECK(points[0].key() == R"(a=1;b="x";c=10;d=100)");
  CHECK(points[1].key() == R"(a=1;b="x";c=20;d=200)");
  CHECK(points[2].key() == R"(a=1;b="y";c=10;d=100)");
  CHECK(points[11].key() == R"(a=2;b="z";c=20;d=200)");
  for (std::size_t i = 0; i < points.size(); ++i) CHECK(points[i].index == i);
  CHECK(points[3].set_arguments() ==
        std::vector<std::string>{"--set", "a=1", "--set", "b=y", "--set", "c=20", "--set", "d=200"});
  CHECK_THROWS_AS(enumerate_points({}, {parse_axis("--zip", "c=1,2"), parse_axis("--zip", "d=1,2,3")}),
                  ConfigError);
}

TEST_CASE("shards partition the points", "[sweep]") {
  const auto points = enumerate_points({parse_axis("--grid", "a=1..10")}, {});
  std::vector<int> seen(10, 0);
  for (int i = 0; i < 3; ++i)
    for (const auto& p : shard_points(points, i, 3)) ++seen[p.index];
  CHECK(seen == std::vector<int>(10, 1));
  CHECK(parse_shard("2/3") == std::pair<int, int>{2, 3});
  for (const char* bad : {"3/3", "-1/3", "1", "a/b", "1/0"}) CHECK_THROWS_AS(parse_shard(bad), ConfigError);
}

namespace {
Json fake_record(std::size_t index, const Json& point, double step) {
  Json result{{"step_time_s", step},
              {"examples_per_s", 100 / step},
              {"mxu_utilization", 0.5},
              {"bubble_fraction", 0.0},
              {"bubble_fraction_ideal", nullptr},
              {"peak_hbm_bytes", 1e9},
              {"hbm_capacity_bytes", 16e9},
              {"fits", true},
              {"breakdown", {{"step_split_s", {{"update", 0.001}}}, {"exposed_communication_s", 0.002}}}};
  return Json{
      {"index", index}, {"key", point.dump()}, {"point", point}, {"result", result}, {"error", nullptr}};
}
}  // namespace

TEST_CASE("sweep reports compare the alternatives of a non-numeric axis side by side", "[sweep][reports]") {
  const Json layouts = Json::array({Json{{"batch", "batch"}}, Json{{"batch", "batch"}, {"d_ff", "model"}}});
  Json meta{{"study", "s.json"},
            {"points", 2},
            {"axes", Json::array({Json{{"path", "schedule.layout"}, {"values", layouts}}})}};
  const std::vector<Json> records = {fake_record(0, Json{{"schedule.layout", layouts[0]}}, 0.5),
                                     fake_record(1, Json{{"schedule.layout", layouts[1]}}, 0.25)};
  const std::string md = tpusim::reports::sweep_markdown(meta, records);
  CHECK_THAT(md, Catch::Contains("## Comparison by `schedule.layout`"));
  CHECK_THAT(md, Catch::Contains("| {\"batch\":\"batch\"} | 500.000 ms | 200.0 |"));
  CHECK_THAT(md, Catch::Contains("| {\"batch\":\"batch\",\"d_ff\":\"model\"} | 250.000 ms | 400.0 |"));
  // With a numeric axis beside it, one row per setting of the other axes.
  meta["axes"].push_back(Json{{"path", "batch"}, {"values", {64, 128}}});
  const std::vector<Json> grid = {fake_record(0, Json{{"schedule.layout", layouts[0]}, {"batch", 64}}, 0.5),
                                  fake_record(1, Json{{"schedule.layout", layouts[1]}, {"batch", 64}}, 0.25)};
  CHECK_THAT(tpusim::reports::sweep_markdown(meta, grid), Catch::Contains("| 64 | 500.000 ms |"));
}

namespace {
/// A record as `tpusim sweep` writes it: the full result (structured figures too) or an error.
Json full_record(std::size_t index, const Json& point, double step, bool failed) {
  Json r = fake_record(index, point, step);
  r["key"] = point.dump();
  if (failed) {
    r["result"] = nullptr;
    r["error"] = "batch: found 32, expected a multiple of replicas x microbatches";
    return r;
  }
  r["result"]["bubble_fraction_ideal"] = 0.25;
  r["result"]["cores"] = Json::array({Json{{"core", 0}, {"busy_s", step}}});
  r["result"]["breakdown"]["communication_by_phase_s"] = Json{{"x", 0.001}};
  return r;
}

/// The sweep's reports as the sweep writes them: from each record's summary only.
std::string summarized_markdown(const Json& meta, const std::vector<Json>& records) {
  std::vector<Json> summaries;
  for (const auto& r : records) summaries.push_back(tpusim::reports::sweep_summary(r));
  (void)tpusim::reports::sweep_html(meta, summaries);
  (void)tpusim::reports::sweep_charts(meta, summaries);
  return tpusim::reports::sweep_markdown(meta, summaries);
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("sweep reports show a failed point on every kind of compared axis as failed cells",
          "[sweep][reports]") {
  SECTION("remat compared beside micro-batches (the failure of issue 30)") {
    Json meta{{"study", "s.json"},
              {"points", 4},
              {"axes", Json::array({Json{{"path", "schedule.microbatches"}, {"values", {16, 64}}},
                                    Json{{"path", "schedule.remat"}, {"values", {true, false}}}})}};
    std::vector<Json> records;
    for (int m : {16, 64})
      for (bool remat : {true, false})
        records.push_back(full_record(records.size(),
                                      Json{{"schedule.microbatches", m}, {"schedule.remat", remat}},
                                      remat ? 0.8 : 0.6, m == 64));
    const std::string md = summarized_markdown(meta, records);
    CHECK_THAT(md, Catch::Contains("4 of 4 points recorded, 2 failed."));
    CHECK_THAT(md, Catch::Contains("## Comparison by `schedule.remat`"));
    CHECK_THAT(md, Catch::Contains("| 16 | 800.000 ms | 125.0 | 1.000 ms | 2.000 ms |"));
    CHECK_THAT(md, Catch::Contains("| 64 | failed | failed | failed | failed | failed | failed |"));
    CHECK(count_of(md, "| 64 | true | failed |") == 1);  // in "All points"
    CHECK_THAT(md, Catch::Contains("## Failed points"));
  }
  SECTION("weight update compared alone, one alternative failed") {
    Json meta{
        {"study", "s.json"},
        {"points", 2},
        {"axes",
         Json::array({Json{{"path", "schedule.weight_update"}, {"values", {"replicated", "sharded"}}}})}};
    const std::vector<Json> records = {
        full_record(0, Json{{"schedule.weight_update", "replicated"}}, 0.5, false),
        full_record(1, Json{{"schedule.weight_update", "sharded"}}, 0.4, true)};
    const std::string md = summarized_markdown(meta, records);
    CHECK_THAT(md, Catch::Contains("2 of 2 points recorded, 1 failed."));
    CHECK_THAT(md, Catch::Contains("| replicated | 500.000 ms | 200.0 | 1.000 ms | 2.000 ms | 953.67 MiB |"));
    CHECK_THAT(md, Catch::Contains("| sharded | failed | failed | failed | failed | failed |"));
  }
  SECTION("stages x micro-batches (the bubble charts) with failed cells, and a compared kind") {
    Json meta{{"study", "s.json"},
              {"points", 8},
              {"axes", Json::array({Json{{"path", "schedule.stages"}, {"values", {1, 2}}},
                                    Json{{"path", "schedule.microbatches"}, {"values", {1, 3}}},
                                    Json{{"path", "schedule.kind"}, {"values", {"gpipe", "one_f_one_b"}}}})}};
    std::vector<Json> records;
    for (int k : {1, 2})
      for (int m : {1, 3})
        for (const char* kind : {"gpipe", "one_f_one_b"})
          records.push_back(
              full_record(records.size(),
                          Json{{"schedule.stages", k}, {"schedule.microbatches", m}, {"schedule.kind", kind}},
                          0.1 * k, m == 3));
    const std::string md = summarized_markdown(meta, records);
    CHECK_THAT(md, Catch::Contains("8 of 8 points recorded, 4 failed."));
    CHECK_THAT(md, Catch::Contains("![bubble](sweep_bubble.svg)"));
    CHECK(count_of(md, "| 3 | failed | failed |") == 2);  // one comparison row per K
    const auto charts = tpusim::reports::sweep_charts(meta, records);
    REQUIRE(charts.count("bubble") == 1);
    CHECK_THAT(charts.at("bubble"), Catch::Contains("fill=\"#f4f4f4\""));  // M = 3: no data
  }
  SECTION("a stage axis that is not numbers draws no bubble chart instead of failing") {
    Json meta{{"study", "s.json"},
              {"points", 2},
              {"axes", Json::array({Json{{"path", "schedule.stages"}, {"values", {2, "four"}}},
                                    Json{{"path", "schedule.microbatches"}, {"values", {1, 2}}}})}};
    const std::vector<Json> records = {
        full_record(0, Json{{"schedule.stages", 2}, {"schedule.microbatches", 1}}, 0.1, false),
        full_record(1, Json{{"schedule.stages", "four"}, {"schedule.microbatches", 1}}, 0.1, true)};
    const std::string md = summarized_markdown(meta, records);
    CHECK_THAT(md, !Catch::Contains("sweep_bubble.svg"));
    CHECK_THAT(md, Catch::Contains("2 of 2 points recorded, 1 failed."));
  }
}

TEST_CASE("a sweep over names alone (slices) charts them as categories and marks what does not fit",
          "[sweep][reports]") {
  Json meta{{"study", "s.json"},
            {"points", 3},
            {"axes", Json::array({Json{{"path", "slice"}, {"values", {"v4-16", "v4-32", "v4-64"}}}})}};
  std::vector<Json> records;
  for (const char* slice : {"v4-16", "v4-32", "v4-64"})
    records.push_back(fake_record(records.size(), Json{{"slice", slice}}, 0.5 / double(records.size() + 1)));
  records[0]["result"]["fits"] = false;  // the smallest slice does not hold the model
  const auto charts = tpusim::reports::sweep_charts(meta, records);
  REQUIRE(charts.count("throughput") == 1);
  REQUIRE(charts.count("memory") == 1);
  for (const auto& [name, svg] : charts) {
    INFO(name);
    for (const char* slice : {">v4-16<", ">v4-32<", ">v4-64<"}) CHECK_THAT(svg, Catch::Contains(slice));
    CHECK(count_of(svg, "(does not fit)</title>") == 1);       // only v4-16's point is hollow
    CHECK_THAT(svg, Catch::Contains(">does not fit</text>"));  // the legend says what hollow means
  }
  CHECK_THAT(charts.at("throughput"), Catch::Contains("all: v4-16 -> 200 (does not fit)"));
  CHECK_THAT(tpusim::reports::sweep_markdown(meta, records),
             Catch::Contains("![throughput](sweep_throughput.svg)"));
}

TEST_CASE("a sweep with a target and a price charts days against cost, with and without goodput",
          "[sweep][reports]") {
  Json meta{{"study", "s.json"},
            {"points", 3},
            {"axes", Json::array({Json{{"path", "slice"}, {"values", {"v4-128", "v4-256", "v4-512"}}}})}};
  std::vector<Json> records;
  for (const char* slice : {"v4-128", "v4-256", "v4-512"}) {
    const double n = double(records.size() + 1);
    Json r = fake_record(records.size(), Json{{"slice", slice}}, 0.5 / n);
    r["result"]["time_to_train"] = {{"days", 64 / n}, {"days_with_goodput", 65 / n}};
    r["result"]["cost"] = {{"usd", 1000 + 10 * n}, {"usd_with_goodput", 1100 + 10 * n}};
    records.push_back(tpusim::reports::sweep_summary(r));
  }
  const auto charts = tpusim::reports::sweep_charts(meta, records);
  REQUIRE(charts.count("days_cost") == 1);
  const std::string& svg = charts.at("days_cost");
  CHECK(count_of(svg, "<title>without goodput: ") == 3);
  CHECK(count_of(svg, "<title>with goodput: ") == 3);
  CHECK_THAT(svg, Catch::Contains("without goodput: 1010 -> 64"));
  CHECK_THAT(svg, Catch::Contains("with goodput: 1130 -> 21.67"));
  CHECK_THAT(tpusim::reports::sweep_markdown(meta, records),
             Catch::Contains("![days_cost](sweep_days_cost.svg)"));
  // Without a price, no such chart.
  for (auto& r : records) r["result"].erase("cost");
  CHECK(tpusim::reports::sweep_charts(meta, records).count("days_cost") == 0);
}

TEST_CASE("a sweep record's summary keeps what the reports read and drops per-core figures",
          "[sweep][reports]") {
  const Json full = full_record(0, Json{{"batch", 64}}, 0.5, false);
  const Json s = tpusim::reports::sweep_summary(full);
  CHECK(s["result"]["step_time_s"] == 0.5);
  CHECK(s["result"]["breakdown"]["step_split_s"]["update"] == 0.001);
  CHECK(s["result"]["breakdown"]["exposed_communication_s"] == 0.002);
  CHECK_FALSE(s["result"].contains("cores"));
  CHECK_FALSE(s["result"]["breakdown"].contains("communication_by_phase_s"));
  const Json failed = tpusim::reports::sweep_summary(full_record(1, Json{{"batch", 64}}, 0.5, true));
  CHECK(failed["result"].is_null());
  CHECK(failed["error"].is_string());
}

TEST_CASE("a sweep refuses a path swept twice, a value twice on an axis and a grid too large to hold",
          "[sweep]") {
  const Axis a{"batch", {32, 64}}, b{"batch", {96, 128}}, twice{"batch", {32, 32, 64}};
  CHECK_THROWS_AS(enumerate_points({a, b}, {}), tpusim::ConfigError);
  CHECK_THROWS_AS(enumerate_points({a}, {b}), tpusim::ConfigError);
  CHECK_THROWS_AS(enumerate_points({twice}, {}), tpusim::ConfigError);
  std::vector<Json> many(1001);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = int(i);
  CHECK_THROWS_AS(enumerate_points({Axis{"x", many}, Axis{"y", many}}, {}),
                  tpusim::ConfigError);  // 1,002,001 points
  CHECK(enumerate_points({a, Axis{"model.layers", {1, 2}}}, {}).size() == 4);
}

TEST_CASE("a zip axis may repeat a value when the zipped combinations differ", "[sweep]") {
  // Comparing slices: tpu-v3 on one, tpu-v4 on two.
  const Axis hardware{"hardware", {"tpu-v3", "tpu-v4", "tpu-v4"}},
      slice{"slice", {"v3-512", "v4-256", "v4-512"}};
  const auto points = enumerate_points({}, {hardware, slice});
  REQUIRE(points.size() == 3);
  CHECK(points[1].key() != points[2].key());
  CHECK(points[2].settings ==
        std::vector<std::pair<std::string, Json>>{{"hardware", "tpu-v4"}, {"slice", "v4-512"}});
  // The same combination twice is one point twice: refused.
  const Axis again{"slice", {"v3-512", "v4-256", "v4-256"}};
  CHECK_THROWS_AS(enumerate_points({}, {hardware, again}), tpusim::ConfigError);
}
