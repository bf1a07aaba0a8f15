// The TPU core cost model: padding to the MXU, the HBM roofline, fusion, overhead.
#include <catch2/catch.hpp>
#include <cmath>

#include "hardware/cost_model.hpp"
#include "test_support.hpp"

using namespace tpusim;

TEST_CASE("a 129-wide matmul costs like a 256-wide one", "[cost]") {
  const CostModel m(test::v3().core);
  const auto c129 = m.cost(dense_op("a", 4096, 129, 129, 2, 2));
  const auto c256 = m.cost(dense_op("b", 4096, 256, 256, 2, 2));
  const auto c128 = m.cost(dense_op("c", 4096, 128, 128, 2, 2));
  CHECK(c129.mxu_s == Approx(c256.mxu_s));
  CHECK(c128.mxu_s - c128.grid_overhead_s == Approx((c256.mxu_s - c256.grid_overhead_s) / 4));
  CHECK(c129.hardware_flops == Approx(2.0 * 4096 * 256 * 256));
  CHECK(c129.model_flops == Approx(2.0 * 4096 * 129 * 129));
}

TEST_CASE("on v6e's 256-wide MXUs a 128-wide matmul costs as a 256-wide one, on v5e a quarter",
          "[cost][today]") {
  const CostModel v6e(load_hardware("tpu-v6e").core), v5e(load_hardware("tpu-v5e").core);
  const auto narrow = v6e.cost(dense_op("a", 4096, 128, 128, 2, 2));
  const auto wide = v6e.cost(dense_op("b", 4096, 256, 256, 2, 2));
  CHECK(narrow.mxu_s == Approx(wide.mxu_s));
  CHECK(narrow.hardware_flops == Approx(2.0 * 4096 * 256 * 256));
  CHECK(narrow.model_flops == Approx(2.0 * 4096 * 128 * 128));
  const auto narrow5 = v5e.cost(dense_op("a", 4096, 128, 128, 2, 2));
  const auto wide5 = v5e.cost(dense_op("b", 4096, 256, 256, 2, 2));
  CHECK(narrow5.hardware_flops == Approx(wide5.hardware_flops / 4));
}

TEST_CASE("the streamed dimension pads to 8 rows", "[cost]") {
  const CostModel m(test::v3().core);
  CHECK(m.cost(dense_op("a", 1, 1024, 1024, 2, 2)).hardware_flops == Approx(2.0 * 8 * 1024 * 1024));
  CHECK(m.cost(dense_op("a", 9, 1024, 1024, 2, 2)).hardware_flops == Approx(2.0 * 16 * 1024 * 1024));
}

TEST_CASE("a large matmul is MXU-bound at the derived peak", "[cost]") {
  const auto hw = test::v3();
  const CostModel m(hw.core);
  const auto c = m.cost(dense_op("big", 8192, 8192, 8192, 2, 2));
  CHECK(std::string(c.bound) == "mxu");
  // 16 x 8 x 8 tiles of 512 x 1024 x 1024, each paying 500 cycles at 940 MHz.
  CHECK(c.grid_steps == 1024);
  CHECK(
      c.seconds ==
      Approx(2.0 * 8192 * 8192 * 8192 / 61.6e12 + 1024 * 500 / 940e6 + hw.core.op_overhead_s).epsilon(0.005));
}

TEST_CASE("what a matmul's grid steps add: all their cost where the MXU binds, none where HBM hides it",
          "[cost]") {
  const CostModel m(test::v3().core);
  const auto big = m.cost(dense_op("big", 8192, 8192, 8192, 2, 2));
  REQUIRE(std::string(big.bound) == "mxu");
  CHECK(big.grid_added_s == Approx(big.grid_overhead_s));
  // A thin matmul over a large weight is HBM-bound: its one grid step hides under the transfer.
  const auto thin = m.cost(dense_op("thin", 8, 8192, 8192, 2, 2));
  REQUIRE(std::string(thin.bound) == "hbm");
  REQUIRE(thin.hbm_s > thin.mxu_s);
  CHECK(thin.grid_added_s == 0);
  // Vector work has no grid.
  CHECK(m.cost(vector_op("relu", 1e6, 1, 2, false)).grid_added_s == 0);
}

