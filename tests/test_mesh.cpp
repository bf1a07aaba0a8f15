// Mesh-TensorFlow layouts without the engine: shards, induced collectives, memory, validation.
#include <catch2/catch.hpp>
#include <set>

#include "schedules/mesh.hpp"
#include "test_support.hpp"

using namespace tpusim;

namespace {

/// A two-layer feed-forward net (d_io -> d_h -> d_io) and a classifier, as a sequential model.
Json ffn_model(int d_io, int d_h) {
  return Json{{"kind", "sequential"},
              {"layers", Json::array({Json{{"kind", "dense"}, {"in", d_io}, {"out", d_h}},
                                      Json{{"kind", "dense"}, {"in", d_h}, {"out", d_io}},
                                      Json{{"kind", "classifier"}, {"in", d_io}, {"classes", 8}}})}};
}

Study mesh_study(const Json& model, const Json& schedule, const std::string& slice = "v3-32",
                 int batch = 256) {
  Json j{{"hardware", "tpu-v3"},
         {"slice", slice},
         {"model", model},
         {"batch", batch},
         {"optimizer", {{"kind", "adam"}}},
         {"schedule", schedule}};
  return parse_study(j, "test");
}

/// The collectives recorded for `op` of `layer` in the schedule's per-op table.
Json collectives_of(const BuiltStep& step, const std::string& layer, const std::string& op) {
  for (const auto& row : step.details["ops"])
    if (row["layer"] == layer && row["op"] == op) return row["collectives"];
  FAIL("no op " << layer << "/" << op);
  return {};
}

double local_flops(const BuiltStep& step, const std::string& layer, const std::string& op) {
  for (const auto& row : step.details["ops"])
    if (row["layer"] == layer && row["op"] == op) return row["local_forward_flops"].get<double>();
  FAIL("no op " << layer << "/" << op);
  return 0;
}

/// A two-layer Transformer and a batch:8 x model:4 mesh splitting Megatron's dimensions.
/// A small ReLU Transformer (d_model 256, d_ff 1024, 4 heads, sequence 64).
Json small_transformer(int layers, int vocab) {
  Json m = Json::parse(
      R"({"kind": "transformer", "activation": "relu", "d_model": 256, "d_ff": 1024, "heads": 4, "seq_len": 64})");
  m["layers"] = layers;
  m["vocab"] = vocab;
  return m;
}
Json megatron_model() { return small_transformer(2, 1024); }
Json megatron_schedule() {
  return Json::parse(
      R"({"kind": "mesh", "mesh": [["batch", 8], ["model", 4]], "layout": {"batch": "batch", "d_ff": "model", "heads": "model", "vocab": "model"}})");
}

}  // namespace

TEST_CASE("mesh coordinates and sub-groups", "[mesh]") {
  const Study s = mesh_study(
      ffn_model(64, 128),
      Json::parse(R"({"kind": "mesh", "mesh": [["rows", 4], ["cols", 8]], "layout": {"batch": "rows"}})"));
  const auto* m = dynamic_cast<const MeshSchedule*>(s.schedule.get());
  CHECK(m->coords(13) == std::vector<int>{1, 5});
  const auto cols = m->groups({"cols"});
  REQUIRE(cols.size() == 4);
  CHECK(cols[1] == std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15});
  const auto rows = m->groups({"rows"});
  REQUIRE(rows.size() == 8);
  CHECK(rows[3] == std::vector<int>{3, 11, 19, 27});
  CHECK(m->split("batch") == 4);
  CHECK(m->split("d_ff") == 1);
}

TEST_CASE(
    "splitting d_ff k ways divides the feed-forward work and weights by k and adds the output all-reduce",
    "[mesh]") {
  const Json model = Json::parse(
      R"({"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 512, "d_ff": 2048, "heads": 8, "vocab": 1024, "seq_len": 64})");
  const Study one = mesh_study(
      model, Json::parse(R"({"kind": "mesh", "mesh": {"batch": 32}, "layout": {"batch": "batch"}})"));
  for (int k : {2, 4, 8}) {
    Json sched = Json::parse(R"({"kind": "mesh", "layout": {"batch": "batch", "d_ff": "model"}})");
    sched["mesh"] = Json::array({Json::array({"batch", 32 / k}), Json::array({"model", k})});
    const Study split = mesh_study(model, sched);
    const BuiltStep a = one.schedule->build(one), b = split.schedule->build(split);
    INFO("k = " << k);
    // Per core the batch shrinks by 32/k vs 32 too: compare per example.
    const double per_example_a = local_flops(a, "block0", "ffn_in") / (256.0 / 32);
    const double per_example_b = local_flops(b, "block0", "ffn_in") / (256.0 / (32 / k));
    CHECK(per_example_b == Approx(per_example_a / k));
    CHECK(local_flops(b, "block0", "ffn_out") / (256.0 / (32 / k)) ==
          Approx(local_flops(a, "block0", "ffn_out") / 8.0 / k));
    // ffn_out contracts the split d_ff: its output [batch/(32/k), seq, d_model] is all-reduced over model.
    const Json c = collectives_of(b, "block0", "ffn_out");
    REQUIRE(c.size() >= 1);
    CHECK(c[0]["mesh_dims"] == Json::array({"model"}));
    CHECK(c[0]["blocking"] == true);
    CHECK(c[0]["bytes"].get<double>() == Approx(256.0 / (32 / k) * 64 * 512 * 2));
    CHECK(collectives_of(a, "block0", "ffn_out").size() == 1);  // only its weight gradient (over batch)
    // Weights of the feed-forward per core: 1/k.
    const double wa = a.graph.resident()[0][int(sim::MemoryCategory::Weights)];
    const double wb = b.graph.resident()[0][int(sim::MemoryCategory::Weights)];
    const double ffn = 4.0 * 2 * (2.0 * 512 * 2048 + 2048);  // both blocks' W1, W2 and b1
    CHECK(wa - wb == Approx(ffn * (1 - 1.0 / k)));
  }
}

TEST_CASE("batch on rows, hidden on columns: feed-forward traffic per core follows b d_io / r + d_io d_h / c",
          "[mesh]") {
  const int r = 4, c = 8, b = 256, d_io = 512, d_h = 2048;
  Json sched = Json::parse(R"({"kind": "mesh", "layout": {"batch": "rows", "d_ff": "cols"}})");
  sched["mesh"] = Json::array({Json::array({"rows", r}), Json::array({"cols", c})});
  const Study s = mesh_study(ffn_model(d_io, d_h), sched, "v3-32", b);
  const BuiltStep step = s.schedule->build(s);
  // Activations (bf16): the second layer's output [b/r, d_io], all-reduced over the c columns
  // (the first layer reads the model input: no input gradient to reduce).
  double activations = 0, weights = 0;
  for (const char* layer : {"dense0", "dense1"})
    for (const auto& col : collectives_of(step, layer, "matmul")) {
      if (col["mesh_dims"] == Json::array({"cols"})) activations += col["bytes"].get<double>();
      if (col["mesh_dims"] == Json::array({"rows"})) weights += col["bytes"].get<double>();
    }
  CHECK(activations == Approx((double(b) / r) * d_io * 2));
  // Weight gradients (fp32): W1 [d_io, d_h/c] and W2 [d_h/c, d_io], all-reduced over the r rows.
  CHECK(weights == Approx(2.0 * d_io * (double(d_h) / c) * 4));
}

TEST_CASE("illegal layouts are rejected naming the op and dimensions", "[mesh][config]") {
  const Json model = Json::parse(
      R"({"kind": "transformer", "activation": "relu", "layers": 1, "d_model": 256, "d_ff": 1024, "heads": 8, "vocab": 512, "seq_len": 32})");
  CHECK_THROWS_WITH(
      mesh_study(
          model,
          Json::parse(
              R"({"kind": "mesh", "mesh": {"batch": 8, "model": 4}, "layout": {"heads": "model", "d_kv": "model"}})")),
      Catch::Contains("q_projection") && Catch::Contains("heads") && Catch::Contains("d_kv"));
  CHECK_THROWS_WITH(
      mesh_study(
          model,
          Json::parse(R"({"kind": "mesh", "mesh": {"batch": 8, "model": 8}, "layout": {"batch": "batch"}})")),
      Catch::Contains("schedule.mesh") && Catch::Contains("32 cores"));
  CHECK_THROWS_WITH(
      mesh_study(model,
                 Json::parse(R"({"kind": "mesh", "mesh": {"model": 32}, "layout": {"heads": "model"}})")),
      Catch::Contains("schedule.layout.heads") && Catch::Contains("heads (8)"));
  CHECK_THROWS_WITH(
      mesh_study(model,
                 Json::parse(R"({"kind": "mesh", "mesh": {"model": 32}, "layout": {"depth": "model"}})")),
      Catch::Contains("schedule.layout.depth") && Catch::Contains("height, width"));
  CHECK_THROWS_WITH(
      mesh_study(model,
                 Json::parse(R"({"kind": "mesh", "mesh": {"model": 32}, "layout": {"d_ff": "rows"}})")),
      Catch::Contains("schedule.layout.d_ff"));
}

