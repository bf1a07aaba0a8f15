// Engine tests: simulated times against the alpha-beta oracles of shared/HARDWARE.md.
// Each TEST_CASE runs in its own process (catch_discover_tests): one SimGrid engine each.
#include <catch2/catch.hpp>

#include "hardware/topology.hpp"
#include "schedules/mesh.hpp"
#include "schedules/study.hpp"
#include "sim/engine.hpp"
#include "test_support.hpp"

using namespace tpusim;
using namespace tpusim::test;
using sim::CollectiveOp;

namespace {

constexpr double kS = 64.0 * 1024 * 1024;  // payload: 64 MiB

/// Ring half (reduce-scatter or all-gather) along one dimension of p chips.
double ring_half(int p, bool ring, double bytes, double a, double B) {
  if (p <= 1) return 0;
  if (ring) return (p - 1) * (a + bytes / (2.0 * p * B));  // bidirectional ring
  if (p == 2) return a + bytes / (2.0 * B);                // two chips: one exchange
  return (p - 1) * (2 * a + bytes / (p * B));              // folded ring on a line: <= 2 hops per step
}

/// 2D all-reduce over a px x py grid (one core per chip): RS x, AR y on the 1/px shard, AG x.
double allreduce_2d(int px, int py, bool wx, bool wy, double bytes, double a, double B) {
  return 2 * ring_half(px, wx, bytes, a, B) + 2 * ring_half(py, wy, bytes / px, a, B);
}

/// Core 0 of chips (0, 0) .. (n - 1, 0): a row of a v3 torus.
std::vector<int> first_row(int n) {
  std::vector<int> row;
  for (int x = 0; x < n; ++x) row.push_back(x * 2);
  return row;
}

/// Core 0 of every chip.
std::vector<int> chip_leaders(const SliceSpec& s, int cpc) {
  std::vector<int> g;
  for (int chip = 0; chip < s.chips(); ++chip) g.push_back(chip * cpc);
  return g;
}

double run_single(const HardwareSpec& hw, const SliceSpec& s, sim::Task t) {
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int id = g.add(std::move(t));
  const auto r = sim::simulate(g, hw, s);
  return r.tasks[id].end_s - r.tasks[id].start_s;
}

}  // namespace

TEST_CASE("one hop takes latency + bytes / bandwidth", "[engine][oracle]") {
  const auto hw = v3();
  const auto s = slice(4, 4, true, true);
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  const double t = run_single(hw, s, transfer(0, 2, kS));  // chip 0 -> chip 1
  const double oracle = a + kS / B;
  CHECK(t == Approx(oracle).epsilon(1e-9));
  CHECK(t > oracle * (1 - 1e-6));  // not done just before its predicted time
}

TEST_CASE("two flows in one direction on one link share it", "[engine][oracle]") {
  const auto hw = v3();
  const auto s = slice(4, 4, true, true);
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int f1 = g.add(transfer(0, 2, kS));  // chip0 core0 -> chip1 core0
  const int f2 = g.add(transfer(1, 3, kS));  // chip0 core1 -> chip1 core1: same ICI link
  const auto r = sim::simulate(g, hw, s);
  const double oracle = hw.chip.ici_latency_s + 2 * kS / hw.chip.ici_bandwidth_bytes_per_s;
  CHECK(r.tasks[f1].end_s == Approx(oracle).epsilon(1e-9));
  CHECK(r.tasks[f2].end_s == Approx(oracle).epsilon(1e-9));
}

TEST_CASE("opposite directions do not interfere", "[engine][oracle]") {
  const auto hw = v3();
  const auto s = slice(4, 4, true, true);
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int f1 = g.add(transfer(0, 2, kS));
  const int f2 = g.add(transfer(2, 0, kS));
  const auto r = sim::simulate(g, hw, s);
  const double oracle = hw.chip.ici_latency_s + kS / hw.chip.ici_bandwidth_bytes_per_s;
  CHECK(r.tasks[f1].end_s == Approx(oracle).epsilon(1e-9));
  CHECK(r.tasks[f2].end_s == Approx(oracle).epsilon(1e-9));
}

