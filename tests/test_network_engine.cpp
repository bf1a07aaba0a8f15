// Engine tests of the network layer: 3D collectives against the per-dimension oracle of
// shared/HARDWARE.md, each registered collective algorithm against its own formula, a
// data-parallel step on TPU-v4 between the bandwidth bound and the per-dimension rings, the
// symmetry reduction in 3D, and per-link and per-chip state. One SimGrid engine per test process.
#include <catch2/catch.hpp>

#include "hardware/topology.hpp"
#include "schedules/study.hpp"
#include "sim/collectives/collective_algorithm.hpp"
#include "sim/engine.hpp"
#include "test_support.hpp"

using namespace tpusim;
using namespace tpusim::test;
using sim::CollectiveOp;

namespace {

constexpr double kS = 48.0 * 1024 * 1024;  // payload: 48 MiB

/// TPU-v4 as a megacore study sees it (one device per chip), its collectives run by `algorithms`.
HardwareSpec v4(const std::vector<std::string>& algorithms) {
  HardwareSpec hw = device_view(load_hardware("tpu-v4"), true);
  hw.chip.collective_algorithms = algorithms;
  return hw;
}

std::vector<int> every_core(const HardwareSpec& hw, const SliceSpec& s) {
  std::vector<int> g(std::size_t(sim::slice_cores(hw, s)));
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = int(i);
  return g;
}

/// One half (reduce-scatter or all-gather) of a bidirectional ring of p chips over `bytes`.
double ring_half(int p, double bytes, double a, double B) {
  return p <= 1 ? 0.0 : (p - 1) * (a + bytes / (2.0 * p * B));
}

/// shared/HARDWARE.md's 3D oracle: reduce-scatter along x on S, y on S/p_x, z on S/(p_x p_y),
/// then the all-gathers in reverse, every dimension a whole wrapping ring.
double allreduce_per_dimension(const std::vector<int>& p, double S, double a, double B) {
  double t = 0, shard = S;
  for (int n : p) {
    t += 2 * ring_half(n, shard, a, B);
    shard /= n;
  }
  return t;
}

/// parallel_rings' own formula: k parts of S/k, part i along dimension (i + j) mod k in phase j;
/// each phase lasts its slowest part; twice for an all-reduce.
double allreduce_parallel(const std::vector<int>& p, double S, double a, double B) {
  const std::size_t k = p.size();
  std::vector<double> part(k, S / double(k));
  double t = 0;
  for (std::size_t j = 0; j < k; ++j) {
    double slowest = 0;
    for (std::size_t i = 0; i < k; ++i) {
      const int n = p[(i + j) % k];
      slowest = std::max(slowest, ring_half(n, part[i], a, B));
      part[i] /= n;
    }
    t += 2 * slowest;
  }
  return t;
}

double run_single(const HardwareSpec& hw, const SliceSpec& s, sim::Task t, sim::EngineOptions o = {}) {
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int id = g.add(std::move(t));
  const auto r = sim::simulate(g, hw, s, o);
  return r.tasks[std::size_t(id)].end_s - r.tasks[std::size_t(id)].start_s;
}

}  // namespace

#define ALLREDUCE_3D_CASE(X, Y, Z)                                                                        \
  TEST_CASE("3D bidirectional-ring all-reduce " #X "x" #Y "x" #Z " matches the per-dimension oracle",     \
            "[engine][oracle][network]") {                                                                \
    const auto hw = v4({"hierarchical_rings", "snake_ring"});                                             \
    const auto s = slice({X, Y, Z}, {true, true, true});                                                  \
    const double t = run_single(hw, s, collective(CollectiveOp::AllReduce, every_core(hw, s), kS));       \
    const double oracle =                                                                                 \
        allreduce_per_dimension({X, Y, Z}, kS, hw.chip.ici_latency_s, hw.chip.ici_bandwidth_bytes_per_s); \
    CHECK(t == Approx(oracle).epsilon(0.01));                                                             \
  }
ALLREDUCE_3D_CASE(4, 4, 4)
ALLREDUCE_3D_CASE(4, 4, 8)
ALLREDUCE_3D_CASE(8, 4, 4)

