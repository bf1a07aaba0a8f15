// Functional mode: every schedule computes what one core computes. Each case trains 3 steps
// through the simulated schedule (step 1 inside the engine, in simulated order; later steps
// replaying that order) and compares every weight with one core trained on the whole batch.
// One simulation per test case (catch_discover_tests: one process each).
#include <catch2/catch.hpp>

#include "schedules/functional_runtime.hpp"
#include "sim/engine.hpp"

using namespace tpusim;

namespace {

const char* kMlp = R"({"kind": "mlp", "layers": 5, "width": 48, "input": 24, "classes": 6})";
const char* kTransformer =
    R"({"kind": "transformer", "activation": "relu", "layers": 3, "d_model": 32, "d_ff": 64, "heads": 2, "vocab": 16, "seq_len": 8})";

struct Outcome {
  double max_rel_diff;
  std::vector<double> loss, reference_loss;
  double gradient_max_rel_diff;
};

// Four cores (two chips) for 2 x 2 meshes.
const char* kFourCores = R"({"chips": [2, 1], "wraparound": [false, false]})";

Outcome train(const char* model, const std::string& schedule, int steps = 3,
              const std::string& optimizer = "momentum", double learning_rate = 0,
              const char* slice = "\"v3-8\"", std::int64_t batch = 16, const Json& hardware = "tpu-v3") {
  Json j{{"hardware", hardware}};
  j["batch"] = batch;
  j["slice"] = Json::parse(slice);
  j["model"] = Json::parse(model);
  j["schedule"] = Json::parse(schedule);
  j["optimizer"] = Json{{"kind", optimizer}};
  if (learning_rate > 0) j["optimizer"]["learning_rate"] = learning_rate;
  const Study s = parse_study(j, "test");
  FunctionalRuntime::check_supported(s);
  FunctionalRuntime rt(s, 7);
  rt.begin_step(0);
  const BuiltStep step = s.schedule->build(s, &rt);
  sim::EngineOptions options;
  options.functional = true;
  const auto r = sim::simulate(step.graph, s.hardware, s.slice, options);
  rt.keep_first_gradients();
  rt.replay(step.graph, r.completion_order, steps);
  const auto ref = FunctionalRuntime::reference(s, steps, 7);
  return {rt.max_rel_diff(*ref), rt.losses(), ref->losses(), rt.gradient_max_rel_diff(*ref)};
}

void check_equivalent(const char* model, const std::string& schedule,
                      const std::string& optimizer = "momentum", const char* slice = "\"v3-8\"",
                      const Json& hardware = "tpu-v3") {
  const Outcome o = train(model, schedule, 3, optimizer, 0, slice, 16, hardware);
  INFO(schedule << " max_rel_diff " << o.max_rel_diff << " gradient_max_rel_diff "
                << o.gradient_max_rel_diff);
  CHECK(o.max_rel_diff <= 1e-5);
  CHECK(o.gradient_max_rel_diff <= 1e-5);
  REQUIRE(o.loss.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(o.loss[i] == Approx(o.reference_loss[i]).epsilon(1e-5));
}

}  // namespace

#define GPIPE_CASE(MODEL, K, M, REMAT)                                                                       \
  TEST_CASE("functional GPipe " #MODEL " K=" #K " M=" #M " remat=" #REMAT " matches one core",               \
            "[functional]") {                                                                                \
    check_equivalent(MODEL == std::string("mlp") ? kMlp : kTransformer,                                      \
                     R"({"kind": "gpipe", "stages": )" #K R"(, "microbatches": )" #M R"(, "remat": )" #REMAT \
                     "}");                                                                                   \
  }
#define GPIPE_MODEL(MODEL)       \
  GPIPE_CASE(MODEL, 1, 1, false) \
  GPIPE_CASE(MODEL, 1, 4, true)  \
  GPIPE_CASE(MODEL, 2, 1, true)  \
  GPIPE_CASE(MODEL, 2, 2, false) \
  GPIPE_CASE(MODEL, 2, 4, true)  \
  GPIPE_CASE(MODEL, 4, 1, false) \
  GPIPE_CASE(MODEL, 4, 2, true)  \
  GPIPE_CASE(MODEL, 4, 4, false) \
  GPIPE_CASE(MODEL, 4, 4, true)
GPIPE_MODEL("mlp")
GPIPE_MODEL("transformer")

#define ONE_F_ONE_B_CASE(MODEL, REMAT)                                                                   \
  TEST_CASE("functional 1F1B " #MODEL " remat=" #REMAT " matches one core", "[functional]") {            \
    check_equivalent(MODEL == std::string("mlp") ? kMlp : kTransformer,                                  \
                     R"({"kind": "one_f_one_b", "stages": 4, "microbatches": 4, "remat": )" #REMAT "}"); \
  }
ONE_F_ONE_B_CASE("mlp", false)
ONE_F_ONE_B_CASE("mlp", true)
ONE_F_ONE_B_CASE("transformer", false)
ONE_F_ONE_B_CASE("transformer", true)

#define DP_CASE(MODEL, R, UPDATE)                                                                    \
  TEST_CASE("functional data-parallel " #MODEL " replicas=" #R " " UPDATE " matches one core",       \
            "[functional]") {                                                                        \
    check_equivalent(MODEL == std::string("mlp") ? kMlp : kTransformer,                              \
                     R"({"kind": "data_parallel", "replicas": )" #R R"(, "weight_update": ")" UPDATE \
                     R"("})");                                                                       \
  }
DP_CASE("mlp", 1, "replicated")
DP_CASE("mlp", 2, "replicated")
DP_CASE("mlp", 4, "replicated")
DP_CASE("mlp", 4, "sharded")
DP_CASE("transformer", 1, "replicated")
DP_CASE("transformer", 2, "replicated")
DP_CASE("transformer", 4, "replicated")
DP_CASE("transformer", 8, "sharded")

TEST_CASE("functional fully sharded data parallelism matches one core", "[functional][sharding]") {
  check_equivalent(kMlp, R"({"kind": "data_parallel", "replicas": 4, "weight_update": "fully_sharded"})",
                   "adam");
}

TEST_CASE("functional sharded data parallelism with AdamW matches one core", "[functional][sharding]") {
  check_equivalent(kMlp, R"({"kind": "data_parallel", "replicas": 4, "weight_update": "sharded"})", "adamw");
}

TEST_CASE("functional fully sharded data parallelism with re-materialization matches one core",
          "[functional][sharding]") {
  check_equivalent(
      kTransformer,
      R"({"kind": "data_parallel", "replicas": 4, "weight_update": "fully_sharded", "remat": true})");
}

TEST_CASE("functional data-parallel transformer with re-materialization matches one core", "[functional]") {
  check_equivalent(kTransformer, R"({"kind": "data_parallel", "replicas": 4, "remat": true})");
}

TEST_CASE("functional GPipe with replicas matches one core", "[functional]") {
  check_equivalent(kTransformer, R"({"kind": "gpipe", "stages": 2, "microbatches": 2, "replicas": 2})");
}

TEST_CASE("sharded and replicated weight updates reach the same weights with Adam",
          "[functional][sharding]") {
  // Element-wise updates on shards are the same arithmetic as on the whole: equal to 1e-6.
  const Outcome o =
      train(kMlp, R"({"kind": "data_parallel", "replicas": 8, "weight_update": "sharded"})", 3, "adam");
  CHECK(o.max_rel_diff <= 1e-6);
}

// Mesh layouts: each core runs its shards of the ops and the collectives the layout induces
// really sum the partial results (a forgotten or misplaced collective shows as a difference).
#define MESH_CASE(NAME, LAYOUT, OPTIMIZER)                                                              \
  TEST_CASE("functional mesh 2x2 " NAME " matches one core", "[functional][mesh]") {                    \
    check_equivalent(kMlp, R"({"kind": "mesh", "mesh": {"rows": 2, "cols": 2}, "layout": )" LAYOUT "}", \
                     OPTIMIZER, kFourCores);                                                            \
  }
MESH_CASE("batch x d_ff", R"({"batch": "rows", "d_ff": "cols"})", "momentum")
MESH_CASE("batch x d_ff adam", R"({"batch": "rows", "d_ff": "cols"})", "adam")
MESH_CASE("d_model x d_ff", R"({"d_model": "rows", "d_ff": "cols"})", "momentum")
MESH_CASE("batch x vocab", R"({"batch": "rows", "vocab": "cols"})", "sgd")
MESH_CASE("replicated", R"({})", "momentum")
// Weight-update sharding: each core updates a piece of its shards and the pieces are all-gathered.
#define MESH_SHARDED_CASE(NAME, LAYOUT, OPTIMIZER)                                                          \
  TEST_CASE("functional mesh 2x2 " NAME " sharded update matches one core",                                 \
            "[functional][mesh][sharding]") {                                                               \
    check_equivalent(                                                                                       \
        kMlp,                                                                                               \
        R"({"kind": "mesh", "mesh": {"rows": 2, "cols": 2}, "weight_update": "sharded", "layout": )" LAYOUT \
        "}",                                                                                                \
        OPTIMIZER, kFourCores);                                                                             \
  }
MESH_SHARDED_CASE("batch x d_ff", R"({"batch": "rows", "d_ff": "cols"})", "adam")
MESH_SHARDED_CASE("batch x d_model", R"({"batch": "rows", "d_model": "cols"})", "momentum")

// Transformers: attention einsums between activations, causal softmax, residuals, layer norm
// (its statistics all-reduced when d_model is split), embedding lookups over a split
// vocabulary, the fused qkv parameter cut into the q, k and v projections.
#define MESH_TRANSFORMER_CASE(NAME, LAYOUT)                                                       \
  TEST_CASE("functional mesh 2x2 transformer " NAME " matches one core", "[functional][mesh]") {  \
    check_equivalent(kTransformer,                                                                \
                     R"({"kind": "mesh", "mesh": {"rows": 2, "cols": 2}, "layout": )" LAYOUT "}", \
                     "momentum", kFourCores);                                                     \
  }
MESH_TRANSFORMER_CASE("batch x heads", R"({"batch": "rows", "heads": "cols"})")
MESH_TRANSFORMER_CASE("Mesh-TF layout",
                      R"({"batch": "rows", "d_ff": "cols", "heads": "cols", "vocab": "cols"})")
MESH_TRANSFORMER_CASE("d_model x heads", R"({"d_model": "rows", "heads": "cols"})")
MESH_TRANSFORMER_CASE("d_kv x vocab", R"({"d_kv": "rows", "vocab": "cols"})")
// A split sequence: keys and values are all-gathered for the scores and the context, their
// gradients reduce-scattered back.
MESH_TRANSFORMER_CASE("batch x seq", R"({"batch": "rows", "seq": "cols"})")
MESH_TRANSFORMER_CASE("seq x heads", R"({"seq": "rows", "heads": "cols"})")

// RMSNorm (Llama's): the layer norm's kernels without the mean or the shift, whole and with its
// row sums of squares all-reduced over a split d_model.
const char* kRmsTransformer =
    R"({"kind": "transformer", "activation": "swiglu", "norm": "rms", "biases": false, "layers": 3, "d_model": 32, "d_ff": 64, "heads": 2, "vocab": 16, "seq_len": 8})";
TEST_CASE("functional data parallelism of an RMSNorm transformer matches one core", "[functional]") {
  check_equivalent(kRmsTransformer, R"({"kind": "data_parallel", "replicas": 4})", "adamw");
}
TEST_CASE("functional mesh 2x2 RMSNorm transformer d_model x heads matches one core", "[functional][mesh]") {
  check_equivalent(
      kRmsTransformer,
      R"({"kind": "mesh", "mesh": {"rows": 2, "cols": 2}, "layout": {"d_model": "rows", "heads": "cols"}})",
      "momentum", kFourCores);
}
// Collective matmul: every tensor-parallel reduction decomposed with its matmul (its pieces
// behind the matmul's steps carry no math; its last piece reduces).
TEST_CASE("functional mesh 2x2 transformer with collective matmul matches one core",
          "[functional][mesh][collective_matmul]") {
  const Json hardware = Json::parse(R"({"base": "tpu-v3", "override": {
      "core.tensor_collectives_overlap_matmuls": true, "core.collective_matmul_min_operand_bytes": 0}})");
  check_equivalent(kTransformer,
                   R"({"kind": "mesh", "mesh": {"rows": 2, "cols": 2},
                       "layout": {"batch": "rows", "d_ff": "cols", "heads": "cols", "vocab": "cols"}})",
                   "momentum", kFourCores, hardware);
  // It did decompose: some reduction runs behind its matmul.
  Json j{{"hardware", hardware},
         {"slice", Json::parse(kFourCores)},
         {"batch", 16},
         {"model", Json::parse(kTransformer)},
         {"optimizer", {{"kind", "momentum"}}},
         {"schedule", Json::parse(R"({"kind": "mesh", "mesh": {"rows": 2, "cols": 2},
                                     "layout": {"batch": "rows", "d_ff": "cols", "heads": "cols"}})")}};
  const Study s = parse_study(j, "test");
  const BuiltStep step = s.schedule->build(s);
  int behind = 0;
  for (int id = 0; id < step.graph.size(); ++id)
    behind += step.graph.task(id).name.find("(behind its matmul)") != std::string::npos ? 1 : 0;
  CHECK(behind > 0);
}
TEST_CASE("functional mesh 2x2 transformer sharded update matches one core", "[functional][mesh][sharding]") {
  check_equivalent(kTransformer,
                   R"({"kind": "mesh", "mesh": {"rows": 2, "cols": 2}, "weight_update": "sharded",
                                      "layout": {"batch": "rows", "heads": "cols", "d_ff": "cols"}})",
                   "momentum", kFourCores);
}

