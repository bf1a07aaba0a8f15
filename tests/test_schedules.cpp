// Schedules build graphs without the engine: structure, memory effects, FLOP totals.
#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "hardware/topology.hpp"
#include "schedules/gradient_buckets.hpp"
#include "schedules/step_builder.hpp"
#include "schedules/study.hpp"
#include "sim/collectives/collective_algorithm.hpp"
#include "test_support.hpp"

using namespace tpusim;

namespace {

Study study(const std::string& optimizer = "adam", int batch = 64, const std::string& slice = "v3-8") {
  Json j = Json::parse(R"({
    "hardware": "tpu-v3",
    "model": {"kind": "transformer", "activation": "relu", "layers": 4, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64},
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
  // Every core runs every layer's forward and backward and updates every layer with weights.
  for (int c = 0; c < s.cores(); ++c) {
    std::set<int> forward, backward, updated;
    for (int id : step.graph.program(c)) {
      const auto& t = step.graph.task(id);
      (t.phase == "forward" ? forward : t.phase == "backward" ? backward : updated).insert(t.layer);
    }
    CHECK(int(forward.size()) == layers);
    CHECK(int(backward.size()) == layers);
    CHECK(int(updated.size()) == layers);  // every layer of this transformer has weights
  }
  // The gradients combined per weight up to the bucket: a reduction over every core, of at most
  // the bucket or one weight's gradients alone.
  double largest_weight = 0;
  for (const auto& layer : s.model.layers)
    for (const auto& op : layer.named_ops(s.batch))
      if (op.b.weight) largest_weight = std::max(largest_weight, 4.0 * double(op.b.elements()));
  int collectives = 0;
  double reduced = 0;
  for (int id = 0; id < step.graph.size(); ++id) {
    const auto& t = step.graph.task(id);
    if (t.kind != sim::TaskKind::Collective) continue;
    ++collectives;
    reduced += t.bytes;
    CHECK(int(t.collective_groups().front().size()) == s.cores());
    CHECK(t.bytes <= std::max(4000000.0, largest_weight));
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
  REQUIRE(step.details["gradient_buckets"].size() >= 1);
  // Every gradient collective runs over exactly the chip's two cores, carrying the bucket's
  // fp32 gradients, and every bucket's parameters are reduced once.
  double reduced = 0;
  int collectives = 0;
  for (int id = 0; id < step.graph.size(); ++id) {
    const auto& t = step.graph.task(id);
    if (t.kind != sim::TaskKind::Collective) continue;
    ++collectives;
    CHECK(t.op == sim::CollectiveOp::AllReduce);
    CHECK(t.collective_groups() == std::vector<std::vector<int>>{{0, 1}});
    reduced += t.bytes;
  }
  CHECK(collectives == int(step.details["gradient_buckets"].size()));
  CHECK(reduced == Approx(4.0 * double(s.model.params())));
}

TEST_CASE("every registered schedule kind is listed", "[schedules][registry]") {
  CHECK(schedule_registry().size() == 4);
  for (const char* kind : {"data_parallel", "gpipe", "mesh", "one_f_one_b"})
    CHECK(schedule_registry().count(kind));
}

namespace {

Study dp(const std::string& optimizer, const std::string& weight_update, const std::string& slice, int batch,
         const std::string& gradient_dtype = "fp32") {
  Json j = Json::parse(R"({"hardware": "tpu-v3", "model": {"kind": "resnet50"}})");
  j["slice"] = slice;
  j["batch"] = batch;
  j["optimizer"] = Json{{"kind", optimizer}};
  j["schedule"] =
      Json{{"kind", "data_parallel"}, {"weight_update", weight_update}, {"gradient_dtype", gradient_dtype}};
  return parse_study(j, "test");
}

/// Bytes put on the ICI by every collective of a phase, per the collective plans.
double wire_bytes(const Study& s, const BuiltStep& step, const std::vector<std::string>& phases) {
  const sim::CollectivePlanner planner(Topology(s.slice), s.hardware.chip.cores,
                                       s.hardware.chip.collective_algorithms);
  double total = 0;
  for (int id = 0; id < step.graph.size(); ++id) {
    const auto& t = step.graph.task(id);
    if (t.kind != sim::TaskKind::Collective ||
        std::find(phases.begin(), phases.end(), t.phase) == phases.end())
      continue;
    for (const auto& group : t.collective_groups())
      total += sim::plan_wire_bytes(planner.plan(t.op, group, t.bytes));
  }
  return total;
}

}  // namespace

TEST_CASE("sharded and replicated updates put the same bytes on the wire", "[schedules][sharding]") {
  const Study rep = dp("momentum", "replicated", "v3-32", 1024),
              sh = dp("momentum", "sharded", "v3-32", 1024);
  const BuiltStep a = rep.schedule->build(rep), b = sh.schedule->build(sh);
  REQUIRE_NOTHROW(b.graph.validate());
  const double allreduce = wire_bytes(rep, a, {"gradient_allreduce"});
  CHECK(allreduce > 0);
  CHECK(wire_bytes(sh, b, {"gradient_reduce_scatter", "weight_allgather"}) ==
        Approx(allreduce).epsilon(1e-12));
}

TEST_CASE("sharding divides the optimizer slots per core by the replicas, up to padding",
          "[schedules][sharding]") {
  for (const char* opt : {"momentum", "adam", "lars"}) {
    const Study rep = dp(opt, "replicated", "v3-128", 1024), sh = dp(opt, "sharded", "v3-128", 1024);
    const BuiltStep a = rep.schedule->build(rep), b = sh.schedule->build(sh);
    const double full = a.graph.resident()[5][int(sim::MemoryCategory::Optimizer)];
    const double shard = b.graph.resident()[5][int(sim::MemoryCategory::Optimizer)];
    const double N = 128;
    INFO(opt);
    CHECK(shard * N >= full);
    const double slots = std::string(opt) == "adam" ? 2 : 1;
    CHECK(shard * N - full ==
          Approx(4.0 * slots * b.details["shard_padding_params"].get<double>()).margin(1));
    CHECK(b.graph.resident()[5][int(sim::MemoryCategory::Weights)] ==
          a.graph.resident()[5][int(sim::MemoryCategory::Weights)]);
  }
}

TEST_CASE("shard padding: every core gets an equal piece of each weight", "[schedules][sharding]") {
  const Study sh = dp("sgd", "sharded", "v3-2048", 4096);
  const BuiltStep b = sh.schedule->build(sh);
  double padding = 0, weights = 0, all = 0;
  for (const auto& layer : sh.model.layers)
    for (const auto& op : layer.named_ops(sh.batch))
      for (const auto& t : op.tensors())
        if (t.weight && !t.tied) {
          padding += std::ceil(double(t.elements()) / 2048) * 2048 - double(t.elements());
          weights += 1;
        }
  for (const auto& bucket : b.details["gradient_buckets"]) {
    const double params = bucket["params"].get<double>(), shard = bucket["shard_params"].get<double>();
    CHECK(shard >= std::ceil(params / 2048));  // a piece of each weight, each padded
    all += params;
  }
  CHECK(all == Approx(double(sh.model.params())));
  CHECK(b.details["shard_padding_params"].get<double>() == Approx(padding));
  CHECK(padding < 2048.0 * weights);
}

TEST_CASE("bf16 gradients halve the bytes reduced", "[schedules][sharding]") {
  const Study a = dp("adam", "sharded", "v3-32", 1024, "fp32"),
              b = dp("adam", "sharded", "v3-32", 1024, "bf16");
  const BuiltStep sa = a.schedule->build(a), sb = b.schedule->build(b);
  CHECK(wire_bytes(b, sb, {"gradient_reduce_scatter"}) ==
        Approx(wire_bytes(a, sa, {"gradient_reduce_scatter"}) / 2));
  CHECK(wire_bytes(b, sb, {"weight_allgather"}) == Approx(wire_bytes(a, sa, {"weight_allgather"})));
}

TEST_CASE("sharded LARS all-reduces its per-layer norms", "[schedules][sharding]") {
  const Study sh = dp("lars", "sharded", "v3-32", 1024);
  const BuiltStep b = sh.schedule->build(sh);
  int norms = 0;
  for (int id = 0; id < b.graph.size(); ++id) norms += b.graph.task(id).phase == "lars_norms";
  int with_weights = 0;  // one all-reduce of the two partial norms per layer with weights
  for (const auto& layer : sh.model.layers) with_weights += layer.params() > 0 ? 1 : 0;
  CHECK(norms == with_weights);
}

TEST_CASE("every schedule reports the same model FLOPs for the same model and batch", "[schedules][flops]") {
  // Model FLOPs are the math of the step, whatever runs it: MXU utilization divides by them, so a
  // schedule that counted only some ops (the mesh layouts once counted einsums and no
  // convolutions) would mislabel its utilization.
  const std::vector<std::pair<const char*, bool>> models = {
      {R"({"kind": "mlp", "layers": 4, "width": 256, "input": 128, "classes": 16})", true},
      {R"({"kind": "transformer", "activation": "relu", "layers": 4, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64})",
       true},
      {R"({"kind": "resnet50", "image_size": 64, "classes": 10})", true},
      {R"({"kind": "amoebanet_d", "normal_cells": 3, "filters": 32, "image_size": 64, "classes": 10})",
       false}};
  const char* schedules[] = {R"({"kind": "data_parallel"})",
                             R"({"kind": "data_parallel", "weight_update": "sharded"})",
                             R"({"kind": "gpipe", "stages": 4, "microbatches": 4, "replicas": 2})",
                             R"({"kind": "one_f_one_b", "stages": 2, "microbatches": 8, "replicas": 4})",
                             R"({"kind": "mesh", "mesh": {"batch": 8}, "layout": {"batch": "batch"}})"};
  for (const auto& [model, has_named_ops] : models) {
    std::vector<double> flops;
    for (const char* schedule : schedules) {
      if (!has_named_ops && std::string(schedule).find("mesh") != std::string::npos) continue;
      INFO(model << " " << schedule);
      const Json j{{"hardware", "tpu-v3"},           {"slice", "v3-8"},
                   {"model", Json::parse(model)},    {"batch", 64},
                   {"optimizer", {{"kind", "sgd"}}}, {"schedule", Json::parse(schedule)}};
      const Study s = parse_study(j, "test");
      flops.push_back(s.schedule->build(s).model_flops);
      CHECK(flops.back() > 0);
      CHECK(flops.back() == Approx(flops.front()).epsilon(1e-9));
    }
  }
  // And the definition itself, for the mlp by hand: forward 2 x batch x weights of the matmuls;
  // backward twice that (the mlp computes every layer's input gradient, the first's too, so that
  // its layers stay identical for the pipeline oracles).
  const Json j{{"hardware", "tpu-v3"},
               {"slice", "v3-8"},
               {"model", Json::parse(models[0].first)},
               {"batch", 64},
               {"optimizer", {{"kind", "sgd"}}},
               {"schedule", Json::parse(schedules[0])}};
  const Study s = parse_study(j, "test");
  const double matmuls = 128.0 * 256 + 3.0 * 256 * 256 + 256.0 * 16;
  CHECK(s.schedule->build(s).model_flops == Approx(2.0 * 64 * 3 * matmuls).epsilon(1e-9));
}

TEST_CASE("cross-replica batch norm all-reduces each normalization's statistics over groups of replicas",
          "[schedules][batch_norm]") {
  Json j = Json::parse(
      R"({"hardware": "tpu-v3", "slice": "v3-8", "model": {"kind": "resnet50", "image_size": 64, "classes": 10},
                           "batch": 64, "optimizer": {"kind": "momentum"},
                           "schedule": {"kind": "data_parallel", "batch_norm_group": 2}})");
  const Study s = parse_study(j, "test");
  const BuiltStep step = s.schedule->build(s);
  REQUIRE_NOTHROW(step.graph.validate());
  // ResNet-50 has 53 batch norms (the stem's, 3 per block, 4 shortcuts): 53 all-reduces forward
  // and 53 backward, each of mean and variance per channel in fp32, over 4 groups of 2 cores.
  int forward = 0, backward = 0;
  double forward_bytes = 0;
  for (int id = 0; id < step.graph.size(); ++id) {
    const auto& t = step.graph.task(id);
    if (t.phase != "batch_norm_statistics" && t.phase != "batch_norm_gradient_statistics") continue;
    (t.phase == "batch_norm_statistics" ? forward : backward) += 1;
    if (t.phase == "batch_norm_statistics") forward_bytes += t.bytes;
    auto groups = t.collective_groups();
    std::sort(groups.begin(), groups.end());
    CHECK(groups == std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  }
  CHECK(forward == 53);
  CHECK(backward == 53);
  double all_channels = 0;
  for (const auto& layer : s.model.layers)
    for (const auto c : layer.work(8).batch_norm_channels) all_channels += double(c);
  CHECK(forward_bytes == Approx(8.0 * all_channels));
  // ResNet-50's channels, by hand: stem 64; per bottleneck of width w: w + w + 4w, plus 4w for
  // the first block's shortcut; blocks 3, 4, 6, 3 of widths 64, 128, 256, 512.
  double by_hand = 64;
  const int blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) by_hand += (64 << stage) * (6.0 * blocks[stage] + 4);
  CHECK(all_channels == by_hand);

  j["schedule"]["batch_norm_group"] = 3;
  try {
    parse_study(j, "test");
    FAIL("accepted a group that does not divide the replicas");
  } catch (const ConfigError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("schedule.batch_norm_group"));
  }
}

TEST_CASE("every registered optimizer rule states its cost with a source, and its math where functional",
          "[schedules][registry][optimizer]") {
  CHECK(optimizer_rules().size() == 8);
  for (const char* kind : {"adafactor", "adam", "adamw", "lamb", "lars", "momentum", "rmsprop", "sgd"}) {
    INFO(kind);
    REQUIRE(optimizer_rules().count(kind));
    const auto& rule = *optimizer_rules().at(kind);
    CHECK(rule.cost().vpu_ops_per_param > 0);
    CHECK(rule.cost().tensors_moved >= 3);  // at least: read w and g, write w
    CHECK(rule.cost().source.rfind("derived", 0) == 0);
    CHECK(rule.default_learning_rate() > 0);
  }
  // One step of momentum by hand: m = 0.9 * 1 + 2 = 2.9; w = 1 - 0.1 * 2.9 = 0.71.
  std::vector<float> w = {1, 1}, g = {2, 2}, m = {1, 1};
  optimizer_rules().at("momentum")->update(w.data(), g.data(), {m.data()}, 1, 2, 0.1, 1);
  CHECK(w[0] == 1.0f);  // outside [lo, hi)
  CHECK(m[1] == Approx(2.9));
  CHECK(w[1] == Approx(0.71));
  // AdamW by hand, step 1 (bias corrections 0.1 and 0.001): m = 0.1 g, v = 0.001 g^2, the
  // direction m_hat / (sqrt(v_hat) + eps) = 1 for g = 2; w = 1 - 0.1 (1 + 0.1 * 1) = 0.89. Its
  // vector work is Adam's and the decay's multiply and add, over the same tensors.
  std::vector<float> wa = {1}, ga = {2}, ma = {0}, va = {0};
  optimizer_rules().at("adamw")->update(wa.data(), ga.data(), {ma.data(), va.data()}, 0, 1, 0.1, 1);
  CHECK(wa[0] == Approx(0.89).epsilon(1e-6));
  const auto &adam = *optimizer_rules().at("adam"), &adamw = *optimizer_rules().at("adamw");
  CHECK(adamw.cost().vpu_ops_per_param == adam.cost().vpu_ops_per_param + 2);
  CHECK(adamw.cost().tensors_moved == adam.cost().tensors_moved);
  CHECK(adamw.slots() == adam.slots());
  // LARS needs its two norms over the whole layer; Adafactor its factored statistics.
  CHECK(optimizer_rules().at("lars")->layer_statistics_bytes() == 8);
  CHECK(optimizer_rules().at("lamb")->layer_statistics_bytes() == 8);
  CHECK(optimizer_rules().at("lamb")->slots() == 2);
  CHECK(optimizer_rules().at("adafactor")->factored_statistics());
  CHECK_FALSE(optimizer_rules().at("lars")->functional());
}

TEST_CASE("gradient reductions overlap the backward, or wait for all of it (a software-stack setting)",
          "[schedules]") {
  for (bool overlap : {true, false}) {
    INFO("overlap " << overlap);
    Study s = study();
    s.hardware.core.gradient_collectives_overlap_backward = overlap;
    const BuiltStep step = s.schedule->build(s);
    REQUIRE_NOTHROW(step.graph.validate());
    int waiting = 0, collectives = 0;
    for (int id = 0; id < step.graph.size(); ++id) {
      if (step.graph.task(id).kind != sim::TaskKind::Collective) continue;
      ++collectives;
      waiting += test::waits_for_whole_backward(step.graph, id) ? 1 : 0;
    }
    REQUIRE(collectives > 1);
    // Overlapping, only the bucket holding the first layers waits for the whole backward.
    CHECK(waiting == (overlap ? 1 : collectives));
  }
}

namespace {

/// A four-layer Transformer on v3-8 with Adam, data-parallel (the re-materialization and fully
/// sharded tests vary its schedule).
Json small_transformer_study() {
  return Json::parse(R"({
    "hardware": "tpu-v3", "slice": "v3-8", "batch": 64, "optimizer": {"kind": "adam"},
    "model": {"kind": "transformer", "activation": "relu", "layers": 4, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64},
    "schedule": {"kind": "data_parallel"}})");
}

}  // namespace

