// Hardware files, slices, studies and overrides: loading, validation and error messages.
#include <catch2/catch.hpp>
#include <fstream>

#include "schedules/study.hpp"
#include "test_support.hpp"

using namespace tpusim;
using tpusim::test::problem_paths;

namespace {

Json v3_json() { return read_json_file(config_dir() / "hardware" / "tpu-v3.json"); }

Json minimal_study() {
  return Json::parse(R"({
    "hardware": "tpu-v3", "slice": "v3-8",
    "model": {"kind": "mlp", "layers": 2, "width": 256, "input": 256, "classes": 10},
    "batch": 64, "optimizer": {"kind": "sgd"}, "schedule": {"kind": "data_parallel"}})");
}

}  // namespace

TEST_CASE("shipped hardware loads with the documented figures", "[config]") {
  const auto v2 = load_hardware("tpu-v2");
  const auto v3 = load_hardware("tpu-v3");
  CHECK(v2.chip.cores == 2);
  CHECK(v3.core.mxus == 2);
  CHECK(v2.core.hbm_bytes == 8.0 * (1 << 30));
  CHECK(v3.core.hbm_bytes == 16.0 * (1 << 30));
  CHECK(v2.chip.cores * v2.core.peak_matmul_flops_per_s() == Approx(45.9e12).epsilon(0.005));
  CHECK(v3.chip.cores * v3.core.peak_matmul_flops_per_s() == Approx(123e12).epsilon(0.005));
  CHECK(v3.pod.chips() == 1024);
  CHECK(v2.pod.chips() == 256);
  CHECK(v3.slices.at("v3-32").chips() * 2 == 32);
  CHECK(v3.slices.at("v3-2048").wraparound == std::vector<bool>{true, true});
  CHECK(v3.slices.at("v3-32").wraparound == std::vector<bool>{false, false});
  CHECK(v3.slices.at("v3-1024").wraparound == std::vector<bool>{false, true});
  CHECK(v3.sources.at("core.hbm_bytes_per_core").rfind("doc", 0) == 0);
}

TEST_CASE("every figure of the shipped hardware carries a source", "[config]") {
  for (const auto& name : shipped_hardware()) {
    const auto hw = load_hardware(name);
    CHECK(hw.sources.size() >= 23);
    for (const auto& [path, source] : hw.sources) {
      INFO(name << " " << path);
      CHECK(!source.empty());
    }
  }
}

TEST_CASE("a hypothetical 32 GiB TPU is a one-value change", "[config]") {
  Json j = v3_json();
  j["core"]["hbm_bytes_per_core"]["value"] = 32.0 * (1 << 30);
  const auto hw = parse_hardware(j, "test");
  CHECK(hw.core.hbm_bytes == 32.0 * (1 << 30));
}

TEST_CASE("hardware validation reports every problem with its path", "[config]") {
  Json j = v3_json();
  j["core"]["clock_hz"]["value"] = -1;
  j["core"]["mxu_rowz"] = j["core"]["mxu_rows"];
  j["chip"]["tdp_w"].erase("source");
  j["pod"]["chips"] = Json::array({32, 0});
  j["pod"]["wraparound"] = Json::array({true, true, true});
  const auto paths = problem_paths([&] { parse_hardware(j, "test"); });
  CHECK(std::count(paths.begin(), paths.end(), "core.clock_hz.value") == 1);
  CHECK(std::count(paths.begin(), paths.end(), "core.mxu_rowz") == 1);
  CHECK(std::count(paths.begin(), paths.end(), "chip.tdp_w.source") == 1);
  CHECK(std::count(paths.begin(), paths.end(), "pod.chips[1]") == 1);
  CHECK(std::count(paths.begin(), paths.end(), "pod.wraparound") == 1);
}

