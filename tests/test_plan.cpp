// The space `tpusim plan` searches (no engine): which schedules it proposes for a study.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "hardware/errors.hpp"
#include "schedules/step_bound.hpp"
#include "workflows/plan_space.hpp"

using namespace tpusim;
using namespace tpusim::workflows;

namespace {

Study study(const std::string& model, std::int64_t batch, const std::string& slice) {
  Json j = Json::parse(
      R"({"hardware": "tpu-v3", "optimizer": {"kind": "adam"}, "schedule": {"kind": "data_parallel"}})");
  j["model"] = Json::parse(model);
  j["batch"] = batch;
  j["slice"] = slice;
  return parse_study(j, "test");
}

const char* kTransformer =
    R"({"kind": "transformer", "activation": "relu", "layers": 12, "d_model": 256, "d_ff": 1024, "heads": 8, "vocab": 1000, "seq_len": 64})";

}  // namespace

TEST_CASE("plan proposes every pipeline shape that divides the slice and the batch", "[plan]") {
  const Study s = study(kTransformer, 64, "v3-8");  // 8 cores, 14 layers (embedding, 12 blocks, output)
  const auto all = plan_candidates(s, PlanSpace{});
  std::set<std::string> labels;
  int pipelines = 0, meshes = 0, dp = 0;
  std::set<std::string> on_model;
  for (const auto& c : all) {
    INFO(c.dump());
    CHECK(labels.insert(plan_label(c)).second);  // every label names one candidate
    const std::string kind = c["kind"];
    if (kind == "data_parallel") ++dp;
    if (kind == "mesh" && c["mesh"].size() == 2) {
      ++meshes;
      CHECK(c["mesh"][0][1].get<int>() * c["mesh"][1][1].get<int>() == 8);
      CHECK(c["layout"]["batch"] == "batch");
      on_model.insert(c["layout"].dump());
    }
    if (kind != "gpipe" && kind != "one_f_one_b") continue;
    ++pipelines;
    const int k = c["stages"], r = c["replicas"], m = c["microbatches"], t = c.value("tensor_parallel", 1);
    CHECK(k >= 2);
    CHECK(k * r * t <= 8);
    CHECK(t <= 4);
    CHECK((64 / r) % m == 0);
  }
  // (replicated / sharded x buckets of 8, 32 and 128 MiB x 1, 2, 4 or 8 accumulation steps (the
  // replica's 8 examples), or fully sharded, which does not accumulate) x fp32 / bf16 x remat
  // false, true or save_dots
  CHECK(dp == 2 * 2 * 3 * 3 * 4 + 2 * 3);
  for (const auto& c : all)
    if (c.contains("accumulation_steps")) {
      CHECK(c["weight_update"] != "fully_sharded");
      CHECK(8 % c["accumulation_steps"].get<int>() == 0);
      CHECK(plan_label(c).find(" accum " + c["accumulation_steps"].dump()) != std::string::npos);
    }
  // A replica of 2 examples accumulates over 1 or 2 micro-batches only; a space may ask for fewer.
  int small = 0;
  for (const auto& c : plan_candidates(study(kTransformer, 16, "v3-8"), PlanSpace{}))
    if (c["kind"] == "data_parallel") {
      CHECK(c.value("accumulation_steps", 1) <= 2);
      ++small;
    }
  CHECK(small == 2 * 2 * 3 * 3 * 2 + 2 * 3);
  PlanSpace no_accumulation;
  no_accumulation.accumulation_steps = std::vector<std::int64_t>{1};
  for (const auto& c : plan_candidates(s, no_accumulation)) CHECK(!c.contains("accumulation_steps"));
  CHECK(meshes == 3 * 3 * 3 * 3);  // model axis 2, 4, 8 x 3 layouts x 3 updates x 3 remat
  CHECK(on_model == std::set<std::string>{
                        R"({"batch":"batch","d_ff":"model","heads":"model","vocab":"model"})",
                        R"({"batch":"batch","d_model":"model"})", R"({"batch":"batch","seq":"model"})"});
  // Three-dimensional meshes too (Megatron's dimensions on the model axis, d_model or seq on
  // model2): (2, 2), (2, 4), (4, 2) x 2 layouts x 3 updates x 3 remat; none when the space
  // turns them off.
  PlanSpace without_3d;
  without_3d.meshes_3d = false;
  for (const auto& c : plan_candidates(s, without_3d)) CHECK(!(c["kind"] == "mesh" && c["mesh"].size() == 3));
  int three = 0;
  for (const auto& c : all)
    if (c["kind"] == "mesh" && c["mesh"].size() == 3) {
      ++three;
      CHECK(c["mesh"][0][1].get<int>() * c["mesh"][1][1].get<int>() * c["mesh"][2][1].get<int>() == 8);
      CHECK(c["mesh"][2][0] == "model");  // innermost: its partial sums are the most frequent
    }
  CHECK(three == 3 * 2 * 3 * 3);
  // M up to 64/R: 7, 6, 5 powers of two for R = 1, 2, 4. K = 2: T = 1 with R in {1, 2, 4}, T = 2
  // with R in {1, 2}, T = 4 with R = 1; K = 4: T = 1 with R in {1, 2}, T = 2 with R = 1; K = 8:
  // T = 1, R = 1. Remat true, false and save_dots, two kinds; with replicas (R > 1) the update
  // replicated or sharded over them.
  // Interleaved 1F1B besides: V = 2 and 4 where M is a multiple of K and K x V <= 14 layers (K = 2
  // with V 2 or 4, K = 4 with V 2), each with the M that K divides (K = 2: 6, 5, 4 for R = 1, 2,
  // 4; K = 4: 5, 4 for R = 1, 2), x 3 remat.
  const int interleaved = 3 * (2 * ((6 + 2 * 5 + 2 * 4) + (6 + 2 * 5) + 6) + ((5 + 2 * 4) + 5));
  CHECK(pipelines == 2 * 3 * ((7 + 2 * 6 + 2 * 5) + (7 + 2 * 6) + 7 + (7 + 2 * 6) + 7 + 7) + interleaved);
  for (const auto& c : all)
    if (c.contains("virtual_stages")) {
      CHECK(c["kind"] == "one_f_one_b");
      CHECK(c["microbatches"].get<int>() % c["stages"].get<int>() == 0);
      CHECK(c["partition"] == "balanced");
    }
  int sharded = 0;
  for (const auto& c : all)
    if (c["kind"] != "data_parallel" && c["kind"] != "mesh" && c.value("weight_update", "") == "sharded") {
      ++sharded;
      CHECK(c["replicas"].get<int>() > 1);
      CHECK(plan_label(c).find(" sharded") != std::string::npos);
    }
  // ... and interleaved, with replicas: K = 2 (V 2 and 4): T = 1 with R = 2, 4 (5 + 4 M), T = 2
  // with R = 2 (5); K = 4 (V 2): T = 1 with R = 2 (4); x 3 remat.
  CHECK(sharded == 2 * 3 * ((6 + 5) + 6 + 6) + 3 * (2 * ((5 + 4) + 5) + 4));
}