TEST_CASE("data parallel re-materialization keeps each layer's input and runs one forward again",
          "[schedules][remat]") {
  Json j = small_transformer_study();
  j["schedule"]["gradient_bucket_bytes"] = 4000000;
  const Study plain_study = parse_study(j, "test");
  j["schedule"]["remat"] = true;
  const Study remat_study = parse_study(j, "test");
  CHECK(remat_study.schedule->resolved()["remat"] == true);
  const BuiltStep plain = plain_study.schedule->build(plain_study);
  const BuiltStep remat = remat_study.schedule->build(remat_study);
  REQUIRE_NOTHROW(remat.graph.validate());
  // What each forward keeps on core 0 for its backward, and the forwards' hardware FLOPs.
  auto kept = [](const BuiltStep& s) {
    double bytes = 0;
    for (int id : s.graph.program(0))
      if (s.graph.task(id).phase == "forward")
        for (const auto& m : s.graph.task(id).memory)
          if (m.category == sim::MemoryCategory::Activations) bytes += m.bytes;
    return bytes;
  };
  double forward_flops = 0;
  for (int id = 0; id < plain.graph.size(); ++id)
    if (plain.graph.task(id).phase == "forward") forward_flops += plain.graph.task(id).hardware_flops;
  StepBuilder b(plain_study, plain_study.cores());
  double inputs = 0, stashes = 0;
  for (int l = 0; l < int(plain_study.model.layers.size()); ++l) {
    inputs += b.cost(l, 8).input_bytes;
    stashes += b.cost(l, 8).stash_bytes;
  }
  CHECK(kept(plain) == Approx(stashes));
  CHECK(kept(remat) == Approx(inputs));  // the layers' inputs only
  CHECK(inputs < stashes);
  CHECK(remat.model_flops == Approx(plain.model_flops));
  CHECK(remat.hardware_flops == Approx(plain.hardware_flops + forward_flops));  // one forward more
  int recomputes = 0;
  for (int id : remat.graph.program(0)) recomputes += remat.graph.task(id).phase == "recompute" ? 1 : 0;
  CHECK(recomputes == int(plain_study.model.layers.size()));
  // Not with cross-replica batch norm (the recompute would all-reduce its statistics again).
  j["schedule"]["batch_norm_group"] = 2;
  CHECK_THROWS_WITH(parse_study(j, "test"), Catch::Contains("schedule.remat"));
}

