// Sweep axes and points: parsing, ranges, products, zips, shards, identities.
#include <catch2/catch.hpp>

#include "cli/sweep_grid.hpp"
#include "hardware/errors.hpp"
#include "reports/sweep_report.hpp"

using namespace tpusim;
using namespace tpusim::cli;

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

TEST_CASE("grid axes multiply, the first varying slowest; zip axes move together", "[sweep]") {
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