TEST_CASE("a plan space file narrows the search, bad ones name the path", "[plan]") {
  const Study s = study(kTransformer, 64, "v3-8");
  const std::string file = (std::filesystem::temp_directory_path() / "tpusim_plan_space_test.json").string();
  std::ofstream(file) << R"({"schema": "tpusim.plan_space/1", "kinds": ["gpipe"], "stages": [4],
                             "microbatches": [8], "remat": [true], "tensor_parallel": [1]})";
  auto labels = [](const std::vector<Json>& candidates) {
    std::vector<std::string> out;
    for (const auto& c : candidates) out.push_back(plan_label(c));
    return out;
  };
  // R = 1, or R = 2 with the update replicated or sharded over the replicas.
  CHECK(labels(plan_candidates(s, read_plan_space(file))) ==
        std::vector<std::string>{"gpipe K=4 R=1 M=8 remat", "gpipe K=4 R=2 M=8 remat",
                                 "gpipe K=4 R=2 M=8 remat sharded"});
  std::ofstream(file) << R"({"schema": "tpusim.plan_space/1", "kinds": ["gpipe"], "stages": [4],
                             "microbatches": [8], "remat": [true], "tensor_parallel": [1],
                             "placement": ["auto", "by_stage"]})";
  const auto placed = plan_candidates(s, read_plan_space(file));
  // by_stage only with replicas to place: R = 2.
  CHECK(labels(placed) == std::vector<std::string>{"gpipe K=4 R=1 M=8 remat", "gpipe K=4 R=2 M=8 remat",
                                                   "gpipe K=4 R=2 M=8 remat by-stage",
                                                   "gpipe K=4 R=2 M=8 remat sharded",
                                                   "gpipe K=4 R=2 M=8 remat by-stage sharded"});
  CHECK(placed[2]["placement"] == "by_stage");
  std::ofstream(file) << R"({"schema": "tpusim.plan_space/1", "kinds": ["gpipe"], "stages": [4],
                             "microbatches": [8], "remat": [true], "tensor_parallel": [1],
                             "placement": ["by_stage"], "weight_update": ["replicated"]})";
  // One replica has nothing to place: auto's candidate.
  CHECK(labels(plan_candidates(s, read_plan_space(file))) ==
        std::vector<std::string>{"gpipe K=4 R=1 M=8 remat", "gpipe K=4 R=2 M=8 remat by-stage"});
  // Interleaving: one_f_one_b with V = 2 where K divides M, and the space may name V.
  std::ofstream(file) << R"({"schema": "tpusim.plan_space/1", "kinds": ["one_f_one_b"], "stages": [4],
                             "replicas": [1], "microbatches": [8], "remat": [false], "tensor_parallel": [1],
                             "virtual_stages": [1, 2]})";
  CHECK(labels(plan_candidates(s, read_plan_space(file))) ==
        std::vector<std::string>{"one_f_one_b K=4 R=1 M=8", "one_f_one_b K=4 R=1 M=8 V=2 cost-cut"});
  std::ofstream(file) << R"({"schema": "tpusim.plan_space/1", "kinds": ["mesh"], "model_axis_dims": [["seq"]],
             "meshes_3d": false})";
  const auto seq = plan_candidates(s, read_plan_space(file));
  CHECK(seq.size() == 27);  // model axis 2, 4, 8 x 3 updates x 3 remat (two-dimensional only)
  for (const auto& c : seq) CHECK(plan_label(c).find(" (seq) ") != std::string::npos);
  std::ofstream(file) << R"({"schema": "tpusim.plan_space/1", "kinds": ["pipe"], "stagez": [2], "remat": [1],
             "model_axis_dims": [["d_ff"], ["batch"], ["bogus"]], "placement": ["auto", "diagonal"],
             "weight_update": ["shraded"]})";
  try {
    read_plan_space(file);
    FAIL("accepted a bad space");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("kinds[0]"));
    CHECK_THAT(what, Catch::Contains("stagez"));
    CHECK_THAT(what, Catch::Contains("remat[0]"));
    CHECK_THAT(what, Catch::Contains("model_axis_dims[1]"));
    CHECK_THAT(what, Catch::Contains("model_axis_dims[2]"));
    CHECK_THAT(what, Catch::Contains("placement[1]: found \"diagonal\", expected \"auto\" or \"by_stage\""));
    CHECK_THAT(what, Catch::Contains("weight_update[0]: found \"shraded\""));
  }
}