TEST_CASE("fully sharded data parallelism: 1/N of the state per core, each layer gathered twice",
          "[schedules][sharding]") {
  Json j = small_transformer_study();
  const Study replicated_study = parse_study(j, "test");
  j["schedule"]["weight_update"] = "fully_sharded";
  const Study fully_study = parse_study(j, "test");
  CHECK(fully_study.schedule->resolved()["weight_update"] == "fully_sharded");
  const BuiltStep replicated = replicated_study.schedule->build(replicated_study);
  const BuiltStep fully = fully_study.schedule->build(fully_study);
  REQUIRE_NOTHROW(fully.graph.validate());
  const int n = fully_study.cores();
  const double params = double(fully_study.model.params());
  using sim::MemoryCategory;
  for (auto category : {MemoryCategory::Weights, MemoryCategory::Optimizer}) {
    const double all = replicated.graph.resident()[0][std::size_t(category)];
    const double mine = fully.graph.resident()[0][std::size_t(category)];
    CHECK(mine >= all / n);
    CHECK(mine <= all / n + 4.0 * 3 * double(fully_study.model.layers.size()));  // up to padding
  }
  double gathered = 0, scattered = 0, in_flight = 0;
  for (int id = 0; id < fully.graph.size(); ++id) {
    const auto& t = fully.graph.task(id);
    if (t.phase == "weight_allgather") {
      gathered += t.bytes;
      for (const auto& m : t.memory)
        if (m.core == 0) in_flight = std::max(in_flight, m.bytes);
    }
    if (t.phase == "gradient_reduce_scatter") scattered += t.bytes;
    CHECK(t.phase != "gradient_allreduce");
  }
  CHECK(gathered == Approx(2 * 4 * params));  // every layer's weights, fp32, before forward and backward
  CHECK(scattered == Approx(4 * params));     // fp32 gradients once
  // The largest gathered layer in flight: its weights less the core's own shard.
  double largest = 0;
  for (const auto& layer : fully_study.model.layers)
    largest = std::max(largest, 4.0 * double(layer.params()));
  CHECK(in_flight == Approx(largest * (n - 1) / n).epsilon(0.01));
  // Gathered weights are freed after use: over the step they sum to zero on every core.
  double net = 0;
  for (int id = 0; id < fully.graph.size(); ++id)
    for (const auto& m : fully.graph.task(id).memory)
      if (m.core == 0 && m.category == MemoryCategory::Weights) net += m.bytes;
  CHECK(net == Approx(0).margin(1e-6 * params));
  // A bucket size would be ignored: refused, as cross-replica batch norm is.
  j["schedule"]["gradient_bucket_bytes"] = 1e6;
  CHECK_THROWS_WITH(parse_study(j, "test"), Catch::Contains("schedule.gradient_bucket_bytes"));
  j["schedule"].erase("gradient_bucket_bytes");
  j["schedule"]["batch_norm_group"] = 2;
  CHECK_THROWS_WITH(parse_study(j, "test"), Catch::Contains("schedule.weight_update"));
}