TEST_CASE("the runtime's HBM reserve leaves the usable capacity, a reserve of it all is rejected",
          "[config]") {
  // XLA's out-of-memory messages: 15.48G of a v3 core's 16 GiB, 7.48G of a v2 core's 8 GiB.
  CHECK(load_hardware("tpu-v3").core.usable_hbm_bytes() / (1 << 30) == Approx(15.48).margin(0.005));
  CHECK(load_hardware("tpu-v2").core.usable_hbm_bytes() / (1 << 30) == Approx(7.48).margin(0.005));
  Json j = v3_json();
  j["core"]["hbm_reserved_bytes_per_core"]["value"] = j["core"]["hbm_bytes_per_core"]["value"];
  const auto paths = problem_paths([&] { parse_hardware(j, "test"); });
  CHECK(paths == std::vector<std::string>{"core.hbm_reserved_bytes_per_core.value"});
}

TEST_CASE("a stated peak that disagrees with the derived one is rejected", "[config]") {
  Json j = v3_json();
  j["chip"]["peak_bf16_flops_per_s_per_chip"]["value"] = 200e12;
  const auto paths = problem_paths([&] { parse_hardware(j, "test"); });
  CHECK(paths == std::vector<std::string>{"chip.peak_bf16_flops_per_s_per_chip.value"});
}

TEST_CASE("a named slice must have the cores its name says", "[config]") {
  Json j = v3_json();
  j["slices"]["v3-32"]["chips"] = Json::array({4, 8});
  const auto paths = problem_paths([&] { parse_hardware(j, "test"); });
  CHECK(paths == std::vector<std::string>{"slices.v3-32.chips"});
}

TEST_CASE("custom slices are validated against the pod", "[config]") {
  const auto hw = load_hardware("tpu-v2");
  Problems problems("test");
  const auto ok =
      parse_slice(Json::parse(R"({"chips": [4, 2], "wraparound": [false, true]})"), "slice", hw, problems);
  CHECK(problems.empty());
  CHECK(ok.chips() == 8);
  CHECK(ok.wraparound == std::vector<bool>{false, true});
  parse_slice(Json::parse(R"({"chips": [32, 2], "wraparound": [false, false]})"), "slice", hw, problems);
  parse_slice(Json("v3-32"), "slice", hw, problems);
  CHECK_THROWS_WITH(problems.throw_if_any(), Catch::Contains("slice.chips") && Catch::Contains("\"v3-32\""));
}

TEST_CASE("a minimal study loads", "[config]") {
  const Study s = parse_study(minimal_study(), "test");
  CHECK(s.cores() == 8);
  CHECK(s.model.layers.size() == 3);
  CHECK(s.optimizer.kind == "sgd");
}

TEST_CASE("study problems are all reported at once", "[config]") {
  Json j = minimal_study();
  j["batch"] = 0;
  j["model"]["width"] = "wide";
  j["optimizer"]["kind"] = "adamax";
  j["extra"] = 1;
  const auto paths = problem_paths([&] { parse_study(j, "test"); });
  CHECK(paths.size() == 4);
  for (const char* p : {"batch", "model.width", "optimizer.kind", "extra"})
    CHECK(std::count(paths.begin(), paths.end(), p) == 1);
}

TEST_CASE("batch must divide over the cores", "[config]") {
  Json j = minimal_study();
  j["batch"] = 12;
  CHECK_THROWS_WITH(parse_study(j, "test"), Catch::Contains("batch: found 12") &&
                                                Catch::Contains("multiple of the 8 replicas (TensorCores)"));
}

TEST_CASE("over several slices the batch error names the batch written and the multiple it must be",
          "[config]") {
  // v4-16 under megacore: 8 chips a slice; two slices of 13 examples each cannot split.
  Json j = minimal_study();
  j["hardware"] = "tpu-v4";
  j["slice"] = "v4-16";
  j["megacore"] = true;
  j["slices"] = 2;
  j["batch"] = 26;
  CHECK_THROWS_WITH(parse_study(j, "test"), Catch::Contains("batch: found 26") &&
                                                Catch::Contains("a multiple of 16 (2 slices") &&
                                                Catch::Contains("the 8 replicas (chips)"));
  j["batch"] = 32;
  CHECK_NOTHROW(parse_study(j, "test"));
}