TEST_CASE("a convolutional net gets spatial mesh candidates (the image height on the model axis)", "[plan]") {
  const Study s =
      study(R"({"kind": "amoebanet_d", "normal_cells": 6, "filters": 64, "image_size": 64})", 64, "v3-8");
  int spatial = 0;
  for (const auto& c : plan_candidates(s, PlanSpace{}))
    if (c["kind"] == "mesh") {
      CHECK(c["layout"].contains("height"));
      ++spatial;
    }
  CHECK(spatial > 0);
}

TEST_CASE("plan keeps the study's batch-norm groups, leaving out what cannot honour them", "[plan]") {
  Json j =
      Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-32", "batch": 256, "optimizer": {"kind": "lars"},
    "model": {"kind": "resnet50", "image_size": 64, "classes": 10},
    "schedule": {"kind": "data_parallel", "batch_norm_group": 4}})");
  const auto grouped = plan_candidates(parse_study(j, "test"), PlanSpace{});
  j["schedule"].erase("batch_norm_group");
  const auto plain = plan_candidates(parse_study(j, "test"), PlanSpace{});
  int data_parallel = 0, meshes = 0, plain_meshes = 0, pipelines = 0;
  for (const auto& c : plain) {
    plain_meshes += c["kind"] == "mesh";
    pipelines += c["kind"] == "gpipe" || c["kind"] == "one_f_one_b";
  }
  REQUIRE(pipelines > 0);
  for (const auto& c : grouped) {
    REQUIRE((c["kind"] == "data_parallel" || c["kind"] == "mesh"));
    CHECK(c["batch_norm_group"] == 4);
    data_parallel += c["kind"] == "data_parallel";
    if (c["kind"] != "mesh") continue;
    ++meshes;
    for (const auto& axis : c["mesh"])
      if (axis[0] == "batch") CHECK(axis[1].get<int>() % 4 == 0);
  }
  // replicated or sharded x three buckets x fp32 or bf16 (no remat, not fully sharded, no
  // accumulation)
  CHECK(data_parallel == 12);
  CHECK(meshes > 0);
  CHECK(meshes < plain_meshes);  // batch:2 x spatial:16 cannot group 4 replicas
  // Every candidate kept is valid as it stands.
  for (const auto& c : grouped) {
    Json k = j;
    k["schedule"] = c;
    CHECK_NOTHROW(parse_study(k, "test"));
  }
}

