// Pipeline schedules without the engine: partitioner, placement, program order, validation.
#include <catch2/catch.hpp>
#include <random>
#include <set>

#include "hardware/topology.hpp"
#include "schedules/partitioner.hpp"
#include "schedules/pipeline.hpp"
#include "test_support.hpp"

using namespace tpusim;

namespace {

/// Smallest achievable bottleneck by trying every split (small inputs only).
double brute_force(const std::vector<double>& costs, int stages, std::size_t from = 0) {
  if (stages == 1) {
    double sum = 0;
    for (std::size_t i = from; i < costs.size(); ++i) sum += costs[i];
    return sum;
  }
  double best = 1e300, sum = 0;
  for (std::size_t end = from + 1; end + (stages - 1) <= costs.size(); ++end) {
    sum += costs[end - 1];
    best = std::min(best, std::max(sum, brute_force(costs, stages - 1, end)));
  }
  return best;
}

double bottleneck(const std::vector<double>& costs, const std::vector<int>& sizes) {
  double worst = 0;
  std::size_t i = 0;
  for (int n : sizes) {
    double sum = 0;
    for (int k = 0; k < n; ++k) sum += costs[i++];
    worst = std::max(worst, sum);
  }
  return worst;
}

Study pipeline_study(const std::string& schedule, const std::string& slice = "v3-32", int batch = 64) {
  Json j = Json::parse(R"({"hardware": "tpu-v3",
    "model": {"kind": "transformer", "activation": "relu", "layers": 14, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64},
    "optimizer": {"kind": "adam"}})");
  j["slice"] = slice;
  j["batch"] = batch;
  j["schedule"] = Json::parse(schedule);
  return parse_study(j, "test");
}

}  // namespace

TEST_CASE("identical layers split evenly", "[partition]") {
  CHECK(balanced_partition(std::vector<double>(32, 1.0), 8) == std::vector<int>(8, 4));
  CHECK(balanced_partition(std::vector<double>(5, 1.0), 5) == std::vector<int>(5, 1));
  CHECK(balanced_partition(std::vector<double>(7, 1.0), 1) == std::vector<int>{7});
}

TEST_CASE("the partition is optimal and contiguous (against brute force)", "[partition]") {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> cost(0.1, 10.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + int(rng() % 11);
    const int k = 1 + int(rng() % n);
    std::vector<double> costs(n);
    for (auto& c : costs) c = cost(rng);
    const auto sizes = balanced_partition(costs, k);
    REQUIRE(int(sizes.size()) == k);
    int total = 0;
    for (int s : sizes) {
      REQUIRE(s >= 1);
      total += s;
    }
    REQUIRE(total == n);
    REQUIRE(bottleneck(costs, sizes) == Approx(brute_force(costs, k)).epsilon(1e-9));
  }
}

namespace {

/// The smallest bottleneck over the partitions whose every stage fits (infinity: none fits).
double brute_force_fitting(const std::vector<double>& costs, int stages, const StageFits& fits, int stage = 0,
                           int from = 0) {
  const int n = int(costs.size());
  if (stages == 1) {
    double sum = 0;
    for (int i = from; i < n; ++i) sum += costs[i];
    return fits(stage, from, n) ? sum : 1e300;
  }
  double best = 1e300, sum = 0;
  for (int end = from + 1; end + (stages - 1) <= n; ++end) {
    sum += costs[end - 1];
    if (fits(stage, from, end))
      best = std::min(best, std::max(sum, brute_force_fitting(costs, stages - 1, fits, stage + 1, end)));
  }
  return best;
}

}  // namespace