TEST_CASE("save_dots keeps the inputs and the matmuls' outputs, and recomputes the other ops",
          "[schedules][remat]") {
  Json j = small_transformer_study();
  j["schedule"]["remat"] = "save_dots";
  const Study dots_study = parse_study(j, "test");
  CHECK(dots_study.schedule->resolved()["remat"] == "save_dots");
  j["schedule"]["remat"] = true;
  const Study full_study = parse_study(j, "test");
  const BuiltStep dots = dots_study.schedule->build(dots_study);
  const BuiltStep full = full_study.schedule->build(full_study);
  REQUIRE_NOTHROW(dots.graph.validate());
  auto phase_sum = [](const BuiltStep& s, const std::string& phase, bool memory) {
    double sum = 0;
    for (int id : s.graph.program(0)) {
      const auto& t = s.graph.task(id);
      if (t.phase != phase) continue;
      if (!memory) sum += t.hardware_flops;
      for (const auto& m : t.memory)
        if (memory && m.category == sim::MemoryCategory::Activations) sum += m.bytes;
    }
    return sum;
  };
  StepBuilder b(dots_study, dots_study.cores());
  double inputs = 0, dot_outputs = 0, stashes = 0, non_dot_flops = 0, forward_flops = 0;
  for (int l = 0; l < int(dots_study.model.layers.size()); ++l) {
    const LayerCost& c = b.cost(l, 8);
    inputs += c.input_bytes;
    dot_outputs += c.saved_output_bytes;
    stashes += c.stash_bytes;
    non_dot_flops += c.partial_forward_hardware_flops;
    forward_flops += c.forward_hardware_flops;
  }
  CHECK(phase_sum(dots, "forward", true) == Approx(inputs + dot_outputs));
  CHECK(phase_sum(dots, "recompute", false) == Approx(non_dot_flops));
  // Attention's scores and context are recomputed on the MXU, the projections are not.
  CHECK(non_dot_flops > 0);
  CHECK(non_dot_flops < 0.5 * forward_flops);
  CHECK(phase_sum(full, "recompute", false) == Approx(forward_flops));
  // Between the two: less kept than without remat, shorter than full remat.
  CHECK(inputs + dot_outputs < stashes);
  CHECK(dots.graph.size() == full.graph.size());
  double dots_s = 0, full_s = 0;
  for (int id : dots.graph.program(0)) dots_s += dots.graph.task(id).seconds;
  for (int id : full.graph.program(0)) full_s += full.graph.task(id).seconds;
  CHECK(dots_s < full_s);
  // While a layer's forward runs, what it computes for the backward beyond what it keeps lives
  // until it ends: the rest of its stash, besides its workspace (what it keeps is not counted
  // twice: the output layer's logits, a kept matmul output, would be).
  for (int id : dots.graph.program(0)) {
    const auto& t = dots.graph.task(id);
    if (t.phase != "forward") continue;
    const LayerCost& c = b.cost(t.layer, 8);
    double transient = 0;
    for (const auto& m : t.memory)
      if (m.category == sim::MemoryCategory::Workspace && m.bytes > 0) transient += m.bytes;
    INFO("layer " << t.layer);
    CHECK(transient == Approx(std::max(c.workspace_bytes, c.stash_bytes - c.input_bytes -
                                                              c.saved_output_bytes + c.workspace_bytes)));
  }
  j["schedule"]["remat"] = "dots";
  CHECK_THROWS_WITH(parse_study(j, "test"),
                    Catch::Contains("schedule.remat") && Catch::Contains("save_dots"));
}