namespace {
/// Mean loss of the first and of the last five steps (each step sees fresh examples).
std::pair<double, double> ends(const std::vector<double>& loss) {
  double first = 0, last = 0;
  for (std::size_t i = 0; i < 5; ++i) {
    first += loss[i] / 5;
    last += loss[loss.size() - 1 - i] / 5;
  }
  return {first, last};
}
}  // namespace

TEST_CASE("the mlp's loss falls over 50 steps of GPipe", "[functional][training][long]") {
  const Outcome o = train(kMlp, R"({"kind": "gpipe", "stages": 2, "microbatches": 4})", 50, "adam", 0.01);
  const auto [first, last] = ends(o.loss);
  INFO("mean loss " << first << " -> " << last);
  CHECK(last < 0.9 * first);      // a deep narrow mlp on a noisy teacher task: a clear, not a fast, fall
  CHECK(o.max_rel_diff <= 1e-3);  // Adam over 50 steps: rounding differences grow, but stay small
}

TEST_CASE("the transformer's loss falls over 50 steps of data parallelism", "[functional][training][long]") {
  const Outcome o = train(kTransformer, R"({"kind": "data_parallel", "replicas": 4})", 50, "adam", 0.01);
  const auto [first, last] = ends(o.loss);
  INFO("mean loss " << first << " -> " << last);
  CHECK(last < 0.7 * first);
}