TEST_CASE("overrides set nested fields, array elements, and parse JSON values", "[config]") {
  Json j = minimal_study();
  apply_override(j, "model.layers=7");
  apply_override(j, "slice={\"chips\": [2, 1], \"wraparound\": [false, false]}");
  apply_override(j, "slice.chips.0=1");
  apply_override(j, "optimizer.kind=adam");
  CHECK(j["model"]["layers"] == 7);
  CHECK(j["slice"]["chips"] == Json::array({1, 1}));
  CHECK(j["optimizer"]["kind"] == "adam");
  CHECK_THROWS_AS(apply_override(j, "novalue"), ConfigError);
  CHECK_THROWS_AS(apply_override(j, "slice.chips.5=1"), ConfigError);
  CHECK_THROWS_AS(apply_override(j, "batch.x=1"), ConfigError);
  CHECK_THROWS_AS(apply_override(j, "model..layers=1"), ConfigError);
}

TEST_CASE("an unknown hardware name lists the shipped ones", "[config]") {
  CHECK_THROWS_WITH(load_hardware("tpu-v9"), Catch::Contains("tpu-v2") && Catch::Contains("tpu-v3"));
}

TEST_CASE("malformed JSON names the file and position", "[config]") {
  const auto path = std::filesystem::temp_directory_path() / "tpusim_malformed.json";
  { std::ofstream(path) << "{\"batch\": 1,\n \"x\": }"; }
  CHECK_THROWS_WITH(load_study(path), Catch::Contains("tpusim_malformed.json") && Catch::Contains("line 2"));
}

TEST_CASE("a JSON file read again is its new contents once it changed", "[config]") {
  // Files are parsed once while their size and modification time stay (a study's range ends each
  // load its hardware): an edit shows, with the same size too.
  const auto path = std::filesystem::temp_directory_path() / "tpusim_reread.json";
  { std::ofstream(path) << R"({"a": 1})"; }
  CHECK(read_json_file(path)["a"] == 1);
  CHECK(read_json_file(path)["a"] == 1);
  { std::ofstream(path) << R"({"a": 22})"; }
  CHECK(read_json_file(path)["a"] == 22);
  { std::ofstream(path) << R"({"a": 33})"; }
  std::filesystem::last_write_time(path, std::filesystem::last_write_time(path) + std::chrono::seconds(5));
  CHECK(read_json_file(path)["a"] == 33);
  { std::ofstream(path) << "{\"a\": }"; }
  CHECK_THROWS_WITH(read_json_file(path), Catch::Contains("malformed JSON"));
  std::filesystem::remove(path);
  CHECK_THROWS_WITH(read_json_file(path), Catch::Contains("no readable file"));
}

TEST_CASE("multi-pass kernels must be lists of [reads, writes]", "[config]") {
  Json j = v3_json();
  j["core"]["softmax_forward_kernels"]["value"] = Json::parse("[[1, 0], [1]]");
  j["core"]["normalization_backward_kernels"]["value"] = Json::array();
  try {
    parse_hardware(j, "hw");
    FAIL("accepted broken kernels");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("core.softmax_forward_kernels.value[1]"));
    CHECK_THAT(what, Catch::Contains("core.normalization_backward_kernels.value"));
  }
  const HardwareSpec hw = parse_hardware(v3_json(), "hw");
  CHECK(hw.core.normalization_backward.tensor_passes() == 5);
  CHECK(hw.sources.at("core.normalization_backward_kernels").rfind("derived", 0) == 0);
}