TEST_CASE("a batch-only layout holds what data parallelism holds", "[mesh]") {
  for (
      const char* text :
      {R"({"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64})",
       R"({"kind": "resnet50", "image_size": 64, "classes": 10})",
       R"({"kind": "amoebanet_d", "normal_cells": 3, "filters": 64, "image_size": 64, "classes": 10})",
       R"({"kind": "ssd_resnet34", "image_size": 300, "classes": 11})"}) {
    INFO(text);
    const Json model = Json::parse(text);
    const Study mesh = mesh_study(
        model, Json::parse(R"({"kind": "mesh", "mesh": {"batch": 32}, "layout": {"batch": "batch"}})"));
    const Study dp = mesh_study(model, Json::parse(R"({"kind": "data_parallel"})"));
    const BuiltStep a = mesh.schedule->build(mesh), b = dp.schedule->build(dp);
    REQUIRE_NOTHROW(a.graph.validate());
    for (int k = 0; k < sim::kMemoryCategories; ++k)
      CHECK(a.graph.resident()[7][k] == Approx(b.graph.resident()[7][k]));
    CHECK(a.model_flops == Approx(b.model_flops).epsilon(1e-9));
    // The activations each layer keeps: the same tensors as the cost lowering's stash.
    auto kept = [](const BuiltStep& s) {
      double bytes = 0;
      for (int id = 0; id < s.graph.size(); ++id)
        for (const auto& e : s.graph.task(id).memory)
          if (e.core == 0 && e.category == sim::MemoryCategory::Activations && e.bytes > 0) bytes += e.bytes;
      return bytes;
    };
    CHECK(kept(a) == Approx(kept(b)).epsilon(0.01));
    // And the gradients a backward holds in flight: the same largest op's.
    auto transient = [](const BuiltStep& s) {
      double bytes = 0;
      for (int id = 0; id < s.graph.size(); ++id)
        for (const auto& e : s.graph.task(id).memory)
          if (e.core == 0 && e.category == sim::MemoryCategory::Workspace) bytes = std::max(bytes, e.bytes);
      return bytes;
    };
    CHECK(transient(a) > 0);
    CHECK(transient(a) == Approx(transient(b)).epsilon(0.01));
  }
}

TEST_CASE("a deeper stack reduces every hidden layer's input gradient", "[mesh]") {
  // dense2 (d_model -> d_ff) is not the model's first layer: its input gradient contracts the
  // split d_ff and is summed over the columns; dense0 has the same shape but reads the model
  // input; dense1 (d_ff -> d_model) contracts the unsplit d_model in its input gradient.
  Json sched = Json::parse(
      R"({"kind": "mesh", "mesh": [["rows", 4], ["cols", 8]], "layout": {"batch": "rows", "d_ff": "cols"}})");
  const Study s = mesh_study(
      Json::parse(R"({"kind": "mlp", "layers": 3, "width": 512, "input": 512, "classes": 8})"), sched);
  const BuiltStep step = s.schedule->build(s);
  int input_gradients = 0;
  for (const auto& c : collectives_of(step, "dense2", "matmul"))
    input_gradients += c["what"] == "matmul input gradient";
  CHECK(input_gradients == 1);
  for (const char* layer : {"dense0", "dense1"})
    for (const auto& c : collectives_of(step, layer, "matmul")) CHECK(c["what"] != "matmul input gradient");
}

namespace {
const Json kSpatial = Json::parse(
    R"({"kind": "mesh", "mesh": [["batch", 8], ["spatial", 4]], "layout": {"batch": "batch", "height": "spatial"}})");

Json collective_named(const Json& collectives, const std::string& what) {
  for (const auto& c : collectives)
    if (c["what"] == what) return c;
  FAIL("no collective " << what << " in " << collectives.dump());
  return {};
}
}  // namespace

TEST_CASE("spatial partitioning: convolutions exchange halo rows with their neighbours", "[mesh][spatial]") {
  const Study s = mesh_study(Json::parse(R"({"kind": "resnet50"})"), kSpatial, "v3-32", 256);
  const BuiltStep step = s.schedule->build(s);
  REQUIRE_NOTHROW(step.graph.validate());
  // stage1_block1/conv2: 3x3 on a 56x56x64 image, 32 images per batch replica (256 / 8): one
  // row of 56 x 64 bf16 values per image to each neighbour; a 1x1 conv needs none.
  const Json conv2 = collectives_of(step, "stage1_block1", "conv2");
  const Json halo = collective_named(conv2, "conv2 halo");
  CHECK(halo["mesh_dims"] == Json::array({"spatial"}));
  CHECK(halo["bytes"].get<double>() == Approx(1.0 * 56 * 64 * 32 * 2));
  CHECK(collective_named(conv2, "conv2 halo gradient")["bytes"] == halo["bytes"]);
  for (const auto& c : collectives_of(step, "stage1_block1", "conv1")) CHECK(c.value("halo", false) == false);
  // The stem's 7x7 conv needs three rows from each side.
  CHECK(collective_named(collectives_of(step, "stem", "conv1"), "conv1 halo")["bytes"].get<double>() ==
        Approx(3.0 * 224 * 3 * 32 * 2));
  int transfers = 0;
  for (int id = 0; id < step.graph.size(); ++id) transfers += step.graph.task(id).phase == "halo_exchange";
  CHECK(transfers > 0);
}

TEST_CASE("spatial partitioning: batch-norm statistics are summed over the image, not the batch",
          "[mesh][spatial]") {
  const Study s = mesh_study(Json::parse(R"({"kind": "resnet50"})"), kSpatial, "v3-32", 256);
  const BuiltStep step = s.schedule->build(s);
  const Json bn = collectives_of(step, "stage2_block1", "bn2");
  const Json stats = collective_named(bn, "bn2 statistics");
  CHECK(stats["mesh_dims"] == Json::array({"spatial"}));
  CHECK(stats["bytes"].get<double>() ==
        Approx(2.0 * 4 * 128));  // mean and variance partial sums per channel, fp32
  CHECK(collective_named(bn, "bn2 weight gradient")["mesh_dims"] == Json::array({"batch", "spatial"}));
  // The conv weights' gradients are summed over both the batch and the image.
  CHECK(collective_named(collectives_of(step, "stage2_block1", "conv2"),
                         "conv2 weight gradient")["mesh_dims"] == Json::array({"batch", "spatial"}));
  // The global pool sums its partial averages over the image.
  CHECK(collective_named(collectives_of(step, "head", "global_avg_pool"),
                         "global_avg_pool partial sums")["mesh_dims"] == Json::array({"spatial"}));
}

TEST_CASE("cross-replica batch norm under a mesh: statistics over groups of consecutive batch replicas",
          "[mesh][spatial]") {
  Json schedule = kSpatial;
  schedule["batch_norm_group"] = 2;
  const Study s = mesh_study(Json::parse(R"({"kind": "resnet50"})"), schedule, "v3-32", 256);
  const BuiltStep step = s.schedule->build(s);
  REQUIRE_NOTHROW(step.graph.validate());
  const Json bn = collectives_of(step, "stage2_block1", "bn2");
  for (const char* what : {"bn2 statistics", "bn2 gradient statistics"}) {
    const Json stats = collective_named(bn, what);
    CHECK(stats["mesh_dims"] == Json::array({"batch", "spatial"}));
    CHECK(stats["batch_norm_group"] == 2);
    CHECK(stats["bytes"].get<double>() == Approx(2.0 * 4 * 128));
  }
  // The task runs on 4 groups of 8 cores: 2 consecutive batch replicas x the 4 cores of an image.
  const auto* mesh = dynamic_cast<const MeshSchedule*>(s.schedule.get());
  REQUIRE(mesh != nullptr);
  int found = 0;
  for (int id = 0; id < step.graph.size(); ++id) {
    const auto& t = step.graph.task(id);
    if (t.name != collective_named(bn, "bn2 statistics")["task"].get<std::string>()) continue;
    ++found;
    REQUIRE(t.groups.size() == 4);
    for (const auto& group : t.groups) {
      REQUIRE(group.size() == 8);
      std::set<int> batch_blocks;
      for (int c : group) batch_blocks.insert(mesh->coords(c)[0] / 2);
      CHECK(batch_blocks.size() == 1);
    }
  }
  CHECK(found == 1);
  // The weight gradients are still summed over every replica.
  CHECK(collective_named(bn, "bn2 weight gradient").contains("batch_norm_group") == false);
  // A group spanning every replica needs no blocks; one that does not divide them is bad input.
  schedule["batch_norm_group"] = 8;
  const Study all = mesh_study(Json::parse(R"({"kind": "resnet50"})"), schedule, "v3-32", 256);
  const BuiltStep whole = all.schedule->build(all);
  for (int id = 0; id < whole.graph.size(); ++id)
    if (whole.graph.task(id).name == collective_named(bn, "bn2 statistics")["task"].get<std::string>())
      CHECK(whole.graph.task(id).groups.size() == 1);
  schedule["batch_norm_group"] = 3;
  CHECK_THROWS_WITH(mesh_study(Json::parse(R"({"kind": "resnet50"})"), schedule, "v3-32", 256),
                    Catch::Contains("schedule.batch_norm_group"));
}