TEST_CASE("attention's key bias has an exactly zero gradient", "[functional]") {
  // Adding b_k to every key adds q_i . b_k to all of query i's scores alike, and a softmax is
  // invariant to a constant added to a row: the loss does not depend on b_k. Its gradient is
  // rounding noise, which Adam and RMSProp divide by its own size into full learning-rate steps
  // of random sign: that, not the schedule, is why their weights' max_rel_diff on a transformer
  // is large while every gradient matches one core's (gradient_max_rel_diff, checked below).
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8", "batch": 16, "optimizer": {"kind": "sgd"},
                           "schedule": {"kind": "data_parallel"}})");
  j["model"] = Json::parse(kTransformer);
  const Study s = parse_study(j, "test");
  const auto ref = FunctionalRuntime::reference(s, 1, 7);
  // Layer 1, the first block: its parameters are its named ops' weights in op order (layer norm
  // scale and shift, then the q, k and v projections each with its bias [heads, d_kv]).
  const auto& grads = ref->grads(0, 1);
  auto max_abs = [&](std::size_t part) {
    double m = 0;
    for (float g : grads.at(3 + 2 * part)) m = std::max(m, double(std::fabs(g)));
    return m;
  };
  REQUIRE(grads.at(3).size() == 2 * 16);  // heads x d_kv
  REQUIRE(max_abs(0) > 0);
  REQUIRE(max_abs(2) > 0);
  CHECK(max_abs(1) <= 1e-5 * std::max(max_abs(0), max_abs(2)));
}