TEST_CASE("a memory-aware partition is the best among those whose stages fit (against brute force)",
          "[partition][memory]") {
  // Each layer holds some memory; each stage's core has its own room (as 1F1B's early stages
  // hold more micro-batches in flight than its late ones).
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> draw(0.1, 10.0);
  int constrained = 0, infeasible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + int(rng() % 10);
    const int k = 1 + int(rng() % n);
    std::vector<double> costs(n), memory(n), room(k);
    for (auto& c : costs) c = draw(rng);
    for (auto& m : memory) m = draw(rng);
    for (auto& r : room) r = 3 * draw(rng);
    const StageFits fits = [&](int stage, int first, int last) {
      double held = 0;
      for (int i = first; i < last; ++i) held += memory[i];
      return held <= room[stage];
    };
    const double best = brute_force_fitting(costs, k, fits);
    const auto sizes = balanced_partition(costs, k, fits);
    if (best >= 1e300) {
      CHECK(sizes.empty());
      ++infeasible;
      continue;
    }
    REQUIRE(int(sizes.size()) == k);
    for (int s = 0, first = 0; s < k; first += sizes[s], ++s) {
      REQUIRE(sizes[s] >= 1);
      CHECK(fits(s, first, first + sizes[s]));
    }
    CHECK(bottleneck(costs, sizes) == Approx(best).epsilon(1e-9));
    constrained += bottleneck(costs, sizes) > brute_force(costs, k) * (1 + 1e-9) ? 1 : 0;
  }
  // The draws exercise both: memory raising the bottleneck, and nothing fitting.
  CHECK(constrained > 10);
  CHECK(infeasible > 10);
}

TEST_CASE("imbalance is the largest stage over the mean", "[partition]") {
  CHECK(partition_imbalance({1, 1, 1, 1}, {2, 2}) == Approx(0.0));
  CHECK(partition_imbalance({3, 1, 1, 1}, {1, 3}) == Approx(0.0));
  CHECK(partition_imbalance({4, 1, 1}, {1, 2}) == Approx(4.0 / 3.0 - 1.0));
}

TEST_CASE("auto placement: consecutive stages on the same or neighbouring chips", "[pipeline][placement]") {
  for (const char* slice : {"v3-32", "v3-64", "v3-128"}) {
    const auto hw = load_hardware("tpu-v3");
    const SliceSpec s = hw.slices.at(slice);
    const Topology torus(s);
    for (int chips_per_pipeline : {1, 2, 4, 8}) {
      const auto order = pipeline_core_order(s, 2, chips_per_pipeline);
      REQUIRE(int(order.size()) == s.chips() * 2);
      for (std::size_t i = 1; i < order.size(); ++i) {
        if (i % std::size_t(2 * chips_per_pipeline) == 0) continue;  // next pipeline
        INFO(slice << " pipeline of " << chips_per_pipeline << " chips, position " << i);
        CHECK(torus.hops(order[i - 1] / 2, order[i] / 2) <= 1);
      }
    }
  }
}

TEST_CASE("auto placement tiles a 3D slice with boxes walked as snakes", "[pipeline][placement]") {
  // TPU-v4 shapes: 4x4x4 and 2x4x4 chips, one device per chip (megacore) or two.
  for (const auto& shape :
       {std::vector<int>{4, 4, 4}, std::vector<int>{2, 4, 4}, std::vector<int>{4, 4, 8}}) {
    const SliceSpec s = test::slice(shape, {false, false, false});
    const Topology torus(s);
    for (int cpc : {1, 2})
      for (int chips_per_pipeline : {1, 2, 4, 8, 16}) {
        const auto order = pipeline_core_order(s, cpc, chips_per_pipeline);
        REQUIRE(int(order.size()) == s.chips() * cpc);
        REQUIRE(std::set<int>(order.begin(), order.end()).size() == order.size());
        for (std::size_t i = 1; i < order.size(); ++i) {
          if (i % std::size_t(cpc * chips_per_pipeline) == 0) continue;  // next pipeline
          INFO("pipeline of " << chips_per_pipeline << " chips, position " << i);
          CHECK(torus.hops(order[i - 1] / cpc, order[i] / cpc) <= 1);
        }
      }
  }
}