TEST_CASE("the combiner's unit: each weight's reduction, or a layer's together", "[schedules][buckets]") {
  // Two layers, each with two weight-gradient reductions of 6 bytes over "replica"; threshold 10.
  std::vector<mesh::LayerProgram> programs(2);
  for (auto& p : programs)
    for (int k = 0; k < 2; ++k) {
      mesh::Event ev{};
      ev.kind = mesh::Event::GradientAllReduce;
      ev.mesh_dims = {"replica"};
      ev.bytes = 6;
      p.backward.push_back(ev);
    }
  const auto tensors = mesh::gradient_chunks(programs, 10);
  REQUIRE(tensors.size() == 4);  // 6 + 6 > 10: each alone
  const auto layers = mesh::gradient_chunks(programs, 10, {0, -1}, mesh::CombineUnit::Layer);
  REQUIRE(layers.size() == 2);  // a layer's 12 bytes whole, over the threshold: one reduction each
  for (int c = 0; c < 2; ++c) {
    CHECK(layers[std::size_t(c)].bytes == 12);
    REQUIRE(layers[std::size_t(c)].reductions.size() == 2);
    for (const auto& r : layers[std::size_t(c)].reductions) CHECK(r.second == 1 - c);  // the last layer first
  }
  CHECK(mesh::gradient_chunks(programs, 10, {1, 2}, mesh::CombineUnit::Layer).size() == 1);  // layer 1 only
  CHECK(mesh::gradient_chunks(programs, 24, {0, -1}, mesh::CombineUnit::Layer).size() == 1);
}