#define PARALLEL_RINGS_CASE(X, Y, Z)                                                                         \
  TEST_CASE("parallel rings " #X "x" #Y "x" #Z " meet their formula and the all-reduce lower bound's order", \
            "[engine][oracle][network]") {                                                                   \
    const auto hw = v4({"parallel_rings", "snake_ring"});                                                    \
    const auto s = slice({X, Y, Z}, {true, true, true});                                                     \
    const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;                           \
    const double t = run_single(hw, s, collective(CollectiveOp::AllReduce, every_core(hw, s), kS));          \
    CHECK(t == Approx(allreduce_parallel({X, Y, Z}, kS, a, B)).epsilon(0.01));                               \
    const double n = double(X) * Y * Z;                                                                      \
    const double bound = 2 * kS * (n - 1) / n / (6 * B);                                                     \
    CHECK(t > bound);                                                                                        \
    CHECK(t < allreduce_per_dimension({X, Y, Z}, kS, a, B));                                                 \
  }
PARALLEL_RINGS_CASE(4, 4, 4)
PARALLEL_RINGS_CASE(4, 4, 8)

TEST_CASE("the snake ring meets its formula on a box whose snake closes through neighbours",
          "[engine][oracle][network]") {
  const auto hw = v4({"snake_ring"});
  const auto s = slice({2, 2, 2}, {false, false, false});
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  const double t = run_single(hw, s, collective(CollectiveOp::AllReduce, every_core(hw, s), kS));
  CHECK(t == Approx(2 * 7 * (a + kS / (8 * B))).epsilon(0.01));
}

TEST_CASE("hierarchical rings on lines (a v4 slice below a cube) cost what folded rings cost",
          "[engine][oracle][network]") {
  const auto hw = v4({"hierarchical_rings", "snake_ring"});
  const auto s = slice({2, 4, 4}, {false, false, false});
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  // x: two chips, one exchange each way; y and z: folded rings of 4 (<= 2 hops a step).
  const double x = a + kS / (2 * B), y = 3 * (2 * a + (kS / 2) / (4 * B)),
               z = 3 * (2 * a + (kS / 8) / (4 * B));
  const double t = run_single(hw, s, collective(CollectiveOp::AllReduce, every_core(hw, s), kS));
  CHECK(t == Approx(2 * (x + y + z)).epsilon(0.01));
}

TEST_CASE(
    "a data-parallel gradient all-reduce on v4-128 megacore lies between the bandwidth bound and "
    "the per-dimension rings",
    "[engine][network]") {
  // ResNet-50's gradients (fp32) all-reduced over the 64 chips of v4-128 with the shipped
  // hardware's algorithms, alone on the network.
  Json j = Json::parse(R"({"hardware": "tpu-v4", "slice": "v4-128", "model": {"kind": "resnet50"},
    "batch": 16384, "optimizer": {"kind": "lars"}, "schedule": {"kind": "data_parallel"}})");
  const Study study = parse_study(j, "test");
  REQUIRE(study.megacore);
  REQUIRE(study.cores() == 64);
  const double S = 4.0 * double(study.model.params());
  const auto& hw = study.hardware;
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  const double t =
      run_single(hw, study.slice, collective(CollectiveOp::AllReduce, every_core(hw, study.slice), S));
  const double bound = 2 * S * 63.0 / 64.0 / (6 * B);
  const double rings = allreduce_per_dimension({4, 4, 4}, S, a, B);
  CHECK(t > bound);
  CHECK(t < rings);
}

TEST_CASE("representative rings in 3D give the full simulation's times", "[engine][network][symmetry]") {
  // The same two collectives (every chip, then a family of z pillars) on a 4x4x4 torus: the
  // representative simulation (here) and the full one (record the time and compare with the
  // per-dimension oracle the full run met above) agree to 1e-9 of the oracle's own terms.
  const auto hw = v4({"parallel_rings", "hierarchical_rings", "snake_ring"});
  const auto s = slice({4, 4, 4}, {true, true, true});
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int all = g.add(collective(CollectiveOp::AllReduce, every_core(hw, s), kS));
  sim::Task pillars = collective(CollectiveOp::AllReduce, {}, kS);
  for (int x = 0; x < 4; ++x)
    for (int y = 0; y < 4; ++y) {
      pillars.groups.emplace_back();
      for (int z = 0; z < 4; ++z) pillars.groups.back().push_back(x + 4 * y + 16 * z);
    }
  const int fam = g.add(std::move(pillars));
  g.depend(all, fam);
  const auto r = sim::simulate(g, hw, s);
  REQUIRE(r.symmetric_collectives);
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  CHECK(r.tasks[std::size_t(all)].end_s == Approx(allreduce_parallel({4, 4, 4}, kS, a, B)).epsilon(1e-9));
  CHECK(r.tasks[std::size_t(fam)].end_s - r.tasks[std::size_t(fam)].start_s ==
        Approx(2 * ring_half(4, kS, a, B)).epsilon(1e-9));
}