TEST_CASE("auto placement lines replicas up so stage groups form torus lines", "[pipeline][placement]") {
  // K = 8 on v3-32 (4x4 chips): each pipeline fills a row of 4 chips; stage s of the 4 replicas
  // sits in one column.
  const Study s = pipeline_study(R"({"kind": "gpipe", "stages": 8, "microbatches": 4, "replicas": 4})");
  const auto* p = dynamic_cast<const Pipeline*>(s.schedule.get());
  const auto cores = p->placement(s);
  const Topology torus(s.slice);
  for (int stage = 0; stage < 8; ++stage) {
    const int x = torus.coord(cores[0][stage] / 2, 0);
    for (int r = 0; r < 4; ++r) CHECK(torus.coord(cores[r][stage] / 2, 0) == x);
  }
}

TEST_CASE("by_stage placement puts a stage's replicas on neighbouring cores", "[pipeline][placement]") {
  // K = 2, R = 16 on v3-32: stage 0's replicas fill the first 8 chips of the snake (both cores of
  // each), stage 1's the other 8; every core is used once.
  const Study s = pipeline_study(
      R"({"kind": "gpipe", "stages": 2, "microbatches": 2, "replicas": 16, "placement": "by_stage"})");
  const auto* p = dynamic_cast<const Pipeline*>(s.schedule.get());
  const auto cores = p->placement(s);
  const auto order = pipeline_core_order(s.slice, 2, 8);
  std::set<int> used;
  for (int r = 0; r < 16; ++r)
    for (int stage = 0; stage < 2; ++stage) {
      CHECK(cores[r][stage] == order[std::size_t(stage * 16 + r)]);
      used.insert(cores[r][stage]);
    }
  CHECK(used.size() == 32);
  CHECK(p->resolved()["placement"] == "by_stage");
}

TEST_CASE("GPipe program order: all forwards, then backwards last micro-batch first", "[pipeline]") {
  const Study s = pipeline_study(
      R"({"kind": "gpipe", "stages": 2, "microbatches": 3, "remat": true, "placement": [[0, 1]]})", "v3-32",
      48);
  const BuiltStep step = s.schedule->build(s);
  REQUIRE_NOTHROW(step.graph.validate());
  std::vector<std::string> program;
  for (int id : step.graph.program(0)) {
    const auto& t = step.graph.task(id);
    program.push_back(t.phase.str().substr(0, 1) + std::to_string(t.micro_batch));
  }
  // Then the stage's updates, a layer's at a time (the step tail's, schedules/step_tail.hpp).
  REQUIRE(program.size() > 9);
  CHECK(std::vector<std::string>(program.begin(), program.begin() + 9) ==
        std::vector<std::string>{"f0", "f1", "f2", "r2", "b2", "r1", "b1", "r0", "b0"});
  CHECK(std::all_of(program.begin() + 9, program.end(), [](const std::string& t) { return t == "u-1"; }));
}

TEST_CASE("1F1B program order: warm-up, one forward one backward, drain", "[pipeline]") {
  const Study s = pipeline_study(
      R"({"kind": "one_f_one_b", "stages": 3, "microbatches": 4, "remat": false, "placement": [[0, 1, 2]]})");
  const BuiltStep step = s.schedule->build(s);
  REQUIRE_NOTHROW(step.graph.validate());
  auto program = [&](int core) {
    std::string p;
    for (int id : step.graph.program(core)) {
      const auto& t = step.graph.task(id);
      if (t.phase != "update") p += t.phase.str().substr(0, 1) + std::to_string(t.micro_batch) + " ";
    }
    return p;
  };
  CHECK(program(0) == "f0 f1 f2 b0 f3 b1 b2 b3 ");
  CHECK(program(1) == "f0 f1 b0 f2 b1 f3 b2 b3 ");
  CHECK(program(2) == "f0 b0 f1 b1 f2 b2 f3 b3 ");
}