TEST_CASE("JSON is parsed strictly: repeated keys, deep nesting and overflowing numbers are bad input",
          "[config]") {
  auto message = [](const std::string& text) {
    try {
      parse_json_strict(text, "f.json");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(message(R"({"a": [{"b": 1}, {"c": 2, "b": [1], "c": 3}]})"),
             Catch::Contains("a[1].c: found the key a second time (its first value: 2)"));
  CHECK_THAT(message(R"({"a": {"b": {"x": 1}, "b": 2}})"),
             Catch::Contains(R"(a.b: found the key a second time (its first value: {"x":1}))"));
  CHECK_THAT(message(std::string(65, '[') + std::string(65, ']')), Catch::Contains("nesting deeper than 64"));
  CHECK(message(std::string(64, '[') + std::string(64, ']')).empty());
  CHECK_THAT(message(R"({"batch": 1e400})"), Catch::Contains("beyond the range of a double"));
  CHECK(message(R"({"a": {"b": 1}, "b": {"b": 2}, "c": [{"b": 3}, {"b": 4}]})")
            .empty());  // the same key in different objects
  CHECK_THROWS_AS(parse_json_strict("{", "f.json"), Json::parse_error);
}

TEST_CASE("TPU-v4 loads from its public figures: a 3D torus of cubes, megacore chips", "[config][v4]") {
  const auto v4 = load_hardware("tpu-v4");
  CHECK(v4.pod.shape == std::vector<int>{16, 16, 16});
  CHECK(v4.pod_blocks == std::vector<int>{4, 4, 4});
  CHECK(v4.chip.ici_links == 6);
  CHECK(v4.chip.megacore);
  CHECK(v4.chip.cores * v4.core.peak_matmul_flops_per_s() == Approx(275e12).epsilon(0.001));
  CHECK(v4.chip.host_board_chips == std::vector<int>{2, 2, 1});
  // Slices as Cloud names them: v4-N is N TensorCores; wrap-around on whole cubes only.
  CHECK(v4.slices.at("v4-8").shape == std::vector<int>{2, 2, 1});
  CHECK(v4.slices.at("v4-64").wraparound == std::vector<bool>{false, false, false});
  CHECK(v4.slices.at("v4-128").wraparound == std::vector<bool>{true, true, true});
  CHECK(v4.slices.at("v4-6912").shape == std::vector<int>{12, 12, 24});  // whole cubes, not a sub-box
  for (const auto& [name, s] : v4.slices) CHECK(s.chips() * 2 == std::stoi(name.substr(3)));
  // What is not published is carried over from v3 and says so.
  for (const char* figure : {"core.hbm_sustained_bandwidth_fraction", "core.op_overhead_s",
                             "core.gradient_collectives_overlap_backward", "chip.ici_latency_s_per_hop"})
    CHECK_THAT(v4.sources.at(figure), Catch::StartsWith("assumption, carried over from tpu-v3 unchanged"));
  const auto v3 = load_hardware("tpu-v3");
  CHECK(v4.core.hbm_sustained_fraction == v3.core.hbm_sustained_fraction);
  CHECK(v4.core.op_overhead_s == v3.core.op_overhead_s);
}

TEST_CASE("today's TPUs load from their public figures: per-chip totals as published, slices as named",
          "[config][today]") {
  struct Published {
    const char* name;
    int cores;
    double peak, hbm_bytes, hbm_bandwidth, ici_both_ways;  // per chip
    int chips_per_name_unit;                               // a slice name counts chips (1) or cores
  };
  const double GiB = double(1 << 30);
  for (const Published& p : {Published{"tpu-v5e", 1, 197e12, 16 * GiB, 819e9, 400e9, 1},
                             Published{"tpu-v6e", 1, 918e12, 32 * GiB, 1640e9, 800e9, 1},
                             Published{"tpu-v5p", 2, 459e12, 95e9, 2765e9, 1200e9, 2},
                             Published{"tpu7x", 2, 2307e12, 192 * GiB, 7380e9, 1200e9, 2}}) {
    INFO(p.name);
    const auto hw = load_hardware(p.name);
    CHECK(hw.chip.cores == p.cores);
    CHECK(hw.chip.cores * hw.core.peak_matmul_flops_per_s() == Approx(p.peak).epsilon(0.01));
    CHECK(hw.chip.cores * hw.core.hbm_bytes == Approx(p.hbm_bytes));
    CHECK(hw.chip.cores * hw.core.hbm_bandwidth_bytes_per_s == Approx(p.hbm_bandwidth));
    CHECK(2 * hw.chip.ici_links * hw.chip.ici_bandwidth_bytes_per_s == Approx(p.ici_both_ways));
    CHECK(hw.chip.megacore == (std::string(p.name) == "tpu-v5p"));
    for (const auto& [name, s] : hw.slices)  // a name by its shape (v5p-4x8x64) counts nothing
      if (name.find('x', name.rfind('-')) == std::string::npos)
        CHECK(s.chips() * p.chips_per_name_unit == std::stoll(name.substr(name.rfind('-') + 1)));
    // What is not published is carried over from v4 and says so.
    CHECK_THAT(hw.sources.at("core.op_overhead_s"), Catch::Contains("carried over from tpu-v4 unchanged"));
  }
  // A 16-chip axis wraps around on v5e and v6e, a shorter one does not; v5p wraps on whole cubes.
  const auto v5e = load_hardware("tpu-v5e");
  CHECK(v5e.slices.at("v5e-128").wraparound == std::vector<bool>{false, true});
  CHECK(v5e.slices.at("v5e-64").wraparound == std::vector<bool>{false, false});
  CHECK(v5e.slices.at("v5e-256").wraparound == std::vector<bool>{true, true});
  const auto v5p = load_hardware("tpu-v5p");
  CHECK(v5p.slices.at("v5p-64").wraparound == std::vector<bool>{false, false, false});
  CHECK(v5p.slices.at("v5p-128").wraparound == std::vector<bool>{true, true, true});
  CHECK(v5p.slices.at("v5p-12288").shape == std::vector<int>{16, 16, 24});
  CHECK(v5p.slices.at("v5p-4x8x64").chips() == 2048);  // MLPerf's, whole cubes
  // v6e's MXUs are 256 wide: a matmul dimension pads to 256.
  CHECK(load_hardware("tpu-v6e").core.mxu_cols == 256);
}

TEST_CASE("a chip of one TensorCore is one device whatever the study says of megacore", "[config][today]") {
  Json j = minimal_study();
  j["hardware"] = "tpu-v5e";
  j["slice"] = "v5e-8";
  j["megacore"] = true;
  const Study s = parse_study(j, "test");
  CHECK_FALSE(s.megacore);
  CHECK(s.cores() == 8);
  j["hardware"] = "tpu7x";  // two devices per chip that cannot be joined: refused, naming the key
  j["slice"] = "tpu7x-8";
  const auto paths = problem_paths([&] { parse_study(j, "test"); });
  CHECK(std::count(paths.begin(), paths.end(), "megacore") == 1);
}

TEST_CASE("a slice must have its pod's dimensions and fit it (or its optical cubes)", "[config][v4]") {
  const auto v4 = load_hardware("tpu-v4"), v3 = load_hardware("tpu-v3");
  CHECK(slice_shape_problem(v4, {12, 12, 24}).empty());
  CHECK(slice_shape_problem(v4, {2, 3, 4}).empty());  // inside one cube
  CHECK_THAT(slice_shape_problem(v4, {6, 6, 6}), Catch::Contains("whole blocks"));
  CHECK_THAT(slice_shape_problem(v4, {16, 16, 32}), Catch::Contains("at most the pod's 64 blocks"));
  CHECK_THAT(slice_shape_problem(v4, {4, 4}), Catch::Contains("3 dimensions"));
  CHECK_THAT(slice_shape_problem(v3, {4, 4, 4}), Catch::Contains("2 dimensions"));
  CHECK_THAT(slice_shape_problem(v3, {64, 2}), Catch::Contains("at most the tpu-v3 pod's"));
  Problems problems("test");
  parse_slice(Json::parse(R"({"chips": [4, 4, 4], "wraparound": [true, true]})"), "slice", v4, problems);
  parse_slice(Json::parse(R"({"chips": [4, 0, 4], "wraparound": [true, true, true]})"), "slice", v4,
              problems);
  parse_slice(Json::parse(R"({"chips": [4, 4, 4], "wraparound": [true, true, true]})"), "slice", v3,
              problems);
  try {
    problems.throw_if_any();
    FAIL("no ConfigError");
  } catch (const ConfigError& e) {
    std::vector<std::string> paths;
    for (const auto& p : e.problems()) paths.push_back(p.path);
    CHECK(paths == std::vector<std::string>{"slice.wraparound", "slice.chips[1]", "slice.chips"});
    CHECK_THAT(e.what(), Catch::Contains("2 dimensions, as the tpu-v3 pod's chips [32,32]"));
  }
  // A hardware file whose slice has another dimension count than its pod names both.
  Json j = read_json_file(config_dir() / "hardware" / "tpu-v4.json");
  j["slices"]["v4-8"]["chips"] = Json::array({2, 2});
  j["slices"]["v4-8"]["wraparound"] = Json::array({false, false});
  CHECK_THROWS_WITH(parse_hardware(j, "test"),
                    Catch::Contains("slices.v4-8.chips") &&
                        Catch::Contains("3 dimensions, as the tpu-v4 pod's chips [16,16,16]"));
}

TEST_CASE("megacore: a device is a whole chip where the hardware allows it", "[config][v4]") {
  Json study = Json::parse(R"({"hardware": "tpu-v4", "slice": "v4-128", "batch": 1024,
    "model": {"kind": "mlp", "layers": 2, "width": 256, "input": 256, "classes": 10},
    "optimizer": {"kind": "sgd"}, "schedule": {"kind": "data_parallel"}})");
  const Study mega = parse_study(study, "test");  // v4's default
  CHECK(mega.megacore);
  CHECK(mega.cores() == 64);
  CHECK(mega.hardware.chip.cores == 1);
  CHECK(mega.hardware.core.peak_matmul_flops_per_s() == Approx(275e12).epsilon(0.001));
  CHECK(mega.hardware.core.hbm_bytes == 32.0 * (1 << 30));
  CHECK(mega.hardware.core.hbm_bandwidth_bytes_per_s == 1200e9);
  CHECK(mega.hardware.core.vector_ops_per_s() == Approx(2 * 2 * 8 * 128 * mega.hardware.core.clock_hz));
  study["megacore"] = false;
  const Study split = parse_study(study, "test");
  CHECK_FALSE(split.megacore);
  CHECK(split.cores() == 128);
  CHECK(split.hardware.core.hbm_bytes == 16.0 * (1 << 30));
  CHECK(split.hardware.core.hbm_bandwidth_bytes_per_s == 600e9);
  // TPU-v3's cores are separate devices: megacore is bad input naming the field.
  study["hardware"] = "tpu-v3";
  study["slice"] = "v3-8";
  study["megacore"] = true;
  const auto paths = problem_paths([&] { parse_study(study, "test"); });
  CHECK(paths == std::vector<std::string>{"megacore"});
  study["megacore"] = "yes";
  CHECK(problem_paths([&] { parse_study(study, "test"); }) == std::vector<std::string>{"megacore"});
}

TEST_CASE("a hardware file's collective algorithms must be registered and cover every group", "[config]") {
  Json study = minimal_study();
  study["hardware"] =
      Json{{"base", "tpu-v3"}, {"override", {{"chip.collective_algorithms", {"hierarchical_rings"}}}}};
  auto paths = problem_paths([&] { parse_study(study, "test"); });
  REQUIRE(paths.size() == 1);
  CHECK_THAT(paths[0], Catch::EndsWith("chip.collective_algorithms.value"));
  study["hardware"]["override"]["chip.collective_algorithms"] = Json::array({"snake_ring", "butterfly"});
  CHECK_THROWS_WITH(parse_study(study, "test"), Catch::Contains("\"butterfly\" is none of them"));
  study["hardware"]["override"]["chip.collective_algorithms"] = Json::array({"parallel_rings", "snake_ring"});
  CHECK_NOTHROW(parse_study(study, "test"));
}

TEST_CASE("a hardware that does not load is the only problem reported, not the keys read after it",
          "[config]") {
  Json study = minimal_study();
  study["hardware"] = Json{{"base", "tpu-v4"}, {"override", {{"core.mxus_per_core", 2}}}};
  study["megacore"] = false;
  study["hbm_margin"] = "5%";
  auto paths = problem_paths([&] { parse_study(study, "test"); });
  REQUIRE(paths.size() == 1);
  CHECK_THAT(paths[0], Catch::EndsWith("chip.peak_bf16_flops_per_s_per_chip.value"));
}

TEST_CASE("a mesh size past 2^32 is refused, not wrapped to a small one", "[config]") {
  Json study = read_json_file(config_dir() / "studies" / "mesh-lm-s1.json");
  study["schedule"]["mesh"] = Json::parse(R"([["batch", 4294967304], ["model", 4]])");  // 2^32 + 8
  const auto paths = problem_paths([&] { parse_study(study, "test"); });
  CHECK(std::count(paths.begin(), paths.end(), "schedule.mesh[0]") == 1);
}

TEST_CASE("an unknown key's message lists the keys read only when present", "[config]") {
  Json study = minimal_study();
  study["model"] = Json::parse(
      R"({"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 64, "d_ff": 128, "heads": 2,
                                   "vocab": 100, "seq_len": 16, "dropot": 0.1})");
  CHECK_THROWS_WITH(parse_study(study, "test"), Catch::Contains("model.dropot") &&
                                                    Catch::Contains(" dropout ") &&
                                                    Catch::Contains(" attention_dropout "));
}