TEST_CASE("the same step simulated in full gives the representative times", "[engine][network][symmetry]") {
  const auto hw = v4({"parallel_rings", "hierarchical_rings", "snake_ring"});
  const auto s = slice({4, 4, 4}, {true, true, true});
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int all = g.add(collective(CollectiveOp::AllReduce, every_core(hw, s), kS));
  sim::EngineOptions o;
  o.symmetric_collectives = false;
  const auto r = sim::simulate(g, hw, s, o);
  REQUIRE_FALSE(r.symmetric_collectives);
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  CHECK(r.tasks[std::size_t(all)].end_s == Approx(allreduce_parallel({4, 4, 4}, kS, a, B)).epsilon(1e-9));
}

TEST_CASE("a link at half bandwidth slows the flows crossing it, and only them", "[engine][network][state]") {
  const auto hw = v4({"hierarchical_rings", "snake_ring"});
  const auto s = slice({4, 4, 4}, {true, true, true});
  const Topology t(s);
  sim::EngineOptions o;
  o.network.link_bandwidth_scale.assign(std::size_t(t.link_id_bound()), 1.0);
  o.network.link_bandwidth_scale[std::size_t(t.link_id(0, LinkDirection{2, true}))] = 0.5;  // chip 0 -> +z
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int slow = g.add(transfer(0, t.rank({0, 0, 1}), kS));
  const int fast = g.add(transfer(0, t.rank({1, 0, 0}), kS));
  const auto r = sim::simulate(g, hw, s, o);
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  CHECK(r.tasks[std::size_t(slow)].end_s == Approx(a + kS / (0.5 * B)).epsilon(1e-9));
  CHECK(r.tasks[std::size_t(fast)].end_s == Approx(a + kS / B).epsilon(1e-9));
}

TEST_CASE("a degraded link makes the symmetry proof answer none, and the full simulation pays for it",
          "[engine][network][state]") {
  const auto hw = v4({"hierarchical_rings", "snake_ring"});
  const auto s = slice({4, 4, 4}, {true, true, true});
  const Topology t(s);
  sim::EngineOptions o;
  o.network.link_bandwidth_scale.assign(std::size_t(t.link_id_bound()), 1.0);
  o.network.link_bandwidth_scale[std::size_t(t.link_id(t.rank({1, 2, 3}), LinkDirection{0, true}))] = 0.25;
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int all = g.add(collective(CollectiveOp::AllReduce, every_core(hw, s), kS));
  const auto r = sim::simulate(g, hw, s, o);
  CHECK_FALSE(r.symmetric_collectives);
  CHECK_THAT(r.symmetry, Catch::StartsWith("none: the links are not uniform"));
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  CHECK(r.tasks[std::size_t(all)].end_s > 1.2 * allreduce_per_dimension({4, 4, 4}, kS, a, B));
}

TEST_CASE("a chip at half speed takes twice as long over its compute", "[engine][network][state]") {
  const auto hw = v4({"hierarchical_rings", "snake_ring"});
  const auto s = slice({2, 2, 1}, {false, false, false});
  sim::EngineOptions o;
  o.network.chip_speed_scale = {1.0, 0.5, 1.0, 1.0};
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int normal = g.add(compute(0, 1e-3));
  const int slow = g.add(compute(1, 1e-3));
  const auto r = sim::simulate(g, hw, s, o);
  CHECK(r.tasks[std::size_t(normal)].end_s == Approx(1e-3).epsilon(1e-12));
  CHECK(r.tasks[std::size_t(slow)].end_s == Approx(2e-3).epsilon(1e-12));
  CHECK(r.cores[1].busy_s == Approx(2e-3).epsilon(1e-12));
}