TEST_CASE("gradients match one core's under Adam on a transformer pipeline", "[functional]") {
  const Outcome o = train(kTransformer, R"({"kind": "gpipe", "stages": 2, "microbatches": 4})", 3, "adam");
  INFO("gradient_max_rel_diff " << o.gradient_max_rel_diff << " max_rel_diff " << o.max_rel_diff);
  CHECK(o.gradient_max_rel_diff <= 1e-5);
}

TEST_CASE("gradients match one core's under RMSProp on a transformer with sharded updates", "[functional]") {
  const Outcome o =
      train(kTransformer, R"({"kind": "data_parallel", "weight_update": "sharded"})", 3, "rmsprop");
  INFO("gradient_max_rel_diff " << o.gradient_max_rel_diff << " max_rel_diff " << o.max_rel_diff);
  CHECK(o.gradient_max_rel_diff <= 1e-5);
}

TEST_CASE("replicas that diverge are caught, not hidden behind the lowest core's fingerprint",
          "[functional]") {
  Json j = Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8", "batch": 16, "optimizer": {"kind": "sgd"},
                           "schedule": {"kind": "data_parallel"}})");
  j["model"] = Json::parse(kMlp);
  const Study s = parse_study(j, "test");
  FunctionalRuntime rt(s, 7);
  const LayerRange all{0, int(s.model.layers.size())};
  rt.hold(0, all);
  rt.hold(3, all);
  CHECK(rt.replicas_identical());
  const std::string fingerprint = rt.weights_fingerprint();
  rt.params(3, 2)[0][5] += 1e-3f;  // core 3's copy of layer 2 drifts
  CHECK_FALSE(rt.replicas_identical());
  CHECK(rt.weights_fingerprint() == fingerprint);  // why the fingerprint alone is not enough
}