TEST_CASE("a multi-hop transfer pays latency per hop", "[engine][oracle]") {
  const auto hw = v3();
  const auto s = slice(8, 8, false, false);
  const Topology torus(s);
  const int to_chip = torus.rank({5, 3});
  const double t = run_single(hw, s, transfer(0, to_chip * 2, kS));
  CHECK(t == Approx(8 * hw.chip.ici_latency_s + kS / hw.chip.ici_bandwidth_bytes_per_s).epsilon(1e-9));
}

TEST_CASE("SimGrid routes have the torus hop counts", "[engine][topology]") {
  const auto hw = v3();
  for (auto s : {slice(4, 8, false, false)}) {
    const Topology torus(s);
    std::vector<std::pair<int, int>> pairs;
    for (int a = 0; a < s.chips(); a += 3)
      for (int b = 0; b < s.chips(); b += 5)
        if (a != b) pairs.emplace_back(a * 2, b * 2 + 1);
    const auto hops = sim::simgrid_route_hops(hw, s, pairs);
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      INFO("chips " << pairs[i].first / 2 << " -> " << pairs[i].second / 2);
      CHECK(hops[i] == torus.hops(pairs[i].first / 2, pairs[i].second / 2));
    }
  }
}

TEST_CASE("SimGrid routes on a wrapped torus take the short way round", "[engine][topology]") {
  const auto hw = v3();
  const auto s = slice(8, 8, true, true);
  const Topology torus(s);
  std::vector<std::pair<int, int>> pairs;
  for (int b = 1; b < s.chips(); ++b) pairs.emplace_back(0, b * 2);
  const auto hops = sim::simgrid_route_hops(hw, s, pairs);
  for (std::size_t i = 0; i < pairs.size(); ++i) CHECK(hops[i] == torus.hops(0, pairs[i].second / 2));
  CHECK(*std::max_element(hops.begin(), hops.end()) == 8);  // 4 + 4 on an 8x8 torus
}

// Ring and 2D all-reduce on 4x4 and 8x8, with and without wrap-around, one core per chip.
#define ALLREDUCE_2D_CASE(X, Y, WX, WY)                                                                  \
  TEST_CASE("2D all-reduce " #X "x" #Y " wrap " #WX "," #WY " matches the oracle", "[engine][oracle]") { \
    const auto hw = v3();                                                                                \
    const auto s = slice(X, Y, WX, WY);                                                                  \
    const double t = run_single(hw, s, collective(CollectiveOp::AllReduce, chip_leaders(s, 2), kS));     \
    const double oracle =                                                                                \
        allreduce_2d(X, Y, WX, WY, kS, hw.chip.ici_latency_s, hw.chip.ici_bandwidth_bytes_per_s);        \
    CHECK(t == Approx(oracle).epsilon(0.01));                                                            \
  }
ALLREDUCE_2D_CASE(4, 4, true, true)
ALLREDUCE_2D_CASE(4, 4, false, false)
ALLREDUCE_2D_CASE(8, 8, true, true)
ALLREDUCE_2D_CASE(8, 8, false, false)
ALLREDUCE_2D_CASE(8, 8, true, false)

TEST_CASE("1D ring all-reduce along a wrapped row matches the oracle", "[engine][oracle]") {
  const auto hw = v3();
  const auto s = slice(8, 8, true, true);
  const double t = run_single(hw, s, collective(CollectiveOp::AllReduce, first_row(8), kS));
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  CHECK(t == Approx(2 * 7 * (a + kS / (2 * 8 * B))).epsilon(0.01));
}

TEST_CASE("1D ring all-reduce along a line costs about twice the ring", "[engine][oracle]") {
  const auto hw = v3();
  const auto s = slice(8, 8, false, false);
  const double t = run_single(hw, s, collective(CollectiveOp::AllReduce, first_row(8), kS));
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  const double line = 2 * 7 * (2 * a + kS / (8 * B));
  const double ring = 2 * 7 * (a + kS / (2 * 8 * B));
  CHECK(t == Approx(line).epsilon(0.01));
  CHECK(t / ring == Approx(2.0).epsilon(0.05));
}