TEST_CASE("a chip's HBM scaled apart from its compute stretches only the part HBM binds",
          "[engine][network][state]") {
  // Each task 1 ms, 0.6 ms of it HBM-bound. Chip 1: compute at 0.5, HBM as specified; chip 2:
  // compute as specified, HBM at 0.25; chip 3: both at 0.5 (the whole task, as a throttled chip).
  const auto hw = v4({"hierarchical_rings", "snake_ring"});
  const auto s = slice({2, 2, 1}, {false, false, false});
  sim::EngineOptions o;
  o.network.chip_speed_scale = {1.0, 0.5, 1.0, 0.5};
  o.network.chip_hbm_scale = {1.0, 1.0, 0.25, 0.5};
  CHECK_FALSE(o.network.uniform());
  sim::TaskGraph g(sim::slice_cores(hw, s));
  std::vector<int> ids;
  for (int core = 0; core < 4; ++core) {  // a core per chip
    sim::Task t = compute(core, 1e-3);
    t.hbm_s = 0.6e-3;
    ids.push_back(g.add(std::move(t)));
  }
  const auto r = sim::simulate(g, hw, s, o);
  CHECK(r.tasks[std::size_t(ids[0])].end_s == Approx(1e-3).epsilon(1e-12));
  CHECK(r.tasks[std::size_t(ids[1])].end_s == Approx(0.4e-3 / 0.5 + 0.6e-3).epsilon(1e-12));
  CHECK(r.tasks[std::size_t(ids[2])].end_s == Approx(0.4e-3 + 0.6e-3 / 0.25).epsilon(1e-12));
  CHECK(r.tasks[std::size_t(ids[3])].end_s == Approx(2e-3).epsilon(1e-12));
}

TEST_CASE("a slow chip among data-parallel replicas: one replica of each kind simulated",
          "[engine][network][state]") {
  // A replica per device of a 4x4x2 torus of v4 chips, each a forward and a backward, then the
  // gradients all-reduced over all; chip 9 at 0.7 of the speed. A normal
  // replica and one of chip 9's are simulated; every replica's times follow its kind's, and the
  // all-reduce waits for the slow chip (tests/cli/perturbations.sh compares with the full
  // simulation of a study end to end).
  const auto hw = v4({"hierarchical_rings", "snake_ring"});
  const auto s = slice({4, 4, 2}, {true, true, false});
  sim::TaskGraph g(sim::slice_cores(hw, s));
  std::vector<int> last, all;
  for (int c = 0; c < g.cores(); ++c) {
    const int f = g.add(compute(c, 1e-3));
    const int b = g.add(compute(c, 2e-3));
    g.depend(f, b);
    last.push_back(b);
    all.push_back(c);
  }
  const int ar = g.add(collective(CollectiveOp::AllReduce, all, 8e6));
  for (int b : last) g.depend(b, ar);
  sim::EngineOptions o;
  o.network.chip_speed_scale.assign(32, 1.0);
  o.network.chip_speed_scale[9] = 0.7;
  const auto r = sim::simulate(g, hw, s, o);
  CHECK_THAT(r.simulation, Catch::StartsWith("one of each of 2 kinds (by chip speed) of " +
                                             std::to_string(g.cores()) + " congruent clusters of 1 cores"));
  CHECK(r.tasks_simulated == 2 * 2 + 1);
  for (int c = 0; c < g.cores(); ++c) {
    const double speed = c / hw.chip.cores == 9 ? 0.7 : 1.0;
    CHECK(r.tasks[std::size_t(last[std::size_t(c)])].end_s == Approx(3e-3 / speed).epsilon(1e-12));
    CHECK(r.cores[std::size_t(c)].busy_s == Approx(3e-3 / speed).epsilon(1e-12));
  }
  CHECK(r.tasks[std::size_t(ar)].start_s == Approx(3e-3 / 0.7).epsilon(1e-12));
}

TEST_CASE("a tiny all-reduce over 64 chips costs its latency-optimal formula", "[engine][oracle][network]") {
  // Batch-norm statistics' size (a few KiB) over a 4x4x4 cube of v4: recursive doubling, 6 steps
  // of 1, 2 (the far side of a ring of 4), 1, 2, 1, 2 hops, each moving the buffer once.
  const auto hw = v4({"recursive_doubling", "parallel_rings", "hierarchical_rings", "snake_ring"});
  const auto s = slice({4, 4, 4}, {true, true, true});
  const double a = hw.chip.ici_latency_s, B = hw.chip.ici_bandwidth_bytes_per_s;
  const double tiny = 4096;
  REQUIRE(tiny <= hw.chip.latency_collective_max_bytes);
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int id = g.add(collective(CollectiveOp::AllReduce, every_core(hw, s), tiny));
  const auto r = sim::simulate(g, hw, s, {});
  CHECK(r.collective_algorithms.at(id) == "recursive_doubling");
  const double t = r.tasks[std::size_t(id)].end_s - r.tasks[std::size_t(id)].start_s;
  CHECK(t == Approx(9 * a + 6 * tiny / B).epsilon(0.1));
  CHECK(t < 0.6 * allreduce_parallel({4, 4, 4}, tiny, a, B));  // the rings: 2 x 3 x 3 hop latencies
}