const char* kGeluTransformer =
    R"({"kind": "transformer", "layers": 2, "d_model": 32, "d_ff": 64, "heads": 2, "vocab": 16, "seq_len": 8,
        "activation": "gelu"})";

TEST_CASE("a GELU transformer's pipeline matches one core", "[functional]") {
  check_equivalent(kGeluTransformer, R"({"kind": "gpipe", "stages": 2, "microbatches": 4})");
}

TEST_CASE("a GELU transformer's mesh layout matches one core", "[functional][mesh]") {
  check_equivalent(kGeluTransformer,
                   R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]],
                       "layout": {"batch": "batch", "d_ff": "model", "heads": "model"}})",
                   "momentum", kFourCores);
}

// The Mesh-TensorFlow paper's language model: no biases (its feed-forward's ReLU stands alone).
const char* kMeshLm =
    R"({"kind": "mesh_lm", "size": 0, "layers": 2, "d_model": 32, "d_ff": 64, "d_kv": 8, "heads": 2,
        "vocab": 64, "seq_len": 8})";

TEST_CASE("the Mesh-TF language model's own layout matches one core", "[functional][mesh]") {
  check_equivalent(kMeshLm,
                   R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]],
                       "layout": {"batch": "batch", "d_ff": "model", "heads": "model", "vocab": "model"}})",
                   "momentum", kFourCores);
}

TEST_CASE("the Mesh-TF language model's pipeline matches one core", "[functional]") {
  check_equivalent(kMeshLm, R"({"kind": "gpipe", "stages": 2, "microbatches": 4})");
}