TEST_CASE("all-reduce over every core adds the on-chip halves", "[engine][oracle]") {
  const auto hw = v3();
  const auto s = slice(4, 4, true, true);
  std::vector<int> all(32);
  for (int c = 0; c < 32; ++c) all[c] = c;
  const double t = run_single(hw, s, collective(CollectiveOp::AllReduce, all, kS));
  const double onchip = hw.chip.onchip_latency_s + (kS / 2) / hw.chip.onchip_bandwidth_bytes_per_s;
  const double oracle = 2 * onchip + allreduce_2d(4, 4, true, true, kS, hw.chip.ici_latency_s,
                                                  hw.chip.ici_bandwidth_bytes_per_s);
  CHECK(t == Approx(oracle).epsilon(0.01));
}

TEST_CASE("reduce-scatter then all-gather costs what the all-reduce costs", "[engine][oracle]") {
  const auto hw = v3();
  const auto s = slice(8, 8, true, true);
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const auto group = chip_leaders(s, 2);
  const int rs = g.add(collective(CollectiveOp::ReduceScatter, group, kS));
  const int ag = g.add(collective(CollectiveOp::AllGather, group, kS));
  g.depend(rs, ag);
  const auto r = sim::simulate(g, hw, s);
  const double oracle =
      allreduce_2d(8, 8, true, true, kS, hw.chip.ici_latency_s, hw.chip.ici_bandwidth_bytes_per_s);
  CHECK(r.tasks[ag].end_s == Approx(oracle).epsilon(0.01));
  CHECK(r.tasks[rs].end_s == Approx(oracle / 2).epsilon(0.01));
}

/// An all-to-all along a wrapping line of p chips (p even), each member sending S/p to every
/// other at once by the shortest route: the busiest link direction carries shifts 1 .. p/2, so
/// (p/2)(p/2 + 1)/2 flows of S/p share it, after at most p/2 hops' latency.
double all_to_all_ring(int p, double bytes, double a, double B) {
  const double half = p / 2.0;
  return half * a + half * (half + 1) / 2 * bytes / (p * B);
}

TEST_CASE("all-to-all along a wrapped row matches its oracle", "[engine][oracle][all_to_all]") {
  const auto hw = v3();
  const auto s = slice(8, 8, true, true);
  const double t = run_single(hw, s, collective(CollectiveOp::AllToAll, first_row(8), kS));
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  CHECK(t == Approx(all_to_all_ring(8, kS, a, B)).epsilon(0.01));
  // Above the bound of its sends alone: each member sends 7/8 of its buffer over its two links of
  // the row (the multi-hop routes load each link more than that).
  CHECK(t > kS * 7 / 8 / (2 * B));
}

TEST_CASE("all-to-all over every core: on-chip, then one torus dimension at a time",
          "[engine][oracle][all_to_all]") {
  // 4x4 chips of 2 cores: the chip's two cores exchange S/2 over the on-chip link, then along x
  // and along y each core's line exchanges (the lines of both cores of a chip share its links:
  // twice the flows of one line).
  const auto hw = v3();
  const auto s = slice(4, 4, true, true);
  std::vector<int> all(32);
  for (int c = 0; c < 32; ++c) all[c] = c;
  const double t = run_single(hw, s, collective(CollectiveOp::AllToAll, all, kS));
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  const double onchip = hw.chip.onchip_latency_s + (kS / 2) / hw.chip.onchip_bandwidth_bytes_per_s;
  const double per_dimension = 2 * a + 2 * 3 * kS / (4 * B);
  CHECK(t == Approx(onchip + 2 * per_dimension).epsilon(0.02));
}

TEST_CASE("compute runs in program order, one task at a time per core", "[engine]") {
  const auto hw = v3();
  const auto s = slice(2, 2, false, false);
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int a = g.add(compute(0, 1.0, "a"));
  const int b = g.add(compute(0, 2.0, "b"));  // no dependency on a, but after it in program order
  const int c = g.add(compute(1, 0.5, "c"));
  const int x = g.add(transfer(1, 0, 1e6));
  g.depend(c, x);
  const int d = g.add(compute(0, 1.0, "d"));  // needs the transfer
  g.depend(x, d);
  const auto r = sim::simulate(g, hw, s);
  CHECK(r.tasks[a].start_s == 0.0);
  CHECK(r.tasks[b].start_s == Approx(1.0));
  CHECK(r.tasks[c].end_s == Approx(0.5));
  CHECK(r.tasks[x].start_s == Approx(0.5));
  CHECK(r.tasks[d].start_s == Approx(3.0));  // core 0 busy until 3 even though the data came earlier
  CHECK(r.step_time_s == Approx(4.0));
  CHECK(r.cores[0].busy_s == Approx(4.0));
  CHECK(r.cores[1].busy_s == Approx(0.5));
}