TEST_CASE("the shipped everything.json space is the default search, written out", "[plan]") {
  const Study s = study(kTransformer, 64, "v3-8");
  const auto all = plan_candidates(s, PlanSpace{});
  const auto written =
      plan_candidates(s, read_plan_space(std::string(TPUSIM_CONFIG_DIR) + "/plan-spaces/everything.json"));
  REQUIRE(all.size() == written.size());
  for (std::size_t i = 0; i < all.size(); ++i) CHECK(all[i] == written[i]);
  // Every re-materialization policy is searched in every kind.
  std::set<std::string> policies;
  for (const auto& c : all)
    policies.insert(c.at("kind").get<std::string>() + " " + c.value("remat", Json(false)).dump());
  for (const char* kind : {"data_parallel", "gpipe", "one_f_one_b", "mesh"})
    for (const char* remat : {"false", "true", "\"save_dots\""})
      CHECK(policies.count(std::string(kind) + " " + remat));
}

TEST_CASE("every plan label reads back into its schedule", "[plan]") {
  // Data parallelism, 2D and 3D meshes, pipelines with tensor-parallel stages, interleaving,
  // by-stage placement and both partitions.
  const Study s = study(kTransformer, 64, "v3-8");
  PlanSpace space;
  space.placement = std::vector<std::string>{"auto", "by_stage"};
  space.partition = std::vector<std::string>{"balanced", "memory_aware"};
  int checked = 0;
  for (const auto& c : plan_candidates(s, space)) {
    INFO(plan_label(c));
    const LabeledPlan back = schedule_of_plan_label(plan_label(c));
    CHECK(back.schedule == c);
    CHECK(back.attention.empty());
    ++checked;
  }
  CHECK(checked > 1000);
  const LabeledPlan flash = schedule_of_plan_label("one_f_one_b K=4 R=16 M=64 V=4 cost-cut sharded flash");
  CHECK(flash.attention == "flash");
  CHECK(flash.schedule ==
        Json::parse(R"({"kind": "one_f_one_b", "stages": 4, "replicas": 16, "microbatches": 64,
      "virtual_stages": 4, "remat": false, "partition": "balanced", "weight_update": "sharded"})"));
  CHECK(schedule_of_plan_label("data_parallel sharded bf16 bucket 32 MiB accum 4 save_dots").schedule ==
        Json::parse(R"({"kind": "data_parallel", "weight_update": "sharded", "gradient_dtype": "bf16",
      "gradient_bucket_bytes": 33554432, "accumulation_steps": 4, "remat": "save_dots"})"));
  for (const char* bad : {"", "gpipe K=2", "pipeline K=2 R=1 M=4", "gpipe K=2 R=1 M=4 sideways",
                          "mesh batch8 replicated", "data_parallel sharded",
                          "data_parallel sharded bf16 accum 1", "data_parallel sharded bf16 accum two"})
    CHECK_THROWS_WITH(schedule_of_plan_label(bad), Catch::Contains("--plan-label"));
}

TEST_CASE("a bound across slices adds the data-center network's floor, one slice's is unchanged", "[plan]") {
  Json j = Json::parse(
      R"({"hardware": "tpu-v4", "slice": "v4-32", "megacore": true, "optimizer": {"kind": "adam"},
          "schedule": {"kind": "data_parallel"}})");
  j["model"] = Json::parse(kTransformer);
  j["batch"] = 64;
  const StepBound one = parse_study(j, "test").schedule->bound(parse_study(j, "test"));
  j["slices"] = 2;
  j["batch"] = 128;
  const Study two = parse_study(j, "test");
  const StepBound b = two.schedule->bound(two);
  // The DCN phase of each gradient bucket: at least 2 (S - 1) steps of its piece / S at a card's rate.
  CHECK(b.seconds > one.seconds);
  CHECK(b.floor_bytes == one.floor_bytes);
  CHECK(b.cores_used == one.cores_used);
}