// Convolutions (SAME padding, one strided), ReLUs, global average pooling and a classifier: the
// image crosses a pipeline's stage boundary.
const char* kConvNet = R"({"kind": "sequential", "layers": [
    {"kind": "conv2d", "size": 8, "in_channels": 3, "out_channels": 4, "kernel": 3, "batch_norm": false},
    {"kind": "conv2d", "size": 8, "in_channels": 4, "out_channels": 6, "kernel": 3, "stride": 2,
     "batch_norm": false},
    {"kind": "global_pool"}, {"kind": "classifier", "in": 6, "classes": 5}]})";

TEST_CASE("a convolutional net's data parallelism matches one core", "[functional]") {
  check_equivalent(kConvNet, R"({"kind": "data_parallel"})");
}

TEST_CASE("a convolutional net's pipeline matches one core", "[functional]") {
  check_equivalent(kConvNet, R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "remat": true})");
}

// Batch norm: each layer call normalizes over its own examples (a replica's, a micro-batch's), and
// the reference runs one core over the same groups, adding their gradients. The first step's
// gradients and the weights after it match; later steps are not compared here, as a batch norm
// over a few examples at a 1x1 image amplifies rounding differences by orders of magnitude.
void check_first_step(const char* model, const std::string& schedule, std::int64_t batch = 16) {
  const Outcome o = train(model, schedule, 1, "momentum", 0, "\"v3-8\"", batch);
  INFO(schedule);
  CHECK(o.gradient_max_rel_diff <= 1e-5);
  CHECK(o.max_rel_diff <= 1e-5);
  CHECK(o.loss.front() == Approx(o.reference_loss.front()).epsilon(1e-6));
}

const char* kConvBnNet = R"({"kind": "sequential", "layers": [
    {"kind": "conv2d", "size": 8, "in_channels": 3, "out_channels": 4, "kernel": 3},
    {"kind": "conv2d", "size": 8, "in_channels": 4, "out_channels": 6, "kernel": 3, "stride": 2},
    {"kind": "global_pool"}, {"kind": "classifier", "in": 6, "classes": 5}]})";
const char* kResNet = R"({"kind": "resnet50", "image_size": 32, "classes": 10})";

TEST_CASE("a conv net with batch norms: data parallelism computes one core's first step", "[functional]") {
  check_first_step(kConvBnNet, R"({"kind": "data_parallel"})");
}

// Accumulated, each batch norm normalizes over a replica's micro-batch (the reference's groups).
TEST_CASE("a conv net with batch norms: accumulated data parallelism computes one core's first step",
          "[functional][accumulation]") {
  check_first_step(kConvBnNet, R"({"kind": "data_parallel", "accumulation_steps": 2})");
}

TEST_CASE("a conv net with batch norms: an accumulated batch-split mesh computes one core's first step",
          "[functional][mesh][accumulation]") {
  check_first_step(
      kConvBnNet,
      R"({"kind": "mesh", "mesh": [["batch", 8]], "layout": {"batch": "batch"}, "accumulation_steps": 2})");
}

TEST_CASE("a conv net with batch norms: GPipe computes one core's first step", "[functional]") {
  check_first_step(kConvBnNet, R"({"kind": "gpipe", "stages": 2, "microbatches": 4})");
}

TEST_CASE("ResNet-50's data parallelism computes one core's first step", "[functional][resnet]") {
  check_first_step(kResNet, R"({"kind": "data_parallel", "replicas": 2})", 8);
}

TEST_CASE("ResNet-50's GPipe pipeline computes one core's first step", "[functional][resnet]") {
  check_first_step(kResNet, R"({"kind": "gpipe", "stages": 2, "microbatches": 2, "remat": true})", 8);
}

TEST_CASE("cross-replica batch norm is refused in functional mode", "[functional]") {
  Json j =
      Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8", "batch": 16, "optimizer": {"kind": "momentum"},
                           "schedule": {"kind": "data_parallel", "batch_norm_group": 2}})");
  j["model"] = Json::parse(kConvBnNet);
  CHECK_THROWS_WITH(FunctionalRuntime::check_supported(parse_study(j, "test")),
                    Catch::Contains("schedule.batch_norm_group"));
}