TEST_CASE("a core waits for a late dependency", "[engine]") {
  const auto hw = v3();
  const auto s = slice(2, 2, false, false);
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int c = g.add(compute(1, 2.0, "producer"));
  const int x = g.add(transfer(1, 0, 8.2e9));  // on-chip: 0.1 s at 82 GB/s + latency
  g.depend(c, x);
  const int d = g.add(compute(0, 1.0, "consumer"));
  g.depend(x, d);
  const auto r = sim::simulate(g, hw, s);
  const double arrival = 2.0 + hw.chip.onchip_latency_s + 8.2e9 / hw.chip.onchip_bandwidth_bytes_per_s;
  CHECK(r.tasks[d].start_s == Approx(arrival).epsilon(1e-9));
  CHECK(r.tasks[d].end_s == Approx(arrival + 1.0).epsilon(1e-9));
}

TEST_CASE("HBM occupancy is tracked over time: peak, breakdown, overflow", "[engine][memory]") {
  auto hw = v3();
  hw.core.hbm_bytes = 1100;
  hw.core.hbm_reserved_bytes = 100;  // the runtime's: 1000 bytes usable
  const auto s = slice(2, 2, false, false);
  sim::TaskGraph g(sim::slice_cores(hw, s));
  using sim::MemoryCategory;
  using W = sim::MemoryEffect::When;
  g.resident(0, MemoryCategory::Weights, 300);
  auto t1 = compute(0, 1.0, "alloc");
  t1.memory = {{0, MemoryCategory::Activations, 500, W::Start}};
  auto t2 = compute(0, 1.0, "spike");
  t2.memory = {{0, MemoryCategory::Workspace, 400, W::Start}, {0, MemoryCategory::Workspace, -400, W::End}};
  auto t3 = compute(0, 1.0, "free");
  t3.memory = {{0, MemoryCategory::Activations, -500, W::End}};
  g.add(t1);
  const int spike = g.add(t2);
  g.add(t3);
  const auto r = sim::simulate(g, hw, s);
  CHECK(r.hbm_capacity_bytes == 1000);
  CHECK(r.cores[0].peak_hbm_bytes == Approx(1200));
  CHECK(r.cores[0].hbm_at_peak[int(MemoryCategory::Weights)] == Approx(300));
  CHECK(r.cores[0].hbm_at_peak[int(MemoryCategory::Activations)] == Approx(500));
  CHECK(r.cores[0].hbm_at_peak[int(MemoryCategory::Workspace)] == Approx(400));
  CHECK(r.cores[0].peak_at_s == Approx(1.0));  // the spike starts when "alloc" ends
  CHECK(r.cores[0].peak_task == spike);
  CHECK_FALSE(r.fits);
  CHECK(r.overflow.core == 0);
  CHECK(r.overflow.task == spike);
  CHECK(r.overflow.time_s == Approx(1.0));
  CHECK(r.overflow.bytes_over == Approx(200));
  CHECK(r.cores[1].peak_hbm_bytes == 0);
}

TEST_CASE("an invalid graph is refused before running", "[engine]") {
  const auto hw = v3();
  const auto s = slice(2, 2, false, false);
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int a = g.add(compute(0, 1.0, "a"));
  const int b = g.add(compute(0, 1.0, "b"));
  g.depend(b, a);  // contradicts core 0's program order: would deadlock
  CHECK_THROWS_AS(sim::simulate(g, hw, s), SimulationError);
}

TEST_CASE("one simulation per process", "[engine]") {
  const auto hw = v3();
  const auto s = slice(2, 2, false, false);
  sim::TaskGraph g(sim::slice_cores(hw, s));
  g.add(compute(0, 1.0));
  sim::simulate(g, hw, s);
  CHECK_THROWS_AS(sim::simulate(g, hw, s), SimulationError);
}