TEST_CASE("spatial partitioning pads an image that does not divide", "[mesh][spatial]") {
  // The 7x7 stage on 4 cores: 2 rows each (8 with padding), so each core does 2/7 of the work.
  const Study whole = mesh_study(
      Json::parse(R"({"kind": "resnet50"})"),
      Json::parse(R"({"kind": "mesh", "mesh": {"batch": 32}, "layout": {"batch": "batch"}})"), "v3-32", 256);
  const Study split = mesh_study(Json::parse(R"({"kind": "resnet50"})"), kSpatial, "v3-32", 256);
  const BuiltStep a = whole.schedule->build(whole), b = split.schedule->build(split);
  // Per image: the batch replica holds 8 images vs 32.
  const double per_image_whole = local_flops(a, "stage4_block2", "conv1") / 8;
  const double per_image_split = local_flops(b, "stage4_block2", "conv1") / 32;
  CHECK(per_image_split == Approx(per_image_whole * 2.0 / 7.0));
}

TEST_CASE("weight-update sharding under a mesh: reduce-scatter, update a piece, all-gather",
          "[mesh][sharding]") {
  const Json model = megatron_model();
  Json sched = megatron_schedule();
  // With overlap, and a bucket of one byte: each weight's reduction on its own, as the backward goes.
  sched["gradient_bucket_bytes"] = 1;
  Study replicated = mesh_study(model, sched);
  sched["weight_update"] = "sharded";
  Study sharded = mesh_study(model, sched);
  replicated.hardware.core.gradient_collectives_overlap_backward = true;
  sharded.hardware.core.gradient_collectives_overlap_backward = true;
  const BuiltStep a = replicated.schedule->build(replicated), b = sharded.schedule->build(sharded);
  REQUIRE_NOTHROW(b.graph.validate());  // gradients freed in two parts still net to zero
  // Every weight-gradient all-reduce becomes a reduce-scatter and an all-gather of the same
  // buffer over the same groups.
  using Key = std::pair<double, std::vector<std::vector<int>>>;
  std::multiset<Key> all_reduce, scatter, gather;
  for (int id = 0; id < a.graph.size(); ++id)
    if (a.graph.task(id).phase == "gradient_allreduce")
      all_reduce.insert({a.graph.task(id).bytes, a.graph.task(id).groups});
  for (int id = 0; id < b.graph.size(); ++id) {
    const auto& t = b.graph.task(id);
    CHECK(t.phase != "gradient_allreduce");
    if (t.phase == "gradient_reduce_scatter") {
      CHECK(t.op == sim::CollectiveOp::ReduceScatter);
      scatter.insert({t.bytes, t.groups});
    }
    if (t.phase == "weight_allgather") {
      CHECK(t.op == sim::CollectiveOp::AllGather);
      gather.insert({t.bytes, t.groups});
    }
  }
  CHECK(all_reduce.size() > 10);
  CHECK(scatter == all_reduce);
  CHECK(gather == all_reduce);
  // Every weight's gradient is reduced over the batch mesh dimension (8 cores): each core keeps
  // a piece of 1/8 of its slots (biases of a few elements pad up) and the same weights.
  const auto& ra = a.graph.resident()[5];
  const auto& rb = b.graph.resident()[5];
  CHECK(rb[int(sim::MemoryCategory::Weights)] == ra[int(sim::MemoryCategory::Weights)]);
  CHECK(rb[int(sim::MemoryCategory::Optimizer)] ==
        Approx(ra[int(sim::MemoryCategory::Optimizer)] / 8).epsilon(0.01));
  CHECK(rb[int(sim::MemoryCategory::Optimizer)] >= ra[int(sim::MemoryCategory::Optimizer)] / 8);
  // Updates touch 1/8 of the elements.
  auto update_seconds = [](const BuiltStep& s) {
    double sum = 0;
    for (int id = 0; id < s.graph.size(); ++id)
      if (s.graph.task(id).phase == "update" && s.graph.task(id).core == 0) sum += s.graph.task(id).seconds;
    return sum;
  };
  CHECK(update_seconds(b) < 0.25 * update_seconds(a));
  // The per-op table names both collectives.
  int weight_gradients = 0;
  for (const auto& c : collectives_of(b, "block0", "ffn_in")) {
    if (c["what"] != "ffn_in weight gradient") {
      CHECK(c["task"].get<std::string>().rfind("all-reduce ", 0) == 0);  // activations are still all-reduced
      continue;
    }
    ++weight_gradients;
    CHECK(c["task"].get<std::string>().rfind("reduce-scatter ", 0) == 0);
    CHECK(c["allgather_task"].get<std::string>().rfind("all-gather ", 0) == 0);
  }
  CHECK(weight_gradients == 1);
}

TEST_CASE("explicit placement maps mesh dimensions onto torus axes", "[mesh][placement]") {
  // v3-32: 2 cores per chip, 4 x 4 chips; core = core of chip + 2 (x + 4 y).
  const Json model = ffn_model(64, 128);
  Json sched =
      Json::parse(R"({"kind": "mesh", "mesh": [["batch", 8], ["model", 4]], "layout": {"batch": "batch"},
                               "placement": {"batch": ["core", "x"], "model": ["y"]}})");
  const Study s = mesh_study(model, sched);
  const auto* m = dynamic_cast<const MeshSchedule*>(s.schedule.get());
  CHECK(m->coords(1) == std::vector<int>{1, 0});
  CHECK(m->coords(2) == std::vector<int>{2, 0});  // the next chip along x
  CHECK(m->coords(8) == std::vector<int>{0, 1});  // the next chip along y
  CHECK(m->coords(31) == std::vector<int>{7, 3});
  std::set<std::vector<int>> seen;
  for (int c = 0; c < 32; ++c) {
    CHECK(m->core_at(m->coords(c)) == c);
    seen.insert(m->coords(c));
  }
  CHECK(seen.size() == 32);
  CHECK(m->groups({"model"}).front() == std::vector<int>{0, 8, 16, 24});  // a column of chips
  CHECK(m->resolved()["placement"] ==
        Json::parse(R"({"batch": [["core", 2], ["x", 4]], "model": [["y", 4]]})"));
  const BuiltStep step = s.schedule->build(s);
  CHECK(step.details["placement"][1]["spans"] == Json::array({"y"}));

  // Parts of an axis go fastest first to the mesh dimensions in mesh order: batch takes the
  // fast half of x, so model's groups hold chips two apart.
  sched["placement"] = Json::parse(R"({"batch": [["x", 2], "y"], "model": ["core", ["x", 2]]})");
  const Study strided = mesh_study(model, sched);
  const auto* ms = dynamic_cast<const MeshSchedule*>(strided.schedule.get());
  CHECK(ms->groups({"model"}).front() == std::vector<int>{0, 1, 4, 5});
  sched["mesh"] = Json::parse(R"([["model", 4], ["batch", 8]])");
  const Study contiguous = mesh_study(model, sched);
  CHECK(dynamic_cast<const MeshSchedule*>(contiguous.schedule.get())->groups({"model"}).front() ==
        std::vector<int>{0, 1, 2, 3});
  // The schedule's details show the distance: model rings cross a chip in the strided placement.
  auto model_hops = [](const Study& st) {
    const BuiltStep built = st.schedule->build(st);
    for (const auto& m : built.details["placement"])
      if (m["mesh_dim"] == "model")
        return std::pair{m["max_ring_hops"].get<int>(), m["group_chips"].get<int>()};
    return std::pair{-1, -1};
  };
  CHECK(model_hops(strided) == std::pair{2, 2});
  CHECK(model_hops(contiguous) == std::pair{1, 2});
}

TEST_CASE("LARS under a mesh all-reduces each layer's norms over the mesh dimensions splitting its weights",
          "[mesh][lars]") {
  Json j{{"hardware", "tpu-v3"},
         {"slice", "v3-32"},
         {"model", ffn_model(64, 128)},
         {"batch", 256},
         {"optimizer", {{"kind", "lars"}}}};
  j["schedule"] = Json::parse(
      R"({"kind": "mesh", "mesh": [["batch", 8], ["model", 4]], "layout": {"batch": "batch", "d_ff": "model"}})");
  const Study replicated = parse_study(j, "test");
  j["schedule"]["weight_update"] = "sharded";
  const Study sharded = parse_study(j, "test");
  auto norms = [](const Study& s) {
    const BuiltStep step = s.schedule->build(s);
    std::map<int, std::vector<std::vector<int>>> by_layer;
    for (int id = 0; id < step.graph.size(); ++id) {
      const auto& t = step.graph.task(id);
      if (t.phase != "lars_norms") continue;
      CHECK(t.bytes == 8.0);
      by_layer[t.layer] = t.groups;
      // Every update of the layer waits for its norms.
      for (int u : step.graph.successors(id)) CHECK(step.graph.task(u).phase == "update");
      CHECK(step.graph.successors(id).size() == 32);
    }
    return by_layer;
  };
  // dense0 [d_model, d_ff] and dense1 [d_ff, d_model] are split over model; the classifier is not.
  const auto r = norms(replicated);
  REQUIRE(r.size() == 2);
  CHECK(r.at(0).size() == 8);  // one group of 4 model cores per batch position
  CHECK(r.at(0).front().size() == 4);
  // With sharded updates every layer's pieces are spread over batch too (and model where split).
  const auto s = norms(sharded);
  REQUIRE(s.size() == 3);
  CHECK(s.at(0).size() == 1);          // batch + model: all 32 cores
  CHECK(s.at(2).front().size() == 8);  // the classifier: over batch
}