TEST_CASE("functional data-parallel transformer with save_dots matches one core", "[functional][remat]") {
  check_equivalent(kTransformer, R"({"kind": "data_parallel", "replicas": 4, "remat": "save_dots"})");
}

TEST_CASE("functional GPipe with save_dots matches one core", "[functional][remat]") {
  check_equivalent(kTransformer,
                   R"({"kind": "gpipe", "stages": 2, "microbatches": 4, "remat": "save_dots"})");
}

TEST_CASE("the Mesh-TF language model's layout with re-materialization matches one core",
          "[functional][mesh][remat]") {
  check_equivalent(kMeshLm,
                   R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]], "remat": true,
                       "layout": {"batch": "batch", "d_ff": "model", "heads": "model", "vocab": "model"}})",
                   "momentum", kFourCores);
}

// Flash attention changes where the scores live, not what they are.
const char* kFlashTransformer =
    R"({"kind": "transformer", "activation": "relu", "layers": 3, "d_model": 32, "d_ff": 64, "heads": 2, "vocab": 16, "seq_len": 8,
        "attention": "flash", "flash_block_rows": 8})";

TEST_CASE("a flash-attention transformer's data parallelism with save_dots matches one core",
          "[functional][flash]") {
  check_equivalent(kFlashTransformer, R"({"kind": "data_parallel", "replicas": 4, "remat": "save_dots"})");
}

TEST_CASE("a flash-attention transformer's mesh layout matches one core", "[functional][mesh][flash]") {
  check_equivalent(kFlashTransformer,
                   R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]],
                       "layout": {"batch": "batch", "d_ff": "model", "heads": "model"}})",
                   "momentum", kFourCores);
}

TEST_CASE("the Mesh-TF language model's layout with fully sharded weights matches one core",
          "[functional][mesh][sharding]") {
  check_equivalent(kMeshLm,
                   R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]], "weight_update": "fully_sharded",
                       "layout": {"batch": "batch", "d_ff": "model", "heads": "model", "vocab": "model"}})",
                   "momentum", kFourCores);
}

TEST_CASE("a mesh layout with gradient accumulation matches one core", "[functional][mesh][accumulation]") {
  // Each core's micro-batches are its own examples in turn; the loss averages over the whole
  // batch, the vocabulary split or not; sharded updates reduce the summed gradients once.
  check_equivalent(kTransformer,
                   R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]], "accumulation_steps": 2,
                       "layout": {"batch": "batch", "d_ff": "model", "heads": "model"}})",
                   "momentum", kFourCores);
}

TEST_CASE("a split vocabulary with gradient accumulation and sharded updates matches one core",
          "[functional][mesh][accumulation]") {
  check_equivalent(kMeshLm,
                   R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]], "accumulation_steps": 4,
                       "weight_update": "sharded",
                       "layout": {"batch": "batch", "d_ff": "model", "heads": "model", "vocab": "model"}})",
                   "momentum", kFourCores);
}

// Ops without shard math of their own run their kind's whole-tensor math on a core's pieces:
// element-wise ones on any split (a gated MLP split along d_ff), convolutions, batch norms and
// pools on a split batch.
TEST_CASE("a SwiGLU transformer's mesh layout matches one core", "[functional][mesh]") {
  check_equivalent(R"({"kind": "transformer", "layers": 2, "d_model": 32, "d_ff": 64, "heads": 2, "vocab": 16,
                       "seq_len": 8, "activation": "swiglu"})",
                   R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]],
                       "layout": {"batch": "batch", "d_ff": "model", "heads": "model"}})",
                   "momentum", kFourCores);
}

// PaLM's block (parallel attention and SwiGLU MLP, one key/value head) with its layer inputs
// kept split over the model axis: the all-gather before each recompute moves storage only.
TEST_CASE("a parallel multi-query block with its kept inputs split matches one core", "[functional][mesh]") {
  check_equivalent(
      R"({"kind": "transformer", "layers": 2, "d_model": 32, "d_ff": 64, "heads": 2, "kv_heads": 1,
                       "vocab": 16, "seq_len": 8, "activation": "swiglu", "block": "parallel"})",
      R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]], "remat": true,
                       "layer_input_split": "model",
                       "layout": {"batch": "batch", "d_ff": "model", "heads": "model"}})",
      "momentum", kFourCores);
}