TEST_CASE("interleaved 1F1B program order: Megatron's, micro-batches in groups of K through a stage's chunks",
          "[pipeline][interleaved]") {
  // 16 layers in 4 chunks of 4: chunks 0 and 2 on stage 0 (core 0), 1 and 3 on stage 1 (core 1).
  const Study s =
      pipeline_study(R"({"kind": "one_f_one_b", "stages": 2, "microbatches": 4, "virtual_stages": 2,
                                     "remat": false, "placement": [[0, 1]]})");
  const BuiltStep step = s.schedule->build(s);
  REQUIRE_NOTHROW(step.graph.validate());
  const std::vector<std::string> first_layers = {"embedding", "block3", "block7", "block11"};
  auto program = [&](int core) {
    std::string p;
    for (int id : step.graph.program(core)) {
      const auto& t = step.graph.task(id);
      if (t.phase == "update") continue;
      int chunk = -1;
      for (int c = 0; c < 4; ++c)
        if (t.name.find(first_layers[std::size_t(c)] + "..") != std::string::npos) chunk = c;
      CHECK(t.chunk == chunk / 2);  // the timeline's label: the chunk on its stage
      p += t.phase.str().substr(0, 1) + std::to_string(t.micro_batch) + "c" + std::to_string(chunk) + " ";
    }
    return p;
  };
  CHECK(program(0) == "f0c0 f1c0 f0c2 f1c2 f2c0 b0c2 f3c0 b1c2 f2c2 b0c0 f3c2 b1c0 b2c2 b3c2 b2c0 b3c0 ");
  CHECK(program(1) == "f0c1 f1c1 f0c3 b0c3 f1c3 b1c3 f2c1 b0c1 f3c1 b1c1 f2c3 b2c3 f3c3 b3c3 b2c1 b3c1 ");
  // Every chunk boundary is a transfer (3 per micro-batch each way, the wrap from stage 1 to 0
  // among them); the ideal bubble is (K - 1) / (V M + K - 1).
  int transfers = 0;
  for (int id = 0; id < step.graph.size(); ++id)
    transfers += step.graph.task(id).phase == "activation_transfer" ? 1 : 0;
  CHECK(transfers == 3 * 4);
  CHECK(step.details["bubble_fraction_ideal"].get<double>() == Approx(1.0 / 9.0));
  CHECK(step.details["stages"].size() == 4);
  CHECK(s.schedule->resolved()["virtual_stages"] == 2);
}

TEST_CASE("virtual_stages 1 is plain 1F1B: the same tasks in the same order", "[pipeline][interleaved]") {
  const Study plain = pipeline_study(R"({"kind": "one_f_one_b", "stages": 4, "microbatches": 8})");
  const Study one =
      pipeline_study(R"({"kind": "one_f_one_b", "stages": 4, "microbatches": 8, "virtual_stages": 1})");
  const BuiltStep a = plain.schedule->build(plain), b = one.schedule->build(one);
  REQUIRE(a.graph.size() == b.graph.size());
  for (int id = 0; id < a.graph.size(); ++id) {
    CHECK(a.graph.task(id).name == b.graph.task(id).name);
    CHECK(a.graph.task(id).seconds == b.graph.task(id).seconds);
  }
  CHECK(a.details == b.details);
  CHECK(!one.schedule->resolved().contains("virtual_stages"));
}

TEST_CASE("pipeline graph: transfers per boundary and micro-batch, all-reduce per stage", "[pipeline]") {
  const Study s = pipeline_study(R"({"kind": "gpipe", "stages": 4, "microbatches": 8, "replicas": 2})");
  const BuiltStep step = s.schedule->build(s);
  int activations = 0, gradients = 0, allreduces = 0;
  double reduced = 0;
  for (int id = 0; id < step.graph.size(); ++id) {
    const auto& t = step.graph.task(id);
    activations += t.phase == "activation_transfer";
    gradients += t.phase == "gradient_transfer";
    if (t.kind == sim::TaskKind::Collective) {
      ++allreduces;
      reduced += t.bytes;
      for (const auto& group : t.collective_groups()) CHECK(group.size() == 2);  // a core and its counterpart
    }
  }
  CHECK(activations == 2 * 3 * 8);
  CHECK(gradients == 2 * 3 * 8);
  CHECK(allreduces == 4);
  CHECK(reduced == Approx(4.0 * double(s.model.params())));
  CHECK(step.details["bubble_fraction_ideal"].get<double>() == Approx(3.0 / 11.0));
  CHECK(step.details["micro_batch_size"] == 4);
}