TEST_CASE("a split sequence all-gathers the keys and values attention reads whole", "[mesh]") {
  const Json model = Json::parse(
      R"({"kind": "transformer", "activation": "relu", "layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "d_kv": 64, "vocab": 1024, "seq_len": 64})");
  const Study s = mesh_study(
      model,
      Json::parse(
          R"({"kind": "mesh", "mesh": [["batch", 8], ["seq", 4]], "layout": {"batch": "batch", "seq": "seq"}})"));
  const BuiltStep step = s.schedule->build(s);
  REQUIRE_NOTHROW(step.graph.validate());
  // Keys [batch 256/8, seq_k 64 whole, heads 4, d_kv 64] in bf16 per core after the gather, as
  // stored: d_kv fills 128 lanes (the batch of 32 would pad more).
  const double keys = 32.0 * 64 * 4 * 128 * 2;
  for (const char* op : {"self_scores", "self_context"}) {
    INFO(op);
    int gathers = 0, scatters = 0;
    for (const auto& c : collectives_of(step, "block0", op)) {
      const std::string task = c["task"];
      CHECK(c["mesh_dims"] == Json::array({"seq"}));
      if (task.rfind("all-gather ", 0) == 0) {
        ++gathers;
        CHECK(c["bytes"].get<double>() == Approx(keys));
      } else if (task.rfind("reduce-scatter ", 0) == 0) {
        ++scatters;
        CHECK(c["bytes"].get<double>() == Approx(keys));
      } else {
        FAIL("unexpected " << task);  // the keys' gradient is not all-reduced
      }
    }
    CHECK(gathers == 1);
    CHECK(scatters == 1);
  }
  int gather_tasks = 0;
  for (int id = 0; id < step.graph.size(); ++id)
    if (step.graph.task(id).phase == "activation_allgather") {
      CHECK(step.graph.task(id).op == sim::CollectiveOp::AllGather);
      ++gather_tasks;
    }
  CHECK(gather_tasks == 2);
}

TEST_CASE("Adafactor under a mesh all-reduces the factored statistics of split matrices",
          "[mesh][adafactor]") {
  Json j{{"hardware", "tpu-v3"},
         {"slice", "v3-32"},
         {"model", ffn_model(64, 128)},
         {"batch", 256},
         {"optimizer", {{"kind", "adafactor"}}}};
  j["schedule"] = Json::parse(
      R"({"kind": "mesh", "mesh": [["batch", 8], ["model", 4]], "layout": {"batch": "batch", "d_ff": "model"}})");
  const Study s = parse_study(j, "test");
  const BuiltStep step = s.schedule->build(s);
  REQUIRE_NOTHROW(step.graph.validate());
  std::map<int, double> bytes;
  for (int id = 0; id < step.graph.size(); ++id) {
    const auto& t = step.graph.task(id);
    if (t.phase != "adafactor_statistics") continue;
    CHECK(t.groups.size() == 8);  // over model: 4 cores per group
    CHECK(t.groups.front().size() == 4);
    bytes[t.layer] += t.bytes;
  }
  // dense0 [d_model 64, d_ff 128/4]: the mean over the split d_ff, one fp32 per d_model row;
  // dense1 [d_ff 128/4, d_model 64]: the mean over d_ff, one per d_model column. The
  // classifier's matrix is not split; biases are not factored.
  CHECK(bytes == std::map<int, double>{{0, 4.0 * 64}, {1, 4.0 * 64}});
}

TEST_CASE("the q k v projections' partial input gradients are added before one all-reduce", "[mesh]") {
  // Mesh-TensorFlow's lazy all-reduce: with heads split, each projection's input gradient is a
  // partial sum over heads; the three add up locally and the layer norm output's gradient is
  // all-reduced once.
  const Json model = small_transformer(1, 1024);
  const Study s = mesh_study(
      model,
      Json::parse(
          R"({"kind": "mesh", "mesh": [["batch", 8], ["model", 4]], "layout": {"batch": "batch", "heads": "model"}})"));
  const BuiltStep step = s.schedule->build(s);
  auto input_gradients = [&](const char* op) {
    std::vector<Json> found;
    for (const auto& c : collectives_of(step, "block0", op))
      if (c["what"].get<std::string>().find("input gradient") != std::string::npos) found.push_back(c);
    return found;
  };
  CHECK(input_gradients("self_k_projection").empty());
  CHECK(input_gradients("self_v_projection").empty());
  const auto q = input_gradients("self_q_projection");
  REQUIRE(q.size() == 1);
  CHECK(q[0]["what"] == "self_h input gradient (self_q_projection, self_k_projection, self_v_projection)");
  CHECK(q[0]["mesh_dims"] == Json::array({"model"}));
  CHECK(q[0]["bytes"].get<double>() == Approx(32.0 * 64 * 256 * 2));  // [batch 256/8, seq, d_model] in bf16
}

TEST_CASE("a batch-only layout computes forward and backward as long as data parallelism", "[mesh]") {
  // Both lowerings price normalizations and softmaxes with the core's multi-pass kernels: the
  // same model on the same per-core batch takes the same compute time per phase. (A transformer
  // this size still differs by its op count: the named ops project q, k and v separately, each
  // paying the per-op overhead, where the cost lowering fuses them.)
  for (
      const char* text :
      {R"({"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 1024, "d_ff": 4096, "heads": 8, "vocab": 8192, "seq_len": 256})",
       R"({"kind": "resnet50", "image_size": 64, "classes": 10})"}) {
    INFO(text);
    const Json model = Json::parse(text);
    const Study mesh = mesh_study(
        model, Json::parse(R"({"kind": "mesh", "mesh": {"batch": 32}, "layout": {"batch": "batch"}})"));
    const Study dp = mesh_study(model, Json::parse(R"({"kind": "data_parallel"})"));
    const BuiltStep a = mesh.schedule->build(mesh), b = dp.schedule->build(dp);
    auto busy = [](const BuiltStep& s, const std::string& phase) {
      double t = 0;
      for (int id = 0; id < s.graph.size(); ++id)
        if (s.graph.task(id).kind == sim::TaskKind::Compute && s.graph.task(id).phase == phase &&
            s.graph.task(id).core == 0)
          t += s.graph.task(id).seconds;
      return t;
    };
    CHECK(busy(a, "forward") == Approx(busy(b, "forward")).epsilon(0.02));
    CHECK(busy(a, "backward") == Approx(busy(b, "backward")).epsilon(0.02));
  }
}

TEST_CASE(
    "a mesh's weight-gradient reductions are combined up to gradient_bucket_bytes, behind the backward "
    "with overlap, after it without",
    "[mesh]") {
  const Json model = small_transformer(2, 1000);
  Json sched = Json::parse(R"({"kind": "mesh", "mesh": {"batch": 8, "model": 4},
                              "layout": {"batch": "batch", "d_ff": "model", "heads": "model"},
                              "gradient_bucket_bytes": 300000})");
  int combined = -1;
  for (bool overlap : {true, false}) {
    INFO("overlap " << overlap);
    Study s = mesh_study(model, sched);
    CHECK(s.schedule->resolved()["gradient_bucket_bytes"] == 300000.0);
    s.hardware.core.gradient_collectives_overlap_backward = overlap;
    const BuiltStep step = s.schedule->build(s);
    REQUIRE_NOTHROW(step.graph.validate());
    int gradient = 0, after = 0;  // weight-gradient reductions, and those waiting for the whole backward
    double largest = 0;
    for (int id = 0; id < step.graph.size(); ++id) {
      const auto& t = step.graph.task(id);
      if (t.kind != sim::TaskKind::Collective || t.phase.str().rfind("gradient_", 0) != 0) continue;
      ++gradient;
      after += test::waits_for_whole_backward(step.graph, id) ? 1 : 0;
      largest = std::max(largest, t.bytes);
    }
    REQUIRE(gradient > 2);
    CHECK(largest <= 1.2e6);  // up to the bucket, or one weight's gradient bigger than it (the table)
    if (combined >= 0) CHECK(gradient == combined);  // the same chunks either way
    combined = gradient;
    if (overlap)
      CHECK(after < gradient);  // each chunk as soon as its gradients exist
    else
      CHECK(after == gradient);
  }
  // One bucket for everything: one reduction per set of mesh dimensions.
  sched["gradient_bucket_bytes"] = 1e12;
  const Study one = mesh_study(model, sched);
  int reductions = 0;
  const BuiltStep step = one.schedule->build(one);
  for (int id = 0; id < step.graph.size(); ++id)
    reductions += step.graph.task(id).phase == "gradient_allreduce" ? 1 : 0;
  CHECK(reductions < combined);
  // Fully sharded gradients are reduce-scattered per layer: no bucket size.
  sched["weight_update"] = "fully_sharded";
  CHECK_THROWS_WITH(mesh_study(model, sched), Catch::Contains("schedule.gradient_bucket_bytes"));
}