TEST_CASE("a matmul steps through tiles that fill the full tile's working set", "[cost]") {
  const CostModel m(test::v3().core);
  const double budget = 512.0 * 1024 + 1024.0 * 1024 + 512.0 * 1024;
  // Narrow depth and width (a 3x3 convolution of 64 channels: 576 pads to 640, 64 to 128): the
  // rows grow into the room left, floor((budget - 640 x 128) / (640 + 128)) = 2624 of them.
  REQUIRE(std::floor((budget - 640 * 128) / 768 / 8) * 8 == 2624);
  CHECK(m.grid_steps(dense_op("conv", 100000, 576, 64, 2, 2)) == std::ceil(100000 / 2624.0));
  // Rows and width whole (a weight gradient over many pixels): the depth grows instead.
  const double depth = std::floor((budget - 576.0 * 128) / (576 + 128) / 128) * 128;
  CHECK(m.grid_steps(dense_op("dw", 576, 100000, 64, 2, 2)) == std::ceil(100096 / depth));
  // Independent products each have their grid; a computed share scales it; nothing to multiply,
  // no grid (and no NaN).
  Op scores = batched_matmul_op("scores", 24, 2048, 256, 2048, 2);
  const double one = m.grid_steps(batched_matmul_op("one", 1, 2048, 256, 2048, 2));
  CHECK(m.grid_steps(scores) == 24 * one);
  scores.computed_fraction = 0.5;
  CHECK(m.grid_steps(scores) == 12 * one);
  const auto empty = m.cost(dense_op("empty", 0, 1024, 1024, 2, 2));
  CHECK(empty.grid_steps == 0);
  CHECK(empty.mxu_s == 0);
}

TEST_CASE("the grid steps' fixed cost reproduces the matmul guide's measured efficiencies", "[cost]") {
  // shared/HARDWARE.md "Matmul efficiency" (TPU v5e: 4 MXUs of 128 x 128, 1.5 GHz, 197 TFLOP/s),
  // dispatch (0.1 ms) taken out: 8192^3 in 6.05 ms by XLA's matmul, 91.5 ms with 128^3 blocks.
  auto core = load_hardware("tpu-v4").core;
  core.clock_hz = 1.5e9;
  REQUIRE(core.peak_matmul_flops_per_s() == Approx(197e12).epsilon(0.005));
  const Op big = dense_op("big", 8192, 8192, 8192, 2, 2);
  const auto efficiency = [&](const CoreSpec& c) {
    const auto cost = CostModel(c).cost(big);
    return cost.hardware_flops / c.peak_matmul_flops_per_s() / cost.mxu_s;
  };
  CHECK(efficiency(core) == Approx(8192.0 / (8192 + 500)));              // a tile's 8192 cycles, and 500 more
  CHECK(efficiency(core) == Approx(5.58 / (6.05 - 0.1)).epsilon(0.01));  // XLA's, measured
  auto small_blocks = core;
  small_blocks.matmul_tile_rows = small_blocks.matmul_tile_depth = small_blocks.matmul_tile_cols = 128;
  CHECK(efficiency(small_blocks) == Approx(5.58 / (91.5 - 0.1)).epsilon(0.05));  // measured
  // A chip of two TensorCores as one device splits the grid between them: half the fixed cost.
  auto mega = core;
  mega.tensor_cores = 2;
  CHECK(CostModel(mega).cost(big).grid_overhead_s == Approx(CostModel(core).cost(big).grid_overhead_s / 2));
}

TEST_CASE("a low-intensity op is memory-bound and scales with bytes", "[cost]") {
  const auto hw = test::v3();
  const CostModel m(hw.core);
  const auto small = m.cost(vector_op("add", 1e8, 1, 2, false));
  const auto large = m.cost(vector_op("add", 2e8, 1, 2, false));
  CHECK(std::string(small.bound) == "hbm");
  CHECK(small.hbm_s == Approx(2 * 1e8 * 2 / hw.core.sustained_hbm_bytes_per_s()));
  CHECK(large.seconds - hw.core.op_overhead_s == Approx(2 * (small.seconds - hw.core.op_overhead_s)));
  // A skinny matmul (matrix-vector) is memory-bound too.
  CHECK(std::string(m.cost(dense_op("gemv", 8, 8192, 8192, 2, 4)).bound) == "hbm");
}