TEST_CASE("a GEGLU transformer's mesh layout over d_model matches one core", "[functional][mesh]") {
  check_equivalent(R"({"kind": "transformer", "layers": 2, "d_model": 32, "d_ff": 64, "heads": 2, "vocab": 16,
                       "seq_len": 8, "activation": "geglu"})",
                   R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]],
                       "layout": {"d_model": "batch", "d_ff": "model"}})",
                   "momentum", kFourCores);
}

TEST_CASE("a convolutional net's mesh over the batch matches one core", "[functional][mesh]") {
  check_equivalent(kConvNet,
                   R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]], "layout": {"batch": "batch"}})",
                   "momentum", kFourCores);
}

TEST_CASE("a conv net with batch norms: a mesh over the batch computes one core's first step",
          "[functional][mesh]") {
  check_first_step(kConvBnNet, R"({"kind": "mesh", "mesh": [["batch", 8]], "layout": {"batch": "batch"}})");
}

TEST_CASE("ResNet-50's mesh over the batch computes one core's first step", "[functional][mesh][resnet]") {
  check_first_step(
      kResNet, R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 4]], "layout": {"batch": "batch"}})", 8);
}

TEST_CASE("a convolution on a split image is refused in functional mode, naming the op",
          "[functional][mesh]") {
  Json j =
      Json::parse(R"({"hardware": "tpu-v3", "slice": "v3-8", "batch": 16, "optimizer": {"kind": "momentum"},
                           "schedule": {"kind": "mesh", "mesh": [["batch", 2], ["model", 4]],
                                        "layout": {"batch": "batch", "height": "model"}}})");
  j["model"] = Json::parse(kConvNet);
  const Study s = parse_study(j, "test");
  FunctionalRuntime rt(s, 7);
  CHECK_THROWS_WITH(s.schedule->build(s, &rt), Catch::Contains("height split") && Catch::Contains("conv"));
}

const char* kParallelBlock =
    R"({"kind": "transformer", "layers": 2, "d_model": 32, "d_ff": 64, "heads": 2, "vocab": 16, "seq_len": 8,
        "block": "parallel", "activation": "swiglu", "kv_heads": 1})";

TEST_CASE("a parallel-block, multi-query transformer's data parallelism matches one core", "[functional]") {
  check_equivalent(kParallelBlock, R"({"kind": "data_parallel", "replicas": 4})");
}

TEST_CASE("a parallel-block transformer's mesh layout matches one core", "[functional][mesh]") {
  check_equivalent(kParallelBlock,
                   R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]],
                       "layout": {"batch": "batch", "d_ff": "model", "heads": "model"}})",
                   "momentum", kFourCores);
}

TEST_CASE("interleaved 1F1B matches one core", "[functional][interleaved]") {
  check_equivalent(kTransformer,
                   R"({"kind": "one_f_one_b", "stages": 2, "microbatches": 4, "virtual_stages": 2})");
}

TEST_CASE("interleaved 1F1B with replicas and re-materialization matches one core",
          "[functional][interleaved]") {
  check_equivalent(kMlp, R"({"kind": "one_f_one_b", "stages": 2, "microbatches": 2, "virtual_stages": 2,
                            "replicas": 2, "remat": true})");
}

TEST_CASE("a learned position table split along d_model matches one core", "[functional][mesh]") {
  const char* model =
      R"({"kind": "transformer", "layers": 2, "d_model": 32, "d_ff": 64, "heads": 2, "vocab": 16, "seq_len": 8,
          "positions": "learned", "activation": "gelu"})";
  check_equivalent(model, R"({"kind": "mesh", "mesh": [["batch", 2], ["model", 2]],
                              "layout": {"batch": "batch", "d_model": "model"}})",
                   "momentum", kFourCores);
}