TEST_CASE("a space may ask for meshes keeping the layers' inputs split over the model axis", "[plan]") {
  const Study s = study(kTransformer, 64, "v3-8");
  const auto plain = plan_candidates(s, PlanSpace{});
  for (const auto& c : plain) CHECK_FALSE(c.contains("layer_input_split"));  // not unless asked
  PlanSpace both;
  both.layer_input_split = std::vector<bool>{false, true};
  const auto all = plan_candidates(s, both);
  PlanSpace only;
  only.layer_input_split = std::vector<bool>{true};
  const auto split = plan_candidates(s, only);
  std::size_t with = 0;
  for (const auto& c : all) {
    if (!c.contains("layer_input_split")) continue;
    ++with;
    INFO(plan_label(c));
    CHECK(c["layer_input_split"] == "model");
    CHECK(c.value("remat", Json(false)) != false);  // only what re-materialization keeps is split
    // Only a model axis that leaves a layer's input [batch, seq, d_model] whole.
    for (const char* dim : {"seq", "d_model"}) CHECK(c["layout"].value(dim, "") != "model");
    CHECK(plan_label(c).find(" split-inputs") != std::string::npos);
    CHECK(schedule_of_plan_label(plan_label(c)).schedule == c);
    // The study's schedule check accepts it.
    Json j = s.json;
    j["schedule"] = c;
    CHECK_NOTHROW(parse_study(j, "test"));
  }
  CHECK(with > 0);
  CHECK(all.size() == plain.size() + with);
  // Asked for alone: the meshes with split inputs and every other kind, none of their twins.
  std::size_t meshes = 0;
  for (const auto& c : split) meshes += c["kind"] == "mesh" ? 1 : 0;
  CHECK(meshes == with);
  REQUIRE_THROWS_WITH(
      [] {
        const std::string file =
            (std::filesystem::temp_directory_path() / "tpusim_split_space.json").string();
        std::ofstream(file) << R"({"schema": "tpusim.plan_space/1", "layer_input_split": ["yes"]})";
        read_plan_space(file);
      }(),
      Catch::Contains("layer_input_split[0]") && Catch::Contains("true or false"));
}

TEST_CASE("a plan space may search a save policy by name, and its labels read back", "[plan][remat]") {
  const Study s = study(kTransformer, 64, "v3-8");
  const std::string file = (std::filesystem::temp_directory_path() / "tpusim_plan_space_named.json").string();
  std::ofstream(file) << R"({"schema": "tpusim.plan_space/1", "kinds": ["data_parallel", "gpipe", "mesh"],
                             "remat": [true, "save_qkv_proj"]})";
  int named = 0, full = 0;
  for (const auto& c : plan_candidates(s, read_plan_space(file))) {
    INFO(plan_label(c));
    CHECK((c.at("remat") == true || c.at("remat") == "save_qkv_proj"));
    (c.at("remat") == true ? full : named) += 1;
    if (c.at("remat") == "save_qkv_proj") CHECK(plan_label(c).find(" save_qkv_proj") != std::string::npos);
    CHECK(schedule_of_plan_label(plan_label(c)).schedule == c);
  }
  CHECK(named == full);  // every shape once with each policy
  CHECK(named > 10);
  std::ofstream(file) << R"({"schema": "tpusim.plan_space/1", "remat": ["save_everything"]})";
  CHECK_THROWS_WITH(read_plan_space(file),
                    Catch::Contains("remat[0]") && Catch::Contains("\"save_qkv_proj\""));
}