TEST_CASE("HBM traffic moves at the sustained fraction of the pin bandwidth", "[cost]") {
  // TPU v3: 900 GB/s per chip, 450 per core, 90 % sustained: 405 GB/s. Adding 1e8 bf16 values
  // reads and writes 4e8 bytes: 0.988 ms, where the pin bandwidth alone would say 0.889 ms.
  auto core = test::v3().core;
  REQUIRE(core.hbm_sustained_fraction == 0.9);
  const Op add = vector_op("add", 1e8, 1, 2, false);
  CHECK(CostModel(core).cost(add).hbm_s == Approx(4e8 / 405e9));
  core.hbm_sustained_fraction = 1.0;
  CHECK(CostModel(core).cost(add).hbm_s == Approx(4e8 / 450e9));
}

TEST_CASE("fusible element-wise ops cost only their vector time when fusion is on", "[cost]") {
  auto core = test::v3().core;
  const Op relu = vector_op("relu", 1e8, 1, 2, true);
  const auto fused = CostModel(core).cost(relu);
  CHECK(fused.hbm_s == 0);
  CHECK(fused.seconds == Approx(1e8 / core.vector_ops_per_s()));
  core.fuse_elementwise = false;
  const auto unfused = CostModel(core).cost(relu);
  CHECK(unfused.seconds > fused.seconds * 2);
}

TEST_CASE("every op pays the fixed overhead", "[cost]") {
  const auto core = test::v3().core;
  CHECK(CostModel(core).cost(memory_op("tiny", 1)).seconds == Approx(core.op_overhead_s).epsilon(0.01));
}

TEST_CASE("a normalization's backward is two kernels and five passes over its tensor", "[cost]") {
  // Oracle, by hand: 1e8 bf16 elements; the gradient-statistics kernel reads dy and x (2 passes),
  // the input-gradient kernel reads dy and x and writes dx (3 passes); each kernel pays the
  // per-op overhead once; 16 vector operations per element over both. HBM sustains 405 GB/s of
  // its 450 (90 %).
  const auto core = test::v3().core;
  const OpCost c = CostModel(core).cost(multipass_op("bn_grad", 1e8, 2, MultiPass::NormalizationBackward));
  const double hbm = 5 * 1e8 * 2 / 405e9, vpu = 16 * 1e8 / (8 * 128 * 940e6);
  CHECK(c.hbm_s == Approx(hbm));
  CHECK(c.vpu_s == Approx(vpu));
  CHECK(c.seconds == Approx(std::max(hbm, vpu) + 2 * core.op_overhead_s));
  // The forward: a statistics kernel (read) and a normalizing kernel (read, write): 3 passes.
  CHECK(CostModel(core).cost(multipass_op("bn", 1e8, 2, MultiPass::NormalizationForward)).hbm_s ==
        Approx(3 * 1e8 * 2 / 405e9));
  // A softmax: maximum, sum of exponentials, normalize: 3 kernels, 4 passes.
  const OpCost sm = CostModel(core).cost(multipass_op("softmax", 1e8, 2, MultiPass::SoftmaxForward));
  CHECK(sm.hbm_s == Approx(4 * 1e8 * 2 / 405e9));
  CHECK(sm.seconds == Approx(std::max(sm.hbm_s, sm.vpu_s) + 3 * core.op_overhead_s));
}

TEST_CASE("the multi-pass kernels are hardware figures: more passes cost more", "[cost]") {
  auto core = test::v3().core;
  const Op bn = multipass_op("bn", 1e8, 2, MultiPass::NormalizationForward);
  const double before = CostModel(core).cost(bn).hbm_s;
  core.normalization_forward.kernels = {{1, 0}, {1, 0}, {1, 1}};  // a two-pass variance
  CHECK(CostModel(core).cost(bn).hbm_s == Approx(before * 4 / 3));
}