TEST_CASE("a tied copy under weight-update sharding: its gradient's pieces are the reader's",
          "[pipeline][tied]") {
  // The copy is a weight of its reader in the stage programs (tail_programs): reduce-scattered
  // across the replicas with the reader's, each replica updating its piece, then gathered.
  auto build = [](bool shared) {
    Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-32", "batch": 64,
      "model": {"kind": "transformer", "activation": "relu", "layers": 14, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64},
      "optimizer": {"kind": "adam"},
      "schedule": {"kind": "one_f_one_b", "stages": 2, "microbatches": 4, "replicas": 2, "virtual_stages": 2,
                   "weight_update": "sharded"}})");
    j["model"]["shared_embeddings"] = shared;
    const Study s = parse_study(j, "test");
    return s.schedule->build(s);
  };
  const BuiltStep tied = build(true), untied = build(false);
  REQUIRE_NOTHROW(tied.graph.validate());  // every gradient allocated is freed, the copy's too
  auto scattered = [](const BuiltStep& step) {
    double bytes = 0;
    for (int id = 0; id < step.graph.size(); ++id)
      if (step.graph.task(id).phase == "gradient_reduce_scatter") bytes += step.graph.task(id).bytes;
    return bytes;
  };
  CHECK(scattered(tied) == Approx(scattered(untied)));
}

TEST_CASE("a stage reading a table tied to another stage keeps a copy and sums its gradient with the owner's",
          "[pipeline][tied]") {
  // Megatron-LM: the last stage holds a copy of the word embedding the output layer reads, with
  // its gradient and optimizer slots, all-reduced with the first stage's after the reductions
  // across replicas, before either stage's update.
  auto study = [](bool shared, int stages, int replicas = 2) {
    Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-32", "batch": 64,
      "model": {"kind": "transformer", "activation": "relu", "layers": 14, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64},
      "optimizer": {"kind": "adam"},
      "schedule": {"kind": "one_f_one_b", "microbatches": 4, "replicas": 2}})");
    j["model"]["shared_embeddings"] = shared;
    j["schedule"]["stages"] = stages;
    j["schedule"]["replicas"] = replicas;
    return parse_study(j, "test");
  };
  const Study tied = study(true, 2), untied = study(false, 2);
  const BuiltStep t = tied.schedule->build(tied), u = untied.schedule->build(untied);
  const double table = 4.0 * 1000 * 256;  // fp32 [vocab, d_model]
  const Json& last = t.details["stages"][1];
  CHECK(last["tied_copy_of"] == "embedding");
  CHECK(last["tied_copy_bytes"].get<double>() == Approx(table));
  CHECK_FALSE(t.details["stages"][0].contains("tied_copy_of"));
  // The copy weighs what an untied output layer's own table weighs: every core holds the same.
  for (int core = 0; core < t.graph.cores(); ++core)
    CHECK(t.graph.resident_bytes(core) == Approx(u.graph.resident_bytes(core)));
  double reduced_tied = 0, reduced_untied = 0;
  int sums = 0;
  for (int id = 0; id < t.graph.size(); ++id) {
    const auto& task = t.graph.task(id);
    if (task.phase == "gradient_allreduce") reduced_tied += task.bytes;
    if (task.phase != "tied_weight_allreduce") continue;
    ++sums;
    CHECK(task.bytes == Approx(table));
    REQUIRE(task.group.size() == 2);
    int updates = 0;
    t.graph.for_each_successor(id, [&](int next) { updates += t.graph.task(next).phase == "update"; });
    CHECK(updates >= 1);
  }
  for (int id = 0; id < u.graph.size(); ++id)
    if (u.graph.task(id).phase == "gradient_allreduce") reduced_untied += u.graph.task(id).bytes;
  CHECK(sums == 2);                               // one per replica
  CHECK(reduced_tied == Approx(reduced_untied));  // the copy reduced across replicas with its reader
  // One replica: the sum between the two stages' backward and their updates.
  const Study one = study(true, 2, 1);
  const BuiltStep o = one.schedule->build(one);
  int one_sums = 0;
  for (int id = 0; id < o.graph.size(); ++id) {
    if (o.graph.task(id).phase != "tied_weight_allreduce") continue;
    ++one_sums;
    int updates = 0;
    o.graph.for_each_successor(id, [&](int next) { updates += o.graph.task(next).phase == "update"; });
    CHECK(updates == 2);  // each stage's one update
  }
  CHECK(one_sums == 1);
  // One stage holds the table itself: no copy, no sum.
  const Study alone = study(true, 1);
  const BuiltStep a = alone.schedule->build(alone);
  CHECK_FALSE(a.details["stages"][0].contains("tied_copy_of"));
  for (int id = 0; id < a.graph.size(); ++id) CHECK(a.graph.task(id).phase != "tied_weight_allreduce");
}