TEST_CASE("without overlap, sharded updates all-gather together what one combined reduce-scatter scattered",
          "[mesh][sharding]") {
  const Json model = small_transformer(2, 1000);
  Study s = mesh_study(model, Json::parse(R"({"kind": "mesh", "mesh": {"batch": 8, "model": 4},
                                              "layout": {"batch": "batch", "d_ff": "model", "heads": "model"},
                                              "weight_update": "sharded"})"));
  s.hardware.core.gradient_collectives_overlap_backward = false;
  const BuiltStep step = s.schedule->build(s);
  REQUIRE_NOTHROW(step.graph.validate());
  using Key = std::pair<double, std::vector<std::vector<int>>>;
  std::multiset<Key> scatter, gather;
  for (int id = 0; id < step.graph.size(); ++id) {
    const auto& t = step.graph.task(id);
    if (t.phase == "gradient_reduce_scatter") scatter.insert({t.bytes, t.groups});
    if (t.phase != "weight_allgather") continue;
    gather.insert({t.bytes, t.groups});
    // After the updates of the layers it gathers, every core's.
    int updates = 0;
    for (int p : step.graph.predecessors(id)) updates += step.graph.task(p).phase == "update" ? 1 : 0;
    CHECK(updates >= s.cores());
  }
  REQUIRE(!scatter.empty());
  CHECK(gather == scatter);
}

TEST_CASE("unsharded, the mesh lowering keeps and holds what a layer's work does (one set of memory rules)",
          "[mesh]") {
  const CostModel cost(load_hardware("tpu-v3").core);
  for (const char* model :
       {R"({"kind": "transformer", "layers": 2, "d_model": 64, "d_ff": 128, "heads": 4,
                                "vocab": 100, "seq_len": 32, "activation": "gelu", "dropout": 0.1})",
        R"({"kind": "resnet50", "image_size": 64, "classes": 10})",
        R"({"kind": "amoebanet_d", "normal_cells": 6, "filters": 32, "image_size": 64})"}) {
    const Study s = mesh_study(Json::parse(model), Json::parse(R"({"kind": "mesh", "mesh": [["batch", 32]],
                                                                  "layout": {"batch": "batch"}})"));
    for (std::size_t l = 0; l < s.model.layers.size(); ++l) {
      const Layer& layer = s.model.layers[l];
      const LayerWork work = layer.work(8);
      const auto p =
          mesh::lower_layer(layer.named_ops(8), Sharding::whole(layer.lanes, layer.weight_bytes), cost,
                            s.model.activation_bytes, layer.name, l == 0, false, 1, save_dots_policy());
      INFO(model << " layer " << layer.name);
      CHECK(p.kept_bytes == Approx(work.stash_bytes));
      CHECK(p.workspace_bytes == Approx(work.workspace_bytes));
      CHECK(p.backward_workspace_bytes == Approx(work.backward_workspace_bytes));
    }
  }
}

TEST_CASE("re-materialization under a mesh: each layer keeps its input and replays its forward",
          "[mesh][remat]") {
  const Json model = megatron_model();
  Json schedule = megatron_schedule();
  const Study plain_study = mesh_study(model, schedule);
  const auto programs = dynamic_cast<const MeshSchedule&>(*plain_study.schedule).programs(plain_study);
  schedule["remat"] = true;
  const Study full_study = mesh_study(model, schedule);
  schedule["remat"] = "save_dots";
  const Study dots_study = mesh_study(model, schedule);
  CHECK(full_study.schedule->resolved()["remat"] == true);
  const BuiltStep plain = plain_study.schedule->build(plain_study);
  const BuiltStep full = full_study.schedule->build(full_study);
  const BuiltStep dots = dots_study.schedule->build(dots_study);
  REQUIRE_NOTHROW(full.graph.validate());
  REQUIRE_NOTHROW(dots.graph.validate());
  // Core 0's activations allocated by the forward, and what its recompute allocates and runs.
  auto sum = [](const BuiltStep& s, const std::string& phase, bool memory) {
    double total = 0;
    for (int id = 0; id < s.graph.size(); ++id) {
      const auto& t = s.graph.task(id);
      if (t.phase != phase || (t.kind == sim::TaskKind::Compute && t.core != 0)) continue;
      if (!memory && t.kind == sim::TaskKind::Compute) total += t.hardware_flops;
      for (const auto& m : t.memory)
        if (memory && m.core == 0 && m.category == sim::MemoryCategory::Activations) total += m.bytes;
    }
    return total;
  };
  double inputs = 0, kept = 0, dot_outputs = 0, forward_flops = 0, activation_allreduces = 0;
  for (const auto& p : programs) {
    inputs += p.input_bytes;
    kept += p.kept_bytes;
    dot_outputs += p.saved_output_bytes;
    for (const auto& ev : p.forward) {
      if (ev.kind == mesh::Event::Compute) forward_flops += ev.hardware_flops;
      if (ev.kind == mesh::Event::BlockingAllReduce) ++activation_allreduces;
    }
  }
  CHECK(sum(plain, "forward", true) == Approx(kept));
  CHECK(sum(full, "forward", true) == Approx(inputs));
  CHECK(sum(full, "recompute", true) == Approx(kept));
  CHECK(sum(full, "recompute", false) == Approx(forward_flops));
  CHECK(full.hardware_flops == Approx(plain.hardware_flops + forward_flops * plain_study.cores()));
  CHECK(full.model_flops == Approx(plain.model_flops));
  // The forward's activation all-reduces (the split contractions' partial sums) run again.
  int replayed = 0;
  for (int id = 0; id < full.graph.size(); ++id)
    replayed += full.graph.task(id).phase == "recompute_collective";
  CHECK(replayed == int(activation_allreduces));
  // save_dots: the projections' outputs kept, so their partial sums are not reduced again.
  CHECK(sum(dots, "forward", true) == Approx(inputs + dot_outputs));
  CHECK(inputs < inputs + dot_outputs);
  CHECK(inputs + dot_outputs < kept);
  CHECK(sum(dots, "recompute", false) < sum(full, "recompute", false));
  int dots_replayed = 0;
  for (int id = 0; id < dots.graph.size(); ++id)
    dots_replayed += dots.graph.task(id).phase == "recompute_collective";
  CHECK(dots_replayed < replayed);
}

TEST_CASE("layer_input_split: each core keeps its piece of a layer's input, gathered before the recompute",
          "[mesh][remat]") {
  const Json model = megatron_model();
  Json schedule = megatron_schedule();
  schedule["remat"] = true;
  const Study whole_study = mesh_study(model, schedule);
  schedule["layer_input_split"] = "model";
  const Study split_study = mesh_study(model, schedule);
  const auto& mesh = dynamic_cast<const MeshSchedule&>(*split_study.schedule);
  CHECK(mesh.input_split_cores() == 4);
  CHECK(split_study.schedule->resolved()["layer_input_split"] == "model");
  CHECK_FALSE(whole_study.schedule->resolved().contains("layer_input_split"));
  const auto programs = mesh.programs(split_study);
  const BuiltStep whole = whole_study.schedule->build(whole_study);
  const BuiltStep split = split_study.schedule->build(split_study);
  REQUIRE_NOTHROW(split.graph.validate());
  double inputs = 0;
  for (const auto& p : programs) inputs += p.input_bytes;
  // What core 0's forward keeps: a quarter of each layer's input instead of all of it.
  auto kept = [](const BuiltStep& s) {
    double total = 0;
    for (int id = 0; id < s.graph.size(); ++id)
      for (const auto& m : s.graph.task(id).memory)
        if (s.graph.task(id).phase == "forward" && m.core == 0 &&
            m.category == sim::MemoryCategory::Activations)
          total += m.bytes;
    return total;
  };
  CHECK(kept(whole) == Approx(inputs));
  CHECK(kept(split) == Approx(inputs / 4));
  // One all-gather per layer over "model", of the layer's whole input, before its recompute.
  std::vector<int> gathers;
  for (int id = 0; id < split.graph.size(); ++id) {
    const auto& t = split.graph.task(id);
    if (t.phase != "layer_input_allgather") continue;
    gathers.push_back(id);
    CHECK(t.op == sim::CollectiveOp::AllGather);
    CHECK(t.bytes == Approx(programs[std::size_t(t.layer)].input_bytes));
    REQUIRE(t.groups.size() == 8);  // the batch's 8 groups of 4 model cores
    CHECK(t.groups.front().size() == 4);
    bool before_recompute = false;
    for (int u : split.graph.successors(id))
      before_recompute = before_recompute || split.graph.task(u).phase == "recompute";
    CHECK(before_recompute);
  }
  CHECK(gathers.size() == programs.size());
  // Otherwise the same step: compute and the other collectives unchanged.
  CHECK(split.hardware_flops == Approx(whole.hardware_flops));
  CHECK(split.graph.size() == whole.graph.size() + int(programs.size()));
  // The bound prices the gathers; the memory floor keeps the pieces.
  CHECK(split_study.schedule->bound(split_study).seconds > whole_study.schedule->bound(whole_study).seconds);
  CHECK(split_study.schedule->bound(split_study).floor_bytes ==
        Approx(whole_study.schedule->bound(whole_study).floor_bytes - inputs * 3 / 4));
}