TEST_CASE("a data-parallel step equals forward + backward + exposed all-reduce + update",
          "[engine][oracle][schedules]") {
  // One gradient bucket, so the all-reduce starts after the last backward on every core and
  // nothing overlaps it: the step time follows by hand from the cost model and HARDWARE.md.
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8",
    "model": {"kind": "mlp", "layers": 3, "width": 1024, "input": 1024, "classes": 1000},
    "batch": 256, "optimizer": {"kind": "momentum"},
    "schedule": {"kind": "data_parallel", "gradient_bucket_bytes": 1e12}})");
  const Study s = parse_study(j, "test");
  BuiltStep step = s.schedule->build(s);
  const auto r = sim::simulate(step.graph, s.hardware, s.slice);

  const CostModel cm(s.hardware.core);
  double compute = 0, update = 0;
  for (const auto& layer : s.model.layers) {
    const auto w = layer.work(s.batch / s.cores());
    for (const auto& op : w.forward) compute += cm.cost(op).seconds;
    for (const auto& op : w.backward) compute += cm.cost(op).seconds;
    update += cm.cost(s.optimizer.update_op(s.model, layer)).seconds;
  }
  const double S = 4.0 * double(s.model.params());
  const auto& c = s.hardware.chip;
  const double onchip = c.onchip_latency_s + (S / 2) / c.onchip_bandwidth_bytes_per_s;
  const double a = c.ici_latency_s, B = c.ici_bandwidth_bytes_per_s;
  // v3-8 is 2x2 chips: each dimension is a 2-chip exchange (a + S/(2B)), y on the half shard.
  const double allreduce = 2 * onchip + 2 * (a + S / (2 * B)) + 2 * (a + (S / 2) / (2 * B));
  CHECK(step.details["gradient_buckets"].size() == 1);
  CHECK(r.step_time_s == Approx(compute + allreduce + update).epsilon(1e-6));
  // Memory at the peak: weights + one momentum slot resident; activations of every layer.
  double stash = 0;
  for (const auto& layer : s.model.layers) stash += layer.work(s.batch / s.cores()).stash_bytes;
  CHECK(r.cores[0].hbm_at_peak[int(sim::MemoryCategory::Weights)] == Approx(S));
  CHECK(r.cores[0].hbm_at_peak[int(sim::MemoryCategory::Optimizer)] == Approx(S));
  CHECK(r.cores[0].peak_hbm_bytes >= 2 * S + stash);
}

TEST_CASE("cross-replica batch norm adds each normalization's all-reduce to the step",
          "[engine][oracle][batch_norm]") {
  // Groups of the two cores of a chip: each batch norm's statistics (2 x 4 bytes per channel)
  // are all-reduced over the on-chip link, forward and backward, and the rest of the step waits.
  // A few KiB, under chip.latency_collective_max_bytes: recursive doubling, one exchange of the
  // whole buffer (latency + bytes / bandwidth) where rings took a reduce-scatter and an
  // all-gather of one step each. One gradient bucket: nothing overlaps. By hand:
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8",
    "model": {"kind": "resnet50", "image_size": 32, "classes": 10},
    "batch": 64, "optimizer": {"kind": "momentum"},
    "schedule": {"kind": "data_parallel", "gradient_bucket_bytes": 1e12, "batch_norm_group": 2}})");
  const Study s = parse_study(j, "test");
  BuiltStep step = s.schedule->build(s);
  const auto r = sim::simulate(step.graph, s.hardware, s.slice);
  const auto& c = s.hardware.chip;
  double expected = 0, phase = 0;
  for (const auto& layer : s.model.layers)
    for (const auto channels : layer.work(s.batch / s.cores()).batch_norm_channels)
      expected += 2 * (c.onchip_latency_s + 8.0 * double(channels) / c.onchip_bandwidth_bytes_per_s);
  int collectives = 0;
  for (int id = 0; id < step.graph.size(); ++id)
    if (step.graph.task(id).phase.str().rfind("batch_norm", 0) == 0) {
      phase += r.tasks[id].end_s - r.tasks[id].start_s;
      ++collectives;
    }
  CHECK(collectives == 2 * 53);
  CHECK(phase == Approx(expected).epsilon(1e-4));
}