TEST_CASE("pipeline settings are validated against the study", "[pipeline][config]") {
  auto fails = [](const std::string& schedule, int batch, const std::string& path) {
    INFO(schedule);
    CHECK_THROWS_WITH(pipeline_study(schedule, "v3-32", batch), Catch::Contains(path));
  };
  fails(R"({"kind": "gpipe", "stages": 17, "microbatches": 4})", 64,
        "schedule.stages: found 17");  // > layers
  fails(R"({"kind": "gpipe", "stages": 8, "microbatches": 4, "replicas": 8})", 64,
        "schedule.stages");                                                              // > cores
  fails(R"({"kind": "gpipe", "stages": 2, "microbatches": 5})", 64, "batch: found 64");  // divisibility
  fails(R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "partition": [3, 3]})", 64,
        "schedule.partition");
  fails(R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "partition": [16, 0]})", 64,
        "schedule.partition[1]");
  fails(R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "placement": [[0, 0]]})", 64,
        "schedule.placement[0][1]");
  fails(R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "placement": [[0, 99]]})", 64,
        "schedule.placement[0][1]");
  fails(R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "remat": "yes"})", 64, "schedule.remat");
  fails(R"({"kind": "gpipe", "stages": 2})", 64, "schedule.microbatches: found missing");
  // Interleaving: only 1F1B, micro-batches in groups of the stages, a chunk per K x V, no memory-aware cut.
  fails(R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "virtual_stages": 2})", 64,
        "schedule.virtual_stages: found 2");
  fails(R"({"kind": "one_f_one_b", "stages": 4, "microbatches": 2, "virtual_stages": 2})", 64,
        "schedule.microbatches: found 2, expected a multiple of stages");
  fails(R"({"kind": "one_f_one_b", "stages": 4, "microbatches": 4, "virtual_stages": 8})", 64,
        "schedule.virtual_stages: found 8");
  fails(
      R"({"kind": "one_f_one_b", "stages": 2, "microbatches": 4, "virtual_stages": 2, "partition": [8, 8]})",
      64, "schedule.partition: found [8,8], expected \"balanced\", \"memory_aware\" or an array of 4");
  fails(
      R"({"kind": "one_f_one_b", "stages": 2, "microbatches": 4, "virtual_stages": 2, "partition": "memory_aware"})",
      64, "schedule.partition");
}