TEST_CASE("gradient reductions combine in order up to the threshold, a larger one alone",
          "[schedules][buckets]") {
  using Spans = std::vector<std::pair<std::size_t, std::size_t>>;
  CHECK(combine_in_order({}, 10).empty());
  CHECK(combine_in_order({4, 4, 2, 3}, 10) == Spans{{0, 3}, {3, 4}});  // 4 + 4 + 2 = 10 fits exactly
  CHECK(combine_in_order({12, 3, 3, 12}, 10) == Spans{{0, 1}, {1, 3}, {3, 4}});
}

namespace {

/// A save policy as a new one is written (one file of models/save_policies/ and its registry
/// line): here only the feed-forward's first matmul's output is saved.
class SaveFfnIn : public SavePolicy {
 public:
  std::string description() const override { return "keep the feed-forward's first matmul's output"; }
  bool saves(const NamedOp& op) const override { return op.name == "ffn_in"; }
};

}  // namespace

TEST_CASE("a save policy is a rule over a layer's ops: registered by name, a schedule's remat runs it",
          "[schedules][remat]") {
  register_save_policy("test_save_ffn_in", std::make_unique<SaveFfnIn>());
  Json j = Json::parse(R"({
    "hardware": "tpu-v3", "slice": "v3-8", "batch": 64, "optimizer": {"kind": "adam"},
    "model": {"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64},
    "schedule": {"kind": "data_parallel", "remat": "test_save_ffn_in"}})");
  const Study ffn = parse_study(j, "test");
  CHECK(ffn.schedule->resolved()["remat"] == "test_save_ffn_in");
  j["schedule"]["remat"] = "save_dots";
  const Study dots = parse_study(j, "test");
  // Its layers lowered by its rule: the block keeps the input and ffn_in's output only (8
  // examples of 64 positions, 1024 features, bf16), and recomputes every other op of the forward.
  const std::int64_t batch = 8;
  StepBuilder a(ffn, ffn.cores()), b(dots, dots.cores());
  const LayerCost& kept = a.cost(1, batch);
  CHECK(kept.saved_output_bytes == Approx(2.0 * batch * 64 * 1024));
  CHECK(kept.saved_output_bytes < b.cost(1, batch).saved_output_bytes);
  CHECK(kept.partial_forward_hardware_flops > b.cost(1, batch).partial_forward_hardware_flops);
  CHECK(kept.partial_forward_hardware_flops < kept.forward_hardware_flops);
  // An unknown name is refused with the registered ones.
  j["schedule"]["remat"] = "save_nothing";
  try {
    parse_study(j, "test");
    FAIL("an unknown remat policy was accepted");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(),
               Catch::Contains("schedule.remat") && Catch::Contains("\"test_save_ffn_in\" (keep the"));
  }
}