TEST_CASE("precision.weights and precision.optimizer set the state's dtypes, the update's traffic with them",
          "[config][precision]") {
  Json j = minimal_study();
  j["optimizer"] = {{"kind", "adam"}};
  const Study fp32 = parse_study(j, "test");
  CHECK(fp32.model.weight_bytes == 4.0);
  CHECK(fp32.model.slot_bytes == 4.0);
  j["precision"] = {{"weights", "bf16"}};
  const Study bf16 = parse_study(j, "test");
  CHECK(bf16.model.weight_bytes == 2.0);
  CHECK(bf16.model.slot_bytes == 2.0);  // the optimizer follows the weights unless told
  for (const auto& layer : bf16.model.layers) CHECK(layer.weight_bytes == 2.0);
  j["precision"]["optimizer"] = "fp32";
  const Study mixed = parse_study(j, "test");
  CHECK(mixed.model.weight_bytes == 2.0);
  CHECK(mixed.model.slot_bytes == 4.0);
  // Adam reads w, g, m, v and writes w, m, v: three weight-dtype tensors, four slot-dtype ones.
  const Layer& layer = fp32.model.layers.front();
  const double params = double(layer.params());
  CHECK(fp32.optimizer.update_op(fp32.model, layer).bytes == Approx(params * 7 * 4));
  CHECK(bf16.optimizer.update_op(bf16.model, layer).bytes == Approx(params * 7 * 2));
  CHECK(mixed.optimizer.update_op(mixed.model, layer).bytes == Approx(params * (3 * 2 + 4 * 4)));
  // A matmul reads its weight at the weights' dtype.
  const Op f = layer.work(8).forward.front(), b = bf16.model.layers.front().work(8).forward.front();
  CHECK(f.bytes - b.bytes == Approx(params * 2).epsilon(0.01));
}