TEST_CASE("layer_input_split names a mesh dimension that does not split the input, with re-materialization",
          "[mesh][remat][config]") {
  const Json model = megatron_model();
  auto with = [&](const Json& split, const Json& remat) {
    Json schedule = megatron_schedule();
    schedule["remat"] = remat;
    schedule["layer_input_split"] = split;
    return schedule;
  };
  CHECK_THROWS_WITH(
      mesh_study(model, with("batch", true)),
      Catch::Contains("schedule.layer_input_split") && Catch::Contains("split along batch over \"batch\""));
  CHECK_THROWS_WITH(mesh_study(model, with("rows", true)), Catch::Contains("one of \"batch\", \"model\""));
  CHECK_THROWS_WITH(mesh_study(model, with(4, true)), Catch::Contains("the name of a mesh dimension"));
  CHECK_THROWS_WITH(mesh_study(model, with("model", false)), Catch::Contains("without re-materialization"));
  CHECK_NOTHROW(mesh_study(model, with("model", "save_dots")));
}

TEST_CASE("fully sharded under a mesh: pieces resident, each layer gathered before forward and backward",
          "[mesh][sharding]") {
  const Json model = megatron_model();
  Json sched = megatron_schedule();
  const Study replicated = mesh_study(model, sched);
  sched["weight_update"] = "fully_sharded";
  const Study fully = mesh_study(model, sched);
  CHECK(fully.schedule->resolved()["weight_update"] == "fully_sharded");
  REQUIRE_FALSE(fully.hardware.core.gradient_collectives_overlap_backward);
  const BuiltStep a = replicated.schedule->build(replicated), b = fully.schedule->build(fully);
  REQUIRE_NOTHROW(b.graph.validate());  // what each gather adds, the layer's last piece frees
  double reduced = 0, scattered = 0, gathered = 0;
  std::set<int> gathered_layers;
  for (int id = 0; id < a.graph.size(); ++id)
    if (a.graph.task(id).phase == "gradient_allreduce") reduced += a.graph.task(id).bytes;
  for (int id = 0; id < b.graph.size(); ++id) {
    const auto& t = b.graph.task(id);
    CHECK(t.phase != "gradient_allreduce");
    if (t.phase == "gradient_reduce_scatter") {
      scattered += t.bytes;
      CHECK(t.layer >= 0);  // each layer's as its backward ends, whatever the overlap setting
    }
    if (t.phase == "weight_allgather") {
      CHECK(t.op == sim::CollectiveOp::AllGather);
      gathered += t.bytes;
      gathered_layers.insert(t.layer);
    }
  }
  // Reduce-scattered: the gradients; all-gathered: the weights twice (forward and backward).
  CHECK(scattered == Approx(reduced));
  CHECK(gathered == Approx(2 * reduced));
  CHECK(int(gathered_layers.size()) == int(fully.model.layers.size()));
  // Resident: 1/8 of the weights and of the optimizer slots (pieces of a few elements pad up).
  const auto& ra = a.graph.resident()[5];
  const auto& rb = b.graph.resident()[5];
  for (auto k : {sim::MemoryCategory::Weights, sim::MemoryCategory::Optimizer}) {
    CHECK(rb[int(k)] == Approx(ra[int(k)] / 8).epsilon(0.01));
    CHECK(rb[int(k)] >= ra[int(k)] / 8);
  }
  // A gather adds the rest of the layer's shards on every core.
  double added = 0;
  for (int id = 0; id < b.graph.size(); ++id)
    for (const auto& m : b.graph.task(id).memory)
      if (m.core == 5 && m.category == sim::MemoryCategory::Weights && m.bytes > 0) added += m.bytes;
  CHECK(added == Approx(2 * (ra[int(sim::MemoryCategory::Weights)] - rb[int(sim::MemoryCategory::Weights)])));
}

namespace {

/// Sums over a step's tasks: the bytes of the collectives of `phase`, and the memory effects of
/// `category` on core 5 (those adding to it when `added`, else all).
double phase_bytes(const BuiltStep& step, const std::string& phase) {
  double bytes = 0;
  for (int id = 0; id < step.graph.size(); ++id)
    if (step.graph.task(id).phase == phase) bytes += step.graph.task(id).bytes;
  return bytes;
}
double memory_effects(const BuiltStep& step, sim::MemoryCategory category, bool added) {
  double bytes = 0;
  for (int id = 0; id < step.graph.size(); ++id)
    for (const auto& m : step.graph.task(id).memory)
      if (m.core == 5 && m.category == category && (!added || m.bytes > 0)) bytes += m.bytes;
  return bytes;
}

}  // namespace

TEST_CASE(
    "a mesh's bf16 gradients and gathers halve the bytes on the wire; a bf16 gathered copy is held whole",
    "[mesh][sharding]") {
  Json sched = megatron_schedule();
  const Study replicated = mesh_study(megatron_model(), sched);
  sched["weight_update"] = "fully_sharded";
  const Study fp32 = mesh_study(megatron_model(), sched);
  sched["gradient_dtype"] = "bf16";
  sched["gathered_weight_dtype"] = "bf16";
  const Study bf16 = mesh_study(megatron_model(), sched);
  CHECK(bf16.schedule->resolved()["gradient_dtype"] == "bf16");
  CHECK(bf16.schedule->resolved()["gathered_weight_dtype"] == "bf16");
  const BuiltStep r = replicated.schedule->build(replicated), a = fp32.schedule->build(fp32),
                  b = bf16.schedule->build(bf16);
  REQUIRE_NOTHROW(b.graph.validate());
  for (const char* phase : {"gradient_reduce_scatter", "weight_allgather"}) {
    INFO(phase);
    REQUIRE(phase_bytes(a, phase) > 0);
    CHECK(phase_bytes(b, phase) == Approx(phase_bytes(a, phase) / 2));
  }
  // The gradients are kept in fp32 whatever the wire carries.
  CHECK(memory_effects(b, sim::MemoryCategory::Gradients, true) ==
        Approx(memory_effects(a, sim::MemoryCategory::Gradients, true)));
  // Each pass gathers the layer's whole shards as a bf16 copy: half the fp32 weights, twice.
  const double whole = r.graph.resident()[5][int(sim::MemoryCategory::Weights)];
  CHECK(memory_effects(b, sim::MemoryCategory::Weights, true) == Approx(whole));
  CHECK(memory_effects(b, sim::MemoryCategory::Weights, false) == Approx(0).margin(1e-6 * whole));
  // Only fully sharded weights are gathered.
  Json replicated_bf16 = megatron_schedule();
  replicated_bf16["gathered_weight_dtype"] = "bf16";
  CHECK_THROWS_WITH(mesh_study(megatron_model(), replicated_bf16),
                    Catch::Contains("schedule.gathered_weight_dtype") && Catch::Contains("fully_sharded"));
}

TEST_CASE(
    "prefetched weight gathers run one after another ahead of the compute, a layer's reduce-scatter behind "
    "it",
    "[mesh][sharding]") {
  const Json model = small_transformer(4, 1024);
  Json sched = megatron_schedule();
  sched["weight_update"] = "fully_sharded";
  const Study in_order = mesh_study(model, sched);
  CHECK(in_order.schedule->resolved()["weight_gathers"] == "in_program_order");  // v3: no overlap
  sched["weight_gathers"] = "prefetched";
  const Study prefetched = mesh_study(model, sched);
  for (const Study* s : {&in_order, &prefetched}) {
    const bool ahead = s == &prefetched;
    INFO("prefetched " << ahead);
    const BuiltStep step = s->schedule->build(*s);
    REQUIRE_NOTHROW(step.graph.validate());
    int gathers = 0, chained = 0, scatters = 0, waited = 0;
    std::set<int> scattered_layers;
    for (int id = 0; id < step.graph.size(); ++id) {
      const auto& t = step.graph.task(id);
      if (t.phase == "weight_allgather") {
        ++gathers;
        for (int p : step.graph.predecessors(id))
          chained += step.graph.task(p).phase == "weight_allgather" ? 1 : 0;
      }
      if (t.phase != "gradient_reduce_scatter") continue;
      ++scatters;
      scattered_layers.insert(t.layer);
      // The backward waits for it at once (in program order), or only two layers later.
      for (int n : step.graph.successors(id)) {
        const auto& next = step.graph.task(n);
        if (next.phase == "backward" && next.layer != t.layer - 2) ++waited;
      }
    }
    REQUIRE(gathers > 2);
    REQUIRE(scatters > 2);
    CHECK(chained == (ahead ? gathers - 1 : 0));
    CHECK((waited == 0) == ahead);
    // Prefetched: a layer's gradients in one reduce-scatter (a batch-only family), as its weights
    // are gathered in one; in program order, each weight's where its gradient is computed.
    CHECK((int(scattered_layers.size()) == scatters) == ahead);
  }
  // Only fully sharded weights are gathered.
  Json replicated = megatron_schedule();
  replicated["weight_gathers"] = "prefetched";
  CHECK_THROWS_WITH(mesh_study(model, replicated),
                    Catch::Contains("schedule.weight_gathers") && Catch::Contains("fully_sharded"));
}