TEST_CASE("a large all-reduce is unchanged by recursive doubling in the list", "[engine][oracle][network]") {
  // 48 MiB is far above the switch: parallel rings run it, at their formula.
  const auto hw = v4({"recursive_doubling", "parallel_rings", "hierarchical_rings", "snake_ring"});
  const auto s = slice({4, 4, 4}, {true, true, true});
  sim::TaskGraph g(sim::slice_cores(hw, s));
  const int id = g.add(collective(CollectiveOp::AllReduce, every_core(hw, s), kS));
  const auto r = sim::simulate(g, hw, s, {});
  CHECK(r.collective_algorithms.at(id) == "parallel_rings");
  const double t = r.tasks[std::size_t(id)].end_s - r.tasks[std::size_t(id)].start_s;
  CHECK(t ==
        Approx(allreduce_parallel({4, 4, 4}, kS, hw.chip.ici_latency_s, hw.chip.ici_bandwidth_bytes_per_s))
            .epsilon(0.01));
}

namespace {

/// Across slices (Topology::join_slices): the ring over S slices of each core's piece, 2 (S - 1)
/// steps of piece / S, k cores sharing their host's network card.
double dcn_oracle(int slices, double piece, int k, const DcnSpec& dcn) {
  return 2.0 * (slices - 1) * (dcn.latency_s + k * piece / (slices * dcn.nic_bandwidth_bytes_per_s));
}

struct Timed {
  sim::TaskTiming task;
  sim::DcnPhase dcn;
};

/// One reduction across `slices` slices of a 4x4x4 cube of v4 (64 chips, a host per 2x2x1 chips),
/// simulated: its task's times and its phase over the data-center network.
Timed across_slices(CollectiveOp op, int slices, bool symmetric) {
  const auto hw = v4({"parallel_rings", "hierarchical_rings", "snake_ring"});
  const auto s = slice({4, 4, 4}, {true, true, true});
  sim::TaskGraph g(sim::slice_cores(hw, s));
  sim::Task t = collective(op, every_core(hw, s), kS);
  t.across_slices = true;
  const int id = g.add(std::move(t));
  sim::EngineOptions o;
  o.slices = slices;
  o.symmetric_collectives = symmetric;
  const auto r = sim::simulate(g, hw, s, o);
  CHECK(r.collective_algorithms.at(id) == "parallel_rings+dcn_rings");
  REQUIRE(r.dcn_phases.size() == 1);
  CHECK(r.dcn_phases[0].task == id);
  return {r.tasks[std::size_t(id)], r.dcn_phases[0]};
}

}  // namespace

TEST_CASE("across 2 slices an all-reduce adds the DCN rings' formula to its rings",
          "[engine][oracle][network]") {
  const auto hw = v4({"parallel_rings"});
  const auto [t, phase] = across_slices(CollectiveOp::AllReduce, 2, true);
  const double dcn = dcn_oracle(2, kS / 64, 4, hw.dcn);
  CHECK(phase.end_s - phase.start_s == Approx(dcn).epsilon(0.05));
  // Reduce-scatter inside the slice, the DCN phase, all-gather inside: the slice's all-reduce plus it.
  const double ici =
      allreduce_parallel({4, 4, 4}, kS, hw.chip.ici_latency_s, hw.chip.ici_bandwidth_bytes_per_s);
  CHECK(t.end_s - t.start_s == Approx(ici + dcn).epsilon(0.05));
}

TEST_CASE("across 4 slices a reduce-scatter ends with the DCN rings, flow by flow as represented",
          "[engine][oracle][network]") {
  const auto hw = v4({"parallel_rings"});
  const auto [t, phase] = across_slices(CollectiveOp::ReduceScatter, 4, false);
  CHECK(phase.end_s - phase.start_s == Approx(dcn_oracle(4, kS / 64, 4, hw.dcn)).epsilon(0.05));
  CHECK(phase.end_s == Approx(t.end_s).epsilon(1e-12));  // no all-gather after it
}