TEST_CASE("a plan space may search host offload where the hardware gives its hosts' memory",
          "[plan][offload]") {
  const std::string file =
      (std::filesystem::temp_directory_path() / "tpusim_plan_space_offload.json").string();
  std::ofstream(file) << R"({"schema": "tpusim.plan_space/1", "kinds": ["data_parallel", "mesh"],
                             "offload": [false, true]})";
  const PlanSpace space = read_plan_space(file);
  Json j = Json::parse(
      R"({"hardware": "tpu-v5e", "slice": "v5e-8", "optimizer": {"kind": "adam"}, "schedule": {"kind": "data_parallel"}})");
  j["model"] = Json::parse(kTransformer);
  j["batch"] = 64;
  const Study v5e = parse_study(j, "test");
  int offloaded = 0, whole = 0;
  for (const auto& c : plan_candidates(v5e, space)) {
    INFO(plan_label(c));
    if (c.contains("offload")) {
      ++offloaded;
      CHECK(c.at("remat") == true);
      CHECK(c.at("offload") == Json::array({"layer_input"}));
      CHECK(plan_label(c).ends_with(" offload"));
    } else if (c.value("remat", Json(false)) == true) {
      ++whole;
    }
    CHECK(schedule_of_plan_label(plan_label(c)).schedule == c);
  }
  CHECK(offloaded == whole);  // each whole-layer candidate once more, offloaded
  CHECK(offloaded > 0);
  // Not searched by default; not at all on hardware without the hosts' memory (TPU-v3).
  for (const auto& c : plan_candidates(v5e, PlanSpace{})) CHECK_FALSE(c.contains("offload"));
  for (const auto& c : plan_candidates(study(kTransformer, 64, "v3-8"), space))
    CHECK_FALSE(c.contains("offload"));
}

TEST_CASE("a plan space may search data parallelism's shard groups (data x fsdp), and the labels read back",
          "[plan]") {
  const Study s = study(kTransformer, 64, "v3-8");
  const std::string file =
      (std::filesystem::temp_directory_path() / "tpusim_plan_space_groups.json").string();
  std::ofstream(file) << R"({"schema": "tpusim.plan_space/1", "kinds": ["data_parallel"],
                             "shard_group": [2, 3, 4, 8, 16]})";
  std::map<std::string, std::set<std::int64_t>> groups;  // weight update -> the groups searched
  for (const auto& c : plan_candidates(s, read_plan_space(file))) {
    INFO(plan_label(c));
    const std::int64_t g = c.value("shard_group", std::int64_t(8));
    groups[c.at("weight_update").get<std::string>()].insert(g);
    CHECK((plan_label(c).find(" group ") != std::string::npos) == c.contains("shard_group"));
    CHECK(schedule_of_plan_label(plan_label(c)).schedule == c);
  }
  // Where they divide the 8 replicas; one group of all of them is no shard_group key.
  CHECK(groups["sharded"] == std::set<std::int64_t>{2, 4, 8});
  CHECK(groups["fully_sharded"] == std::set<std::int64_t>{2, 4, 8});
  CHECK(groups["replicated"] == std::set<std::int64_t>{8});
  // Not searched by default.
  for (const auto& c : plan_candidates(s, PlanSpace{})) CHECK_FALSE(c.contains("shard_group"));
  CHECK_THROWS_WITH(schedule_of_plan_label("data_parallel sharded bf16 group 0 bucket 32 MiB"),
                    Catch::Contains("--plan-label"));
}

TEST_CASE(
    "a collective's floor between chips is the ICI's, every hop's latency paid, whatever the chip's "
    "on-chip link",
    "[plan]") {
  // Megacore v4: a device is a chip, so no flow takes the on-chip link (600 GB/s); an all-reduce
  // of S over two chips is a reduce-scatter step and an all-gather step of S / 2 each, over the
  // ICI at 45 GB/s after the route's hops (1 between neighbours, 2 between y = 0 and y = 2 of
  // v4-64's 2x4x4 chips, which do not wrap).
  Json j = Json::parse(
      R"({"hardware": "tpu-v4", "slice": "v4-64", "megacore": true, "optimizer": {"kind": "adam"},
          "schedule": {"kind": "data_parallel"}, "batch": 64})");
  j["model"] = Json::parse(kTransformer);
  const Study s = parse_study(j, "test");
  const sim::CollectivePlanner planner = collective_planner(s);
  const double S = 64.0 * 1024 * 1024, B = s.hardware.chip.ici_bandwidth_bytes_per_s,
               a = s.hardware.chip.ici_latency_s;
  CHECK(collective_floor(s, planner, sim::CollectiveOp::AllReduce, {0, 1}, S) == Approx(2 * (S / 2 / B + a)));
  CHECK(collective_floor(s, planner, sim::CollectiveOp::AllReduce, {0, 4}, S) ==
        Approx(2 * (S / 2 / B + 2 * a)));
  CHECK(collective_floor(s, planner, sim::CollectiveOp::AllReduce, {0, 1}, S, false) == Approx(S / B));
}