TEST_CASE(
    "a re-materialized layer's forward under a mesh holds what it computes beyond what it keeps until it "
    "ends",
    "[mesh][remat]") {
  for (const char* remat : {"true", "\"save_dots\""}) {
    INFO("remat " << remat);
    Json sched = megatron_schedule();
    sched["remat"] = Json::parse(remat);
    const Study s = mesh_study(megatron_model(), sched);
    const auto* mesh = dynamic_cast<const MeshSchedule*>(s.schedule.get());
    REQUIRE(mesh);
    const auto programs = mesh->programs(s);
    const BuiltStep step = s.schedule->build(s);
    for (std::size_t l = 0; l < programs.size(); ++l) {
      const double computed = programs[l].kept_bytes - mesh->kept_in_forward(programs[l]);
      // The forward's workspace beyond each piece's own (its largest transient), and its balance.
      double held = 0, net = 0;
      for (int id : step.graph.program(0)) {
        const auto& t = step.graph.task(id);
        if (t.phase != "forward" || t.layer != int(l)) continue;
        held -= programs[l].workspace_bytes;
        for (const auto& m : t.memory)
          if (m.category == sim::MemoryCategory::Workspace) {
            net += m.bytes;
            held += m.bytes > 0 ? m.bytes : 0.0;
          }
      }
      INFO("layer " << l);
      CHECK(held == Approx(std::max(computed, 0.0)));
      CHECK(net == Approx(0).margin(1e-6));
    }
  }
}

TEST_CASE("experts split over the batch's mesh dimension exchange their slots by all-to-all", "[mesh][moe]") {
  // 32 experts, one per core of v3-32; top-2, capacity factor 2: C = 2 x 2 x 64 x 128 / 32 = 1024
  // slots per expert. Each core's buffer: its expert's slots [1, 1024, d_model 256] in bf16.
  const Json model = Json::parse(
      R"({"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1024, "seq_len": 128, "moe": {"experts": 32, "every": 2, "top_k": 2, "capacity_factor": 2}})");
  const Study s = mesh_study(
      model,
      Json::parse(
          R"({"kind": "mesh", "mesh": [["batch", 32]], "layout": {"batch": "batch", "experts": "batch"}})"),
      "v3-32", 64);
  const BuiltStep step = s.schedule->build(s);
  const double slots = 1.0 * 1024 * 256 * 2;
  for (const char* op : {"moe_dispatch", "moe_combine"}) {
    const Json c = collectives_of(step, "block1", op);
    REQUIRE(c.size() == 2);  // forward, and its gradient back
    for (const auto& col : c) {
      CHECK(col["bytes"].get<double>() == Approx(slots));
      CHECK(col["task"].get<std::string>().rfind("all-to-all", 0) == 0);
      CHECK(col["blocking"] == true);
    }
  }
  // The experts' weights are each core's own: no gradient reduction for them; the router's is.
  CHECK(collectives_of(step, "block1", "moe_in").empty());
  CHECK(collectives_of(step, "block1", "moe_router").size() == 1);
  // The same model data-parallel: each core routes its own tokens to its own copy of every expert.
  const Study dp = mesh_study(
      model, Json::parse(R"({"kind": "mesh", "mesh": [["batch", 32]], "layout": {"batch": "batch"}})"),
      "v3-32", 64);
  const BuiltStep replicated = dp.schedule->build(dp);
  CHECK(collectives_of(replicated, "block1", "moe_dispatch").empty());
  CHECK(collectives_of(replicated, "block1", "moe_in").size() == 1);  // its gradient all-reduced
  // ... holding all 32 experts' weights where the split mesh holds one.
  CHECK(replicated.graph.resident_bytes(0) > step.graph.resident_bytes(0) * 5);
}

TEST_CASE("a tied embedding's gradient is reduced once, with its owner's weight gradients", "[mesh]") {
  // The output layer reads the embedding table (shared_embeddings): its gradient of the table
  // adds to the embedding layer's, which that layer's weight-gradient reduction over the batch
  // reduces; the output layer reduces only its input gradient's partial sums over the split
  // vocabulary (it once all-reduced the table's gradient over the batch as well, blocking).
  Json model = megatron_model();
  model["shared_embeddings"] = true;
  const Study s = mesh_study(model, megatron_schedule());
  const BuiltStep step = s.schedule->build(s);
  const Json logits = collectives_of(step, "output", "logits");
  REQUIRE(logits.size() == 1);
  CHECK(logits[0]["mesh_dims"] == Json::array({"model"}));
  CHECK(logits[0]["what"] == "logits input gradient");
  bool owner_reduces = false;
  for (const auto& c : collectives_of(step, "embedding", "embedding"))
    owner_reduces |= c["what"] == "embedding weight gradient" && c["mesh_dims"] == Json::array({"batch"}) &&
                     c["bytes"].get<double>() == Approx(1024.0 / 4 * 256 * 4);  // fp32, vocab split 4 ways
  CHECK(owner_reduces);
  // An encoder-decoder sharing one table between its encoder's and decoder's embeddings and its
  // output: the decoder's lookup reads the encoder's table, whose gradient is reduced once; with
  // weight-update sharding each core updates only its piece of it (the lookup once scattered
  // the table's gradient a second time, freeing what its layer never held).
  model["encoder_layers"] = 2;
  for (const char* update : {"replicated", "sharded", "fully_sharded"}) {
    INFO(update);
    Json sched = megatron_schedule();
    sched["weight_update"] = update;
    const Study ed = mesh_study(model, sched);
    const BuiltStep b = ed.schedule->build(ed);
    REQUIRE_NOTHROW(b.graph.validate());
    int table_reductions = 0;
    for (const auto& row : b.details["ops"])
      for (const auto& c : row["collectives"])
        table_reductions +=
            c["what"].get<std::string>().find("embedding weight gradient") != std::string::npos;
    CHECK(table_reductions == 1);
  }
}

TEST_CASE("gradient accumulation under a mesh: one micro-batch's activations, the gradients reduced once",
          "[mesh][accumulation]") {
  Json sched = megatron_schedule();
  const Study one = mesh_study(megatron_model(), sched);
  sched["accumulation_steps"] = 4;
  const Study four = mesh_study(megatron_model(), sched);
  CHECK(four.schedule->resolved()["accumulation_steps"] == 4);
  CHECK_FALSE(one.schedule->resolved().contains("accumulation_steps"));
  CHECK(four.schedule->layer_batch(four) == one.schedule->layer_batch(one) / 4);
  const BuiltStep a = one.schedule->build(one), b = four.schedule->build(four);
  REQUIRE_NOTHROW(b.graph.validate());  // gradients allocated once, freed once
  // The same model FLOPs and hardware FLOPs (the work in four passes), the same reductions.
  CHECK(b.model_flops == Approx(a.model_flops));
  CHECK(b.hardware_flops == Approx(a.hardware_flops).epsilon(0.02));
  auto reductions = [](const BuiltStep& s) {
    std::multiset<double> bytes;
    for (int id = 0; id < s.graph.size(); ++id)
      if (s.graph.task(id).phase == "gradient_allreduce") bytes.insert(s.graph.task(id).bytes);
    return bytes;
  };
  CHECK(reductions(b) == reductions(a));
  // Each forward keeps a micro-batch's activations: a quarter of the whole batch's.
  auto kept = [](const BuiltStep& s) {
    double bytes = 0, largest = 0;
    for (int id : s.graph.program(0))
      for (const auto& m : s.graph.task(id).memory)
        if (m.category == sim::MemoryCategory::Activations) largest = std::max(largest, bytes += m.bytes);
    return largest;
  };
  CHECK(kept(b) == Approx(kept(a) / 4).epsilon(0.01));
  // Four forwards per layer on every core.
  int forwards = 0, first_forwards = 0;
  for (int id : b.graph.program(0)) forwards += b.graph.task(id).phase == "forward" ? 1 : 0;
  for (int id : a.graph.program(0)) first_forwards += a.graph.task(id).phase == "forward" ? 1 : 0;
  CHECK(forwards == 4 * first_forwards);
  // The bound: four micro-batches' programs (each op's overhead four times), a quarter of the
  // kept activations under the memory floor.
  const StepBound bound_one = one.schedule->bound(one), bound_four = four.schedule->bound(four);
  CHECK(bound_four.seconds > bound_one.seconds);
  CHECK(bound_four.seconds < 2 * bound_one.seconds);
  CHECK(bound_four.floor_bytes < bound_one.floor_bytes);
  CHECK(bound_four.resident_bytes == bound_one.resident_bytes);
  // A count that does not divide a replica's examples, or with weights gathered per layer: exit 2.
  sched["accumulation_steps"] = 3;
  CHECK_THROWS_WITH(mesh_study(megatron_model(), sched), Catch::Contains("schedule.accumulation_steps"));
  sched["accumulation_steps"] = 2;
  sched["weight_update"] = "fully_sharded";
  CHECK_THROWS_WITH(mesh_study(megatron_model(), sched),
                    Catch::Contains("schedule.accumulation_steps") && Catch::Contains("fully_sharded"));
}