TEST_CASE("MaxText's named-save policies keep the projections they name", "[schedules][remat]") {
  Json j = Json::parse(R"({
    "hardware": "tpu-v3", "slice": "v3-8", "batch": 64, "optimizer": {"kind": "adam"},
    "model": {"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64, "biases": false},
    "schedule": {"kind": "data_parallel"}})");
  auto kept = [&](const char* policy, int layer = 1) {
    j["schedule"]["remat"] = policy;
    const Study s = parse_study(j, "test");
    CHECK(s.schedule->resolved()["remat"] == policy);
    StepBuilder b(s, s.cores());
    return b.cost(layer, 8).saved_output_bytes;
  };
  // Outputs on a core, bf16: out_proj's 8 examples x 64 positions x 256 features; a q, k or v
  // projection's 4 heads of 64, each head's 64 padded to v3's 128 lanes.
  const double out = 8.0 * 64 * 256 * 2, projection = 8.0 * 64 * 4 * 128 * 2;
  CHECK(kept("save_qkv_proj") == Approx(3 * projection));
  // out_proj's output is kept: the recompute of the residual sum the second layer norm reads
  // starts from it.
  CHECK(kept("save_out_proj") == Approx(out));
  CHECK(kept("save_dot_except_mlp") == Approx(3 * projection + out));
  // mlpwo's output is read only by the residual sum, whose backward needs no input: not kept.
  CHECK(kept("save_dot_except_mlpwi") == Approx(3 * projection + out));
  // save_dots keeps the feed-forward's first matmul's output besides (1024 features).
  CHECK(kept("save_dots") == Approx(3 * projection + out + 8.0 * 64 * 1024 * 2));
  // MaxText's minimal is JAX's dots-with-no-batch-dims policy: save_dots.
  CHECK(kept("minimal") == Approx(kept("save_dots")));
  // The context (the attention's output, as wide as a projection) kept too: nothing of the
  // attention recomputed.
  CHECK(kept("save_dot_with_context_except_mlp") == Approx(4 * projection + out));
  CHECK(kept("minimal_flash") == Approx(4 * projection + out + 8.0 * 64 * 1024 * 2));
  // Every dot but the first feed-forward matmul (and the logits, in the output layer).
  CHECK(kept("save_dot_except_logits_ffn1") == Approx(3 * projection + out));
  CHECK(kept("save_dot_except_logits_ffn1", 3) < kept("save_dots", 3));
}