TEST_CASE("tensor-parallel stages: groups on one chip, weights split, partial sums over the group",
          "[pipeline][tensor_parallel]") {
  // 14 layers (embedding, 12 blocks, output) in 2 stages x 2 replicas x 2 cores per stage on v3-32.
  const Study s = pipeline_study(
      R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "replicas": 2, "tensor_parallel": 2, "remat": false})");
  const auto* p = dynamic_cast<const Pipeline*>(s.schedule.get());
  REQUIRE(p);
  const auto groups = p->groups(s);
  std::set<int> used;
  for (const auto& replica : groups)
    for (const auto& group : replica) {
      REQUIRE(group.size() == 2);
      CHECK(group[0] / 2 == group[1] / 2);  // the two cores of one chip
      used.insert(group.begin(), group.end());
    }
  CHECK(used.size() == 8);
  const BuiltStep step = s.schedule->build(s);
  int activations = 0, partial_sums = 0;
  double reduced = 0;  // across replicas
  for (int id = 0; id < step.graph.size(); ++id) {
    const auto& t = step.graph.task(id);
    if (t.phase == "activation_transfer") {
      ++activations;
      // Core t of one stage's group to core t of the next stage's: same position in the group.
      bool matched = false;
      for (const auto& replica : groups)
        matched = matched || (replica[0][0] == t.src_core && replica[1][0] == t.dst_core) ||
                  (replica[0][1] == t.src_core && replica[1][1] == t.dst_core);
      CHECK(matched);
    }
    if (t.phase == "tensor_parallel") {
      ++partial_sums;
      CHECK(t.group.size() == 2);
    }
    if (t.phase == "gradient_allreduce") reduced += t.bytes * double(t.collective_groups().size());
  }
  CHECK(activations == 2 * 1 * 4 * 2);  // replicas x boundaries x micro-batches x cores per group
  // Per block: forward partial sums of the attention output and the feed-forward output;
  // backward those of the q, k, v projections' and ffn_in's input gradients; the output layer's
  // logits split over the vocabulary add its softmax statistics and an input gradient.
  CHECK(partial_sums > 0);
  // Each core's shard reduced across the 2 replicas, shard by shard: by hand, the split weights'
  // gradients once in all (half on each core of a group) and the replicated ones (per block two
  // layer norms, 4 d_model, and the output projection's and second feed-forward's biases,
  // 2 d_model; the final layer norm, 2 d_model) once per core of the group: fp32.
  const double d = 256, replicated = 14 * 6 * d + 2 * d;
  CHECK(reduced == Approx(4.0 * (double(s.model.params()) + (2 - 1) * replicated)));
}

TEST_CASE("tensor-parallel settings are validated", "[pipeline][tensor_parallel][config]") {
  auto fails = [](const std::string& schedule, const std::string& path) {
    INFO(schedule);
    CHECK_THROWS_WITH(pipeline_study(schedule), Catch::Contains(path));
  };
  fails(R"({"kind": "gpipe", "stages": 4, "microbatches": 4, "replicas": 4, "tensor_parallel": 4})",
        "schedule.stages");  // 64 cores > 32
  fails(R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "tensor_parallel": 8})",
        "schedule.tensor_layout.heads");  // 4 heads
  fails(
      R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "tensor_parallel": 2, "tensor_layout": ["d_model"]})",
      "schedule.tensor_layout[0]");
  fails(R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "tensor_parallel": 2, "placement": [[0, 1]]})",
        "schedule.placement");
  fails(R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "tensor_parallel": 0})",
        "schedule.tensor_parallel");
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-32", "model": {"kind": "resnet50"}, "batch": 64,
    "optimizer": {"kind": "sgd"}, "schedule": {"kind": "gpipe", "stages": 2, "microbatches": 4, "tensor_parallel": 2,
    "tensor_layout": ["heads"]}})");
  CHECK_THROWS_WITH(parse_study(j, "test"), Catch::Contains("schedule.tensor_layout[0]"));
}