TEST_CASE(
    "a tensor-parallel reduction of a matmul's output is decomposed with it where the stack overlaps "
    "them: its pieces behind the matmul's, the last one blocking",
    "[mesh][collective_matmul]") {
  Study off = mesh_study(megatron_model(), megatron_schedule());
  Study on = off;
  off.hardware.core.tensor_collectives_overlap_matmuls = false;
  on.hardware.core.tensor_collectives_overlap_matmuls = true;
  on.hardware.core.collective_matmul_min_operand_bytes = 0;  // every matmul
  const auto& mesh = dynamic_cast<const MeshSchedule&>(*off.schedule);
  const auto a = mesh.programs(off), b = mesh.programs(on);
  REQUIRE(a.size() == b.size());
  int decomposed = 0;
  for (std::size_t l = 0; l < a.size(); ++l)
    for (auto pass : {&mesh::LayerProgram::forward, &mesh::LayerProgram::backward}) {
      const auto &before = a[l].*pass, &after = b[l].*pass;
      double seconds[2] = {0, 0}, flops[2] = {0, 0}, bytes[2] = {0, 0};
      for (int k = 0; k < 2; ++k)
        for (const auto& ev : k ? after : before) {
          seconds[k] += ev.seconds;
          flops[k] += ev.hardware_flops;
          if (ev.kind == mesh::Event::BlockingAllReduce) bytes[k] += ev.bytes;
        }
      CHECK(seconds[1] == Approx(seconds[0]));  // the same matmuls, in steps
      CHECK(flops[1] == Approx(flops[0]));
      CHECK(bytes[1] == Approx(bytes[0]));  // the same reductions, in pieces
      for (std::size_t e = 0; e < after.size(); ++e) {
        if (!after[e].behind) continue;
        ++decomposed;
        // head compute, the pieces behind (3 of the 4 model cores' steps), the matmul's other
        // steps, the last piece blocking.
        REQUIRE(e > 0);
        REQUIRE(e + 2 < after.size());
        CHECK(after[e - 1].kind == mesh::Event::Compute);
        CHECK(after[e + 1].kind == mesh::Event::Compute);
        CHECK(after[e + 2].kind == after[e].kind);
        CHECK_FALSE(after[e + 2].behind);
        CHECK(after[e].bytes == Approx(3 * after[e + 2].bytes));
        CHECK(after[e + 1].seconds > 0);
      }
    }
  CHECK(decomposed > 0);
  for (const auto& l : a)
    for (const auto& ev : l.forward) CHECK_FALSE(ev.behind);
  // The per-op table lists each reduction once, whole, with its steps.
  const BuiltStep step = on.schedule->build(on);
  bool listed = false;
  for (const auto& row : step.details["ops"])
    for (const auto& c : row["collectives"])
      if (c.contains("overlapped_with_matmul_steps")) {
        CHECK(c["overlapped_with_matmul_steps"] == 4.0);
        listed = true;
      }
  CHECK(listed);
  // The bound leaves out the pieces behind the compute: it is lower.
  CHECK(on.schedule->bound(on).seconds < off.schedule->bound(off).seconds);
  // Under the compiler's size threshold, no matmul is decomposed.
  on.hardware.core.collective_matmul_min_operand_bytes = 1e12;
  for (const auto& l : mesh.programs(on))
    for (const auto& ev : l.forward) CHECK_FALSE(ev.behind);
}

TEST_CASE("a data x fsdp mesh holds weights / fsdp per device and all-reduces the pieces over data",
          "[mesh][sharding]") {
  const Json model = megatron_model();
  Json sched = Json::parse(
      R"({"kind": "mesh", "mesh": [["data", 2], ["fsdp", 4], ["model", 4]], "data_parallel_dim": "data",
          "layout": {"batch": "fsdp", "d_ff": "model", "heads": "model", "vocab": "model"}})");
  const Study replicated = mesh_study(model, sched);
  sched["weight_update"] = "fully_sharded";
  const Study fully = mesh_study(model, sched);
  const Study fsdp8 = mesh_study(model, [] {
    Json j = megatron_schedule();
    j["weight_update"] = "fully_sharded";
    return j;
  }());
  const auto* m = dynamic_cast<const MeshSchedule*>(fully.schedule.get());
  CHECK(m->layer_batch(fully) == 256 / 8);
  CHECK(fully.schedule->resolved()["data_parallel_dim"] == "data");
  // Every core reads its own examples: 8 shards of 32, the model axis's cores sharing one.
  std::set<int> shards;
  for (const auto& in : fully.schedule->input(fully)) {
    CHECK(in.examples == 32);
    shards.insert(in.shard);
  }
  CHECK(shards.size() == 8);
  const BuiltStep a = replicated.schedule->build(replicated), b = fully.schedule->build(fully),
                  c = fsdp8.schedule->build(fsdp8);
  REQUIRE_NOTHROW(b.graph.validate());
  // Replicated, each weight gradient is all-reduced over data and fsdp (groups of 8).
  double reduced = 0;
  for (int id = 0; id < a.graph.size(); ++id) {
    const auto& t = a.graph.task(id);
    if (t.phase != "gradient_allreduce") continue;
    CHECK(t.groups.front().size() == 8);
    reduced += t.bytes;
  }
  // Fully sharded: reduce-scattered over fsdp (groups of 4), the quarter each core keeps
  // all-reduced over data (groups of 2); the weights gathered over fsdp, twice.
  double scattered = 0, pieces = 0, gathered = 0;
  for (int id = 0; id < b.graph.size(); ++id) {
    const auto& t = b.graph.task(id);
    if (t.phase == "gradient_reduce_scatter") {
      CHECK(t.groups.front().size() == 4);
      scattered += t.bytes;
    } else if (t.phase == "gradient_allreduce") {
      CHECK(t.groups.front().size() == 2);
      pieces += t.bytes;
    } else if (t.phase == "weight_allgather") {
      CHECK(t.groups.front().size() == 4);
      gathered += t.bytes;
    }
  }
  CHECK(scattered == Approx(reduced));
  CHECK(pieces == Approx(reduced / 4).epsilon(0.01));
  CHECK(gathered == Approx(2 * reduced));
  // Resident: a quarter of the weights and optimizer slots (fsdp's 4, not the 8 replicas).
  const auto& ra = a.graph.resident()[5];
  const auto& rb = b.graph.resident()[5];
  for (auto k : {sim::MemoryCategory::Weights, sim::MemoryCategory::Optimizer}) {
    CHECK(rb[int(k)] == Approx(ra[int(k)] / 4).epsilon(0.01));
    CHECK(rb[int(k)] >= ra[int(k)] / 4);
  }
  // Each core computes what a core of the 8-way fsdp mesh computes (32 examples, the same shards).
  CHECK(b.model_flops == Approx(c.model_flops));
  double compute_b = 0, compute_c = 0;
  for (int id = 0; id < b.graph.size(); ++id)
    if (b.graph.task(id).core == 5 && b.graph.task(id).kind == sim::TaskKind::Compute &&
        b.graph.task(id).phase != "update")
      compute_b += b.graph.task(id).seconds;
  for (int id = 0; id < c.graph.size(); ++id)
    if (c.graph.task(id).core == 5 && c.graph.task(id).kind == sim::TaskKind::Compute &&
        c.graph.task(id).phase != "update")
      compute_c += c.graph.task(id).seconds;
  CHECK(compute_b == Approx(compute_c));
}

TEST_CASE("data_parallel_dim names a mesh dimension the layout does not use", "[mesh][config]") {
  const Json model = megatron_model();
  const auto problem = [&](const std::string& extra) {
    Json sched = Json::parse(
        R"({"kind": "mesh", "mesh": [["data", 2], ["fsdp", 4], ["model", 4]], "remat": true,
            "layout": {"batch": "fsdp", "d_ff": "model", "heads": "model", "vocab": "model"}})");
    sched.update(Json::parse(extra));
    try {
      mesh_study(model, sched);
    } catch (const ConfigError& e) {
      return e.problems().front().path + ": " + e.problems().front().expected;
    }
    return std::string("accepted");
  };
  CHECK(problem(R"({"data_parallel_dim": "data"})") == "accepted");
  CHECK_THAT(problem(R"({"data_parallel_dim": "rows"})"),
             Catch::Contains("schedule.data_parallel_dim: the name of a mesh dimension"));
  CHECK_THAT(problem(R"({"data_parallel_dim": "fsdp"})"), Catch::Contains("layout.batch is split over it"));
  CHECK_THAT(problem(R"({"data_parallel_dim": "data", "layer_input_split": "data"})"),
             Catch::Contains("schedule.layer_input_split: a mesh dimension other than data_parallel_dim"));
}

TEST_CASE(
    "data x fsdp with experts on the fsdp axis: an expert's weights, reduced over data alone, stay whole",
    "[mesh][sharding][moe]") {
  Json model = megatron_model();
  model["moe"] = {{"experts", 8}};
  for (const char* gathered : {"fp32", "bf16"}) {
    INFO(gathered);
    Json sched = Json::parse(
        R"({"kind": "mesh", "mesh": [["data", 4], ["batch", 8]], "data_parallel_dim": "data",
            "layout": {"batch": "batch", "experts": "batch"}, "weight_update": "fully_sharded"})");
    sched["gathered_weight_dtype"] = gathered;
    const Study s = mesh_study(model, sched);
    const BuiltStep b = s.schedule->build(s);
    REQUIRE_NOTHROW(b.graph.validate());  // every gathered byte freed, none for the experts
    for (int id = 0; id < b.graph.size(); ++id) {
      const auto& t = b.graph.task(id);
      if (t.phase == "weight_allgather" || t.phase == "gradient_reduce_scatter")
        CHECK(t.groups.front().size() == 8);  // over the batch (fsdp) axis only
      if (t.phase == "gradient_allreduce") CHECK(t.groups.front().size() == 4);  // over data
    }
    // A bf16 gathered copy holds what the gathers bring, nothing for the experts' whole weights.
    if (gathered == std::string("bf16"))
      CHECK(memory_effects(b, sim::MemoryCategory::Weights, true) ==
            Approx(phase_bytes(b, "weight_allgather")));
  }
}