TEST_CASE("random numbers cost the core's figure per element on the vector unit", "[cost]") {
  // Oracle, by hand: 1e8 elements, 3 operations each plus one random number at 5 operations
  // (the figure set here) = 8e8 operations on 8 x 128 ALUs at 940 MHz.
  auto core = test::v3().core;
  core.random_number_vpu_ops = 5;
  Op drop = vector_op("dropout", 1e8, 3, 2, false);
  drop.random_numbers_per_element = 1;
  CHECK(CostModel(core).cost(drop).vpu_s == Approx(8e8 / (8 * 128 * 940e6)));
}

namespace {
/// `hw`'s core with its matmuls in `p`.
CostModel at_precision(std::string hw, MatmulPrecision p) {
  CoreSpec core = load_hardware(hw).core;
  core.matmul_precision = p;
  return CostModel(core);
}
}  // namespace

TEST_CASE("on v5e an MXU-bound matmul runs twice as fast in int8, reading its operands at one byte",
          "[cost][today][precision]") {
  const CostModel bf16 = at_precision("tpu-v5e", MatmulPrecision::Bf16);
  const CostModel int8 = at_precision("tpu-v5e", MatmulPrecision::Int8);
  const Op big = dense_op("big", 8192, 8192, 8192, 2, 4);  // bf16 activations, fp32 weights
  CHECK_FALSE(bf16.quantized(big));
  const auto q = int8.quantized(big);
  REQUIRE(q);
  const OpCost b = bf16.cost(big), i = int8.cost(q->matmul);
  REQUIRE(std::string(b.bound) == "mxu");
  REQUIRE(std::string(i.bound) == "mxu");
  // The products' time halves; the grid steps' fixed cost does not.
  CHECK(i.mxu_s - i.grid_overhead_s == Approx((b.mxu_s - b.grid_overhead_s) / 2));
  CHECK(i.grid_overhead_s == Approx(b.grid_overhead_s));
  CHECK(i.hardware_flops == Approx(b.hardware_flops));
  CHECK(i.precision_saved_s == Approx((b.mxu_s - b.grid_overhead_s) / 2));
  // Operands: 8192^2 at 2 and at 4 bytes become 1 byte each; the bf16 output stays.
  const double e = 8192.0 * 8192.0;
  CHECK(big.bytes == Approx(e * (2 + 4 + 2)));
  CHECK(q->matmul.bytes == Approx(e * (1 + 1 + 2)));
  // Each operand quantized once: read as stored, written at one byte, its vector work per element.
  REQUIRE(q->quantize.size() == 2);
  CHECK(q->quantize[0].bytes == Approx(e * (2 + 1)));
  CHECK(q->quantize[1].bytes == Approx(e * (4 + 1)));
  CHECK(q->quantize[0].ops_per_element == int8.core().quantize_vpu_ops);
  CHECK(int8.core().quantize_vpu_ops > 0);
}

TEST_CASE("8-bit matmuls: only products with a weight are quantized, at each chip's own ratio",
          "[cost][today][precision]") {
  const CostModel v5e = at_precision("tpu-v5e", MatmulPrecision::Int8);
  // Attention's scores: two activations, no weight.
  CHECK_FALSE(v5e.quantized(batched_matmul_op("scores", 32, 2048, 128, 2048, 2)));
  // v4's int8 peak is its bf16 one: quantizing only adds passes.
  const CostModel v4 = at_precision("tpu-v4", MatmulPrecision::Int8);
  const Op big = dense_op("big", 8192, 8192, 8192, 2, 4);
  const auto q = v4.quantized(big);
  REQUIRE(q);
  CHECK(v4.cost(q->matmul).mxu_s == Approx(v4.cost(big).mxu_s));
  CHECK(v4.cost(q->matmul).precision_saved_s == 0);
  // TPU7x's fp8 doubles its peak; it has no int8.
  CHECK(load_hardware("tpu7x").core.peak_ratio(MatmulPrecision::Fp8) == 2.0);
  CHECK_FALSE(load_hardware("tpu7x").core.peak_ratio(MatmulPrecision::Int8));
  CHECK_FALSE(load_hardware("tpu-v3").core.peak_ratio(MatmulPrecision::Int8));
}