TEST_CASE("more simultaneous actors than this machine allows is a resource error, not an abort",
          "[engine][resources]") {
  // A compute task on core 0, then an all-reduce over the 16 chips of a 4x4 torus: the core's
  // actor and the collective's fit a limit of 2, the collective's rings (several per phase, of
  // several steps each) do not.
  const auto hw = v3();
  const auto s = slice(4, 4, true, true);
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int work = g.add(compute(0, 1e-3));
  const int reduce = g.add(collective(CollectiveOp::AllReduce, chip_leaders(s, 2), kS));
  g.depend(work, reduce);
  sim::EngineOptions options;
  options.max_simultaneous_actors = 2;
  CHECK_THROWS_AS(sim::simulate(g, hw, s, options), ResourceError);
}

TEST_CASE("more cores than simultaneous actors are refused before any runs", "[engine][resources]") {
  const auto hw = v3();
  const auto s = slice(2, 2, true, true);
  sim::TaskGraph g(sim::slice_cores(hw, s));
  g.add(compute(0, 1e-3));
  g.add(compute(1, 2e-3));  // unlike core 0's: no representative core stands for both
  sim::EngineOptions options;
  options.max_simultaneous_actors = 1;
  CHECK_THROWS_WITH(sim::simulate(g, hw, s, options), Catch::Contains("vm.max_map_count"));
}

TEST_CASE("a tensor-parallel all-reduce decomposed with its matmul hides behind it up to the matmul's time",
          "[engine][oracle][collective_matmul]") {
  // Megatron-style: d_ff and heads split over 4 cores; each partial-sum all-reduce in 4 steps.
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8", "batch": 16,
    "model": {"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 1024, "d_ff": 4096,
              "heads": 8, "seq_len": 256, "vocab": 1024},
    "optimizer": {"kind": "adam"},
    "schedule": {"kind": "mesh", "mesh": [["batch", 2], ["model", 4]],
                 "layout": {"batch": "batch", "d_ff": "model", "heads": "model", "vocab": "model"}}})");
  Study s = parse_study(j, "test");
  s.hardware.core.tensor_collectives_overlap_matmuls = true;
  s.hardware.core.collective_matmul_min_operand_bytes = 0;  // every matmul
  const BuiltStep step = s.schedule->build(s);
  const auto r = sim::simulate(step.graph, s.hardware, s.slice);
  const auto& g = step.graph;
  auto dur = [&](int id) { return r.tasks[id].end_s - r.tasks[id].start_s; };
  int checked = 0, hidden = 0;
  for (int id = 0; id < g.size(); ++id) {
    const auto& body = g.task(id);
    if (body.kind != sim::TaskKind::Collective || body.name.find("(behind its matmul)") == std::string::npos)
      continue;
    // The matmul's first step (core 0's task before it), its other steps, the last piece.
    const auto& program = g.program(0);
    int head = -1;
    for (int p : g.predecessors(id))
      if (g.task(p).core == 0) head = p;
    REQUIRE(head >= 0);
    const auto at = std::find(program.begin(), program.end(), head);
    REQUIRE(at + 1 != program.end());
    const int tail = *(at + 1);
    int last = -1;
    for (int n : g.successors(id))
      if (g.task(n).kind == sim::TaskKind::Collective) last = n;
    REQUIRE(last >= 0);
    CHECK(r.tasks[id].start_s == Approx(r.tasks[head].end_s));    // starts as the first step ends
    CHECK(r.tasks[tail].start_s == Approx(r.tasks[head].end_s));  // the matmul does not wait for it
    CHECK(g.task(last).bytes == Approx(body.bytes / 3));
    // Exposed after the matmul: what of the pieces behind outlasts its other steps, then the last piece.
    const double exposed = r.tasks[last].end_s - r.tasks[tail].end_s;
    CHECK(exposed ==
          Approx(std::max(0.0, r.tasks[id].end_s - r.tasks[tail].end_s) + dur(last)).margin(1e-12));
    CHECK(exposed <= dur(id) + dur(last) + 1e-12);  // never more than in program order
    hidden += exposed < dur(id) + dur(last) - 1e-9 ? 1 : 0;
    ++checked;
  }
  CHECK(checked > 0);
  CHECK(hidden > 0);
}
