// Model descriptions: parameter counts and FLOPs against hand-derived formulas.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "hardware/hardware_spec.hpp"
#include "models/model.hpp"
#include "models/op_lowering.hpp"
#include "models/ops/op_kind.hpp"

using namespace tpusim;

namespace {

Model build(const std::string& text) {
  Problems problems("test");
  Model m = build_model(Json::parse(text), "model", problems);
  problems.throw_if_any();
  return m;
}

double total_flops(const Model& m, std::int64_t batch, bool backward) {
  double f = 0;
  for (const auto& l : m.layers)
    for (const auto& op : backward ? l.work(batch).backward : l.work(batch).forward) f += op.model_flops();
  return f;
}

}  // namespace

TEST_CASE("transformer parameters: 12 d^2 L + 2 V d plus biases and norms, exactly", "[models]") {
  const std::int64_t L = 48, d = 2048, ff = 8192, V = 32000;
  const Model m = build(
      R"({"kind": "transformer", "activation": "relu", "layers": 48, "d_model": 2048, "d_ff": 8192, "heads": 32, "vocab": 32000, "seq_len": 1024})");
  const std::int64_t block = 4 * d * d + 2 * d * ff + (3 * d + d + ff + d) + 4 * d;
  CHECK(m.params() == L * block + V * d + (V * d + 2 * d));
  CHECK(double(m.params()) == Approx(2.55e9).epsilon(0.01));  // MODELS.md check value for L = 48
  CHECK(m.layers.size() == 50);
}

TEST_CASE("transformer forward FLOPs per token: 2 x matmul params + attention", "[models]") {
  const std::int64_t d = 512, ff = 2048, s = 128, V = 1000, L = 2;
  const Model m = build(
      R"({"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 512, "d_ff": 2048, "heads": 8, "vocab": 1000, "seq_len": 128,
          "causal": false})");  // every attention product counted (the causal half: below)
  const double matmul_params = double(L) * (4 * d * d + 2 * d * ff) + double(V) * d;
  const double per_token = 2 * matmul_params + double(L) * 4 * s * d;
  CHECK(total_flops(m, 3, false) == Approx(3 * s * per_token));
  CHECK(total_flops(m, 3, true) == Approx(2 * total_flops(m, 3, false)));
}

TEST_CASE("mlp parameters and FLOPs", "[models]") {
  const Model m = build(R"({"kind": "mlp", "layers": 3, "width": 100, "input": 50, "classes": 10})");
  CHECK(m.params() == (50 * 100 + 100) + 2 * (100 * 100 + 100) + (100 * 10 + 10));
  CHECK(total_flops(m, 4, false) == Approx(2.0 * 4 * (50 * 100 + 2 * 100 * 100 + 100 * 10)));
}

TEST_CASE("activation stash grows linearly with the batch", "[models]") {
  const Model m = build(
      R"({"kind": "transformer", "activation": "relu", "layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 100, "seq_len": 64})");
  const auto& block = m.layers[1];
  CHECK(block.work(8).stash_bytes == Approx(2 * block.work(4).stash_bytes));
  CHECK(block.work(4).output_bytes == Approx(4.0 * 64 * 256 * 2));
}

TEST_CASE("model validation names the field", "[models]") {
  Problems problems("test");
  build_model(
      Json::parse(
          R"({"kind": "transformer", "activation": "relu", "layers": 0, "d_model": 100, "d_ff": 1, "heads": 3, "vocab": 1, "seq_len": 1, "bogus": 1})"),
      "model", problems);
  CHECK_THROWS_WITH(problems.throw_if_any(),
                    Catch::Contains("model.layers") && Catch::Contains("model.bogus"));
  Problems p2("test");
  build_model(
      Json::parse(
          R"({"kind": "transformer", "activation": "relu", "layers": 1, "d_model": 100, "d_ff": 1, "heads": 3, "vocab": 1, "seq_len": 1})"),
      "model", p2);
  CHECK_THROWS_WITH(p2.throw_if_any(), Catch::Contains("model.heads"));
  Problems p3("test");
  build_model(Json::parse(R"({"kind": "resnet9000"})"), "model", p3);
  CHECK_THROWS_WITH(p3.throw_if_any(), Catch::Contains("model.kind") && Catch::Contains("transformer"));
}

TEST_CASE("every registered model kind builds", "[models][registry]") {
  // One small valid description per kind: each builds, has layers, parameters, and lowers every
  // layer to work with FLOPs at a batch of 2. A kind left out of this list fails the size check.
  const std::map<std::string, std::string> examples = {
      {"amoebanet_d", R"({"kind": "amoebanet_d", "normal_cells": 3, "filters": 32, "image_size": 64})"},
      {"bert",
       R"({"kind": "bert", "layers": 1, "d_model": 32, "d_ff": 64, "heads": 2, "vocab": 16, "seq_len": 8, "predicted_positions": 2})"},
      {"mesh_lm", R"({"kind": "mesh_lm", "size": -1, "layers": 1, "seq_len": 16})"},
      {"mlp", R"({"kind": "mlp", "layers": 2, "width": 16, "input": 8, "classes": 4})"},
      {"resnet50", R"({"kind": "resnet50", "image_size": 32, "classes": 10})"},
      {"ssd_resnet34", R"({"kind": "ssd_resnet34", "image_size": 260, "classes": 3})"},
      {"sequential",
       R"({"kind": "sequential", "layers": [{"kind": "dense", "in": 8, "out": 16}, {"kind": "classifier", "in": 16, "classes": 4}]})"},
      {"transformer",
       R"({"kind": "transformer", "activation": "relu", "layers": 1, "d_model": 32, "d_ff": 64, "heads": 2, "vocab": 16, "seq_len": 8})"},
      {"unet",
       R"({"kind": "unet", "latent_size": 8, "block_channels": [32, 64], "layers_per_block": 1, "head_dim": 16, "context_tokens": 4, "context_width": 16})"}};
  CHECK(model_builders().size() == examples.size());
  for (const auto& [kind, builder] : model_builders()) CHECK(model_family(kind) != "unknown");
  for (const auto& [kind, text] : model_builders()) {
    INFO(kind);
    REQUIRE(examples.count(kind));
    const Model m = build(examples.at(kind));
    CHECK(m.kind == kind);
    CHECK(!m.layers.empty());
    CHECK(m.params() > 0);
    double flops = 0;
    for (const auto& l : m.layers) {
      const LayerWork w = l.work(2);
      CHECK(!w.forward.empty());
      for (const auto& op : w.forward) flops += op.model_flops();
      for (const NamedOp& op : l.named_ops(2)) CHECK_NOTHROW(op_kind(op));  // a registered kind
    }
    CHECK(flops > 0);
  }
}

TEST_CASE("AmoebaNet-D parameter counts match the check values exactly", "[models]") {
  const std::vector<std::tuple<int, int, std::int64_t>> checks = {
      {6, 64, 3701096}, {18, 128, 31694440}, {12, 192, 48362344}, {6, 256, 46654184}, {18, 256, 122470120}};
  for (const auto& [L, D, params] : checks) {
    const Model m = build(Json{{"kind", "amoebanet_d"}, {"normal_cells", L}, {"filters", D}}.dump());
    INFO("AmoebaNet-D(" << L << ", " << D << ")");
    CHECK(m.params() == params);
    CHECK(m.layers.size() == std::size_t(L + 6));  // stem, 2 stem reductions, L normal, 2 reductions, head
  }
}

TEST_CASE("ResNet-50 v1.5 has 25,557,032 parameters and ~4.1 G MACs per image", "[models]") {
  const Model m = build(R"({"kind": "resnet50"})");
  CHECK(m.params() == 25557032);
  CHECK(m.layers.size() == 18);
  CHECK(total_flops(m, 1, false) / 2 == Approx(4.1e9).epsilon(0.02));
}

TEST_CASE("Mesh-TensorFlow language model sizes to 0.01B", "[models]") {
  const std::vector<std::pair<int, double>> sizes = {{-1, 0.14}, {0, 0.22}, {1, 0.37}, {2, 0.67},
                                                     {3, 1.28},  {4, 2.48}, {5, 4.90}};
  for (const auto& [s, billions] : sizes) {
    const Model m = build(Json{{"kind", "mesh_lm"}, {"size", s}}.dump());
    INFO("s = " << s);
    CHECK(std::round(double(m.params()) / 1e7) / 100 == Approx(billions));
  }
  // Explicit dimensions override the size's.
  CHECK(build(R"({"kind": "mesh_lm", "size": 0, "layers": 12})").layers.size() == 14);
}

TEST_CASE("convolution FLOPs: output pixels x kernel area x in x out", "[models][cost]") {
  ConvShape c{2, 56, 56, 64, 3, 3, 1, 128};
  const Op op = conv_op("c", c, 2, 4);
  CHECK(op.model_flops() == Approx(2.0 * 2 * 56 * 56 * 3 * 3 * 64 * 128));
  ConvShape s = c;
  s.stride = 2;
  CHECK(conv_op("s", s, 2, 4).model_flops() == Approx(op.model_flops() / 4));
  CHECK(conv_input_grad_op("dx", c, 2, 4).model_flops() == Approx(op.model_flops()));
  const Op dw = conv_weight_grad_op("dw", c, 2, 4);
  CHECK(dw.model_flops() == Approx(op.model_flops()));
  CHECK(dw.weight_gradient);
  CHECK(dw.m == 3 * 3 * 64);
  CHECK(dw.k == 2 * 56 * 56);
}

TEST_CASE("backward FLOPs split into input and weight gradients", "[models]") {
  const Model m = build(R"({"kind": "mlp", "layers": 2, "width": 64, "input": 64, "classes": 10})");
  const auto w = m.layers[1].work(8);
  double input_grad = 0, weight_grad = 0;
  for (const auto& op : w.backward) (op.weight_gradient ? weight_grad : input_grad) += op.model_flops();
  CHECK(input_grad == Approx(2.0 * 8 * 64 * 64));
  CHECK(weight_grad == Approx(2.0 * 8 * 64 * 64));
}

TEST_CASE("encoder-decoder transformer with shared embeddings", "[models]") {
  const Model m = build(
      R"({"kind": "transformer", "activation": "relu", "encoder_layers": 6, "layers": 6, "d_model": 1024, "d_ff": 4096,
                             "heads": 16, "vocab": 33708, "seq_len": 256, "shared_embeddings": true})");
  const std::int64_t d = 1024, ff = 4096, V = 33708;
  const std::int64_t enc = 4 * d * d + 2 * d * ff + (4 * d + ff + d) + 4 * d;
  const std::int64_t dec = enc + 4 * d * d + 4 * d + 2 * d;  // + cross-attention (q, kv, out) and its norm
  CHECK(m.params() == 6 * enc + 6 * dec + V * d + 2 * d);
  CHECK(m.layers.size() == 15);
}

TEST_CASE("re-materialization keeps only the layer input", "[models]") {
  const Model m = build(R"({"kind": "amoebanet_d", "normal_cells": 6, "filters": 64})");
  for (const auto& layer : m.layers) {
    const auto w = layer.work(4);
    INFO(layer.name);
    CHECK(w.stash_remat_bytes() == w.input_bytes);
  }
  // A transformer block keeps far more than its input (attention probabilities alone are
  // heads x seq values per position against d_model).
  const Model t = build(
      R"({"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64})");
  for (const auto& layer : t.layers)
    if (layer.name.rfind("block", 0) == 0)
      CHECK(layer.work(4).stash_bytes > 4 * layer.work(4).stash_remat_bytes());
}

TEST_CASE("sequential models chain their shapes", "[models]") {
  const Model m = build(R"({"kind": "sequential", "layers": [
      {"kind": "conv2d", "size": 32, "in_channels": 3, "out_channels": 64, "kernel": 3},
      {"kind": "conv2d", "size": 32, "in_channels": 64, "out_channels": 64, "kernel": 3, "count": 3},
      {"kind": "conv2d", "size": 32, "in_channels": 64, "out_channels": 128, "kernel": 3, "stride": 2}]})");
  CHECK(m.layers.size() == 5);
  CHECK(m.params() == (27 * 64 + 128) + 3 * (576 * 64 + 128) + (576 * 128 + 256));
  Problems p("test");
  build_model(Json::parse(R"({"kind": "sequential", "layers": [{"kind": "dense", "in": 8, "out": 16},
      {"kind": "dense", "in": 32, "out": 4}]})"),
              "model", p);
  CHECK_THROWS_WITH(p.throw_if_any(), Catch::Contains("model.layers[1].in: found 32"));
}

TEST_CASE("a ResNet block keeps what its backward reads, each tensor once", "[models][memory]") {
  // stage2_block1 at 224 px: input 56x56x256, width 128, stride 2 on conv2, projection shortcut.
  // Kept, by hand (bf16): the block input once (conv1 and the shortcut both read it: 56^2*256),
  // bn1's input (56^2*128), bn2's input (28^2*128), bn3's and the shortcut bn's inputs (28^2*512
  // each). conv2's and conv3's inputs are ReLUs of bn1's and bn2's outputs: recomputed from the
  // kept bn inputs and statistics, not kept. The block's output, which its ReLU's gradient
  // reads, is kept by the next block as its input.
  const Model m = build(R"({"kind": "resnet50"})");
  const auto& block = m.layers[4];
  REQUIRE(block.name == "stage2_block1");
  const double per_image = 56 * 56 * 256 + 56 * 56 * 128 + 28 * 28 * 128 + 2 * 28 * 28 * 512;
  CHECK(block.work(2).stash_bytes == Approx(2 * 2 * per_image));
}

TEST_CASE("AmoebaNet keeps its convolutions' outputs only: ReLUs, sums and pools are recomputed",
          "[models][memory]") {
  // Every state of a cell is a sum of batch-norm outputs, pool outputs and other states, and
  // every op reads its state through a ReLU or a pool: all element-wise or windowed VPU work
  // that the backward's fusions recompute from the kept batch-norm inputs (the convolutions'
  // outputs) and statistics. So a cell keeps one tensor per convolution, and no pool keeps
  // anything.
  const Model m = build(R"({"kind": "amoebanet_d", "normal_cells": 6, "filters": 64, "image_size": 64})");
  const Layer* cell = nullptr;
  for (const auto& l : m.layers)
    if (l.name == "normal1_2") cell = &l;
  REQUIRE(cell);
  // State width w = 64 at 8x8 (64 px). Per image, in units of U = 8*8*64, the bn inputs of:
  // base_prev U, base_prev_prev U, the 1x1 conv on s1 U, the two 1x7-7x1 ops (U/4 * 3 + U each),
  // the 1x1 conv on s0 U, the 1x1 conv on s5 U.
  const double U = 8 * 8 * 64;
  const double units = 1 + 1 + 1 + 2 * 1.75 + 1 + 1;
  CHECK(cell->work(1).stash_bytes == Approx(units * U * 2));
}

TEST_CASE("an activation is stored in whole lanes: its feature or batch dimension, whichever pads less",
          "[models][memory]") {
  const Sharding s = Sharding::whole(128, kFp32Bytes);
  // 64 channels fill half of 128 lanes; a batch of 128 fills them all (batch-minor layout).
  CHECK(s.lane_padding(image(32, 75, 64)) == Approx(2.0));
  CHECK(s.lane_padding(image(128, 56, 64)) == Approx(1.0));
  CHECK(s.lane_padding(image(64, 56, 64)) == Approx(2.0));
  // AmoebaNet's 52 channels pad to 128 (x 128/52), 136 to 256; a batch of 32 would pad 4x.
  CHECK(s.lane_padding(image(32, 28, 52)) == Approx(128.0 / 52));
  CHECK(s.lane_padding(image(32, 28, 136)) == Approx(256.0 / 136));
  // Attention heads of 64 for 4 sequences: d_kv is the minor dimension, 2x.
  const NamedTensor q = act({{"batch", 4}, {"seq", 1024}, {"heads", 32}, {"d_kv", 64}});
  CHECK(s.local_elements(q) == Approx(2.0 * q.elements()));
  // Weights are counted as they are; without lanes nothing pads.
  CHECK(s.lane_padding(weight({{"channels", 64}, {"channels_out", 64}})) == 1.0);
  CHECK(Sharding::none().local_elements(q) == q.elements());
}

TEST_CASE("a layer lowered for the hardware keeps its activations as stored", "[models][memory]") {
  // The ResNet block of the test above at 2 images (a batch of 2 pads 64x, so channels are
  // minor): its 256-, 128- and 512-channel tensors fill whole lanes, so it keeps the same. A
  // 64-channel block (stage1_block2 at 56x56: input 256, width 64) keeps its bn1 and bn2 inputs
  // (56^2 x 64 each) padded to 128 lanes, its input (256) and bn3's input (256) as they are.
  Model m = build(R"({"kind": "resnet50"})");
  const double unpadded = m.layers[4].work(2).stash_bytes;
  const double stage1 = m.layers[2].work(2).stash_bytes;
  REQUIRE(m.layers[2].name == "stage1_block2");
  m.pad_activations_to(128);
  CHECK(m.layers[4].work(2).stash_bytes == Approx(unpadded));
  CHECK(stage1 == Approx(2 * 2 * 56.0 * 56 * (256 + 64 + 64 + 256)));
  CHECK(m.layers[2].work(2).stash_bytes == Approx(2 * 2 * 56.0 * 56 * (256 + 128 + 128 + 256)));
}

TEST_CASE("what a layer reads from and hands to others is stored in whole lanes too", "[models][memory]") {
  // stage1_block2 of ResNet-50 for 2 images (batch 2 pads 64x: channels minor) reads and hands on
  // 56x56x256, which fills whole lanes; the stem reads the 224x224x3 image (3 channels pad to
  // 128, a batch of 2 to 128: x 128/3) and hands on 56x56x64 (x 2). The infeed sends an example
  // as it is (150,528 bytes of bf16).
  Model m = build(R"({"kind": "resnet50"})");
  const double map256 = 2 * 2 * 56.0 * 56 * 256, image = 2 * 2 * 224.0 * 224 * 3;
  m.pad_activations_to(128);
  CHECK(m.layers[2].work(2).input_bytes == Approx(map256));
  CHECK(m.layers[2].work(2).output_bytes == Approx(map256));
  CHECK(m.layers[0].work(2).input_bytes == Approx(image * 128 / 3));
  CHECK(m.layers[0].work(2).output_bytes == Approx(2 * 2 * 56.0 * 56 * 64 * 2));
  CHECK(m.layers[0].lower(1, 0, kFp32Bytes).input_bytes == Approx(224.0 * 224 * 3 * 2));
  // A transformer's last layer hands on one fp32 loss per position: [batch, seq] fills lanes
  // along seq (1024), so 8 sequences give 8 x 1024 x 4 bytes.
  Model t = build(
      R"({"kind": "transformer", "activation": "relu", "layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 1024})");
  t.pad_activations_to(128);
  CHECK(t.layers.back().work(8).output_bytes == Approx(8 * 1024.0 * 4));
}

TEST_CASE("what passes through a layer to later ones is part of its boundary", "[models][memory]") {
  // An encoder-decoder: the source embedding carries the target ids (int32, 256 per sequence) to
  // the decoder; the target embedding reads them and the encoder output (256 x 1024 bf16) and
  // hands on its embedding and the encoder output. For 2 sequences, logical sizes (no lanes).
  const Model t = build(
      R"({"kind": "transformer", "activation": "relu", "encoder_layers": 2, "layers": 2, "d_model": 1024, "d_ff": 4096,
               "heads": 16, "vocab": 1000, "seq_len": 256})");
  const double ids = 2 * 256.0 * 4, x = 2 * 256.0 * 1024 * 2;
  REQUIRE(t.layers[0].name == "source_embedding");
  CHECK(t.layers[0].work(2).input_bytes == Approx(2 * ids));  // source and target ids
  CHECK(t.layers[0].work(2).output_bytes == Approx(x + ids));
  REQUIRE(t.layers[3].name == "target_embedding");
  CHECK(t.layers[3].work(2).input_bytes == Approx(ids + x));
  CHECK(t.layers[3].work(2).output_bytes == Approx(2 * x));
  // SSD's last extra block reads its 3x3x256 map and carries the four maps before it (38x38x256,
  // 19x19x512, 10x10x512, 5x5x256) to the heads, handing on its own 1x1x256 as well.
  const Model ssd = build(R"({"kind": "ssd_resnet34"})");
  const Layer& extra5 = ssd.layers[ssd.layers.size() - 2];
  REQUIRE(extra5.name == "extra5");
  const double carried = 38 * 38 * 256.0 + 19 * 19 * 512 + 10 * 10 * 512 + 5 * 5 * 256;
  CHECK(extra5.work(1).input_bytes == Approx((9 * 256 + carried) * 2));
  CHECK(extra5.work(1).output_bytes == Approx((256 + 9 * 256 + carried) * 2));
}

TEST_CASE("a pool keeps nothing, a max pool's gradient reads its input again", "[models][memory]") {
  // 400 inputs, 100 outputs, bf16. Forward: read the input, write the output. Backward: read the
  // output gradient, write the input gradient, and (max) read the input to find the maxima.
  // A 20x20 image of one channel pooled 2x2 with stride 2 to 10x10.
  for (auto kind : {NamedOp::Math::MaxPool, NamedOp::Math::AveragePool}) {
    NamedOp p = pool("p", 1, 20, 1, 2, 2);
    p.math = kind;
    const LayerWork work = lower_work({p}, 2, false, {});
    REQUIRE(work.forward.size() == 1);
    REQUIRE(work.backward.size() == 1);
    CHECK(work.forward[0].bytes == 500 * 2);
    CHECK(work.backward[0].bytes == (kind == NamedOp::Math::MaxPool ? 900 : 500) * 2);
    CHECK(work.stash_bytes == 0);
    CHECK(work.backward_workspace_bytes == 500 * 2);
  }
}

TEST_CASE("a backward holds the largest op's gradients in flight", "[models][memory]") {
  // A block of d_model 256, d_ff 1024, 4 heads of 64, sequence 64, for 4 sequences (t = 256
  // positions), bf16. Gradients in flight, per op (output gradient + input gradients): qkv
  // t(768 + 256); scores and context 16 x 3 x 64^2; softmax and layer norms one tensor (the input
  // gradient overwrites the output gradient); output projection t(256 + 256); ffn_in and ffn_out
  // t(1024 + 256), the largest.
  const Model t = build(
      R"({"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64})");
  const Layer& block = t.layers[1];
  REQUIRE(block.name.rfind("block", 0) == 0);
  CHECK(block.work(4).backward_workspace_bytes == Approx(256.0 * (1024 + 256) * 2));
  // A ResNet block: conv1 of stage2_block1 holds dY (56^2 x 128) and dX (56^2 x 256); the strided
  // conv2 dY 28^2 x 128 and dX 56^2 x 128; conv3 28^2 x (512 + 128); the shortcut 28^2 x 512 +
  // 56^2 x 256: the largest, per image.
  const Model r = build(R"({"kind": "resnet50"})");
  CHECK(r.layers[4].work(1).backward_workspace_bytes == Approx((28.0 * 28 * 512 + 56 * 56 * 256) * 2));
}

TEST_CASE("a masked LM computes logits only for its predicted positions", "[models]") {
  // BERT's masked-LM head: with P of S positions predicted, the output layer's logits cost
  // 2 x batch x P x d_model x vocab forward (and twice that backward), by hand.
  const Model all = build(
      R"({"kind": "transformer", "activation": "relu", "layers": 1, "d_model": 64, "d_ff": 128, "heads": 4, "vocab": 1000, "seq_len": 128})");
  const Model mlm = build(
      R"({"kind": "transformer", "activation": "relu", "layers": 1, "d_model": 64, "d_ff": 128, "heads": 4, "vocab": 1000, "seq_len": 128, "predicted_positions": 20})");
  auto logits_flops = [](const Model& m) {
    double f = 0;
    for (const auto& op : m.layers.back().work(3).forward) f += op.model_flops();
    return f;
  };
  CHECK(logits_flops(all) == Approx(2.0 * 3 * 128 * 64 * 1000));
  CHECK(logits_flops(mlm) == Approx(2.0 * 3 * 20 * 64 * 1000));
  CHECK(mlm.params() == all.params());
  CHECK_FALSE(mlm.layers.back().function);  // functional mode needs every position predicted
}

TEST_CASE("SSD-ResNet34 has its parameters, six maps and 8732 default boxes", "[models]") {
  const Model m = build(R"({"kind": "ssd_resnet34", "space_to_depth": true})");
  // By hand: ResNet-34's stem and three stages (the third at stride 1), convolutions without
  // bias, batch norm 2 per channel.
  auto conv = [](double k, double in, double out) { return k * k * in * out + 2 * out; };
  const double backbone =
      conv(7, 3, 64) + 3 * 2 * conv(3, 64, 64) + (conv(3, 64, 128) + conv(3, 128, 128) + conv(1, 64, 128)) +
      3 * 2 * conv(3, 128, 128) + (conv(3, 128, 256) + conv(3, 256, 256) + conv(1, 128, 256)) +
      5 * 2 * conv(3, 256, 256);
  const double extras = conv(1, 256, 256) + conv(3, 256, 512) + conv(1, 512, 256) + conv(3, 256, 512) +
                        conv(1, 512, 128) + conv(3, 128, 256) + 2 * (conv(1, 256, 128) + conv(3, 128, 256));
  // Heads: a 3x3 conv with bias for 4 offsets and one for 81 scores per default box, per map.
  const double channels[6] = {256, 512, 512, 256, 256, 256}, defaults[6] = {4, 6, 6, 6, 4, 4};
  double heads = 0;
  for (int i = 0; i < 6; ++i)
    for (double per : {4 * defaults[i], 81 * defaults[i]}) heads += 9 * channels[i] * per + per;
  CHECK(double(m.params()) == backbone + extras + heads);
  CHECK(m.layers.size() == 1 + 13 + 5 + 1);
  // Maps 38, 19, 10, 5, 3, 1: 38^2*4 + 19^2*6 + 10^2*6 + 5^2*6 + 3^2*4 + 4 = 8732 boxes of 81 scores.
  const LayerWork heads_work = m.layers.back().work(2);
  bool found = false;
  for (const auto& op : heads_work.forward)
    if (op.name == "class_loss") found = op.elements == 2.0 * 8732 * 81;
  CHECK(found);
  // Space-to-depth: the first convolution runs as 4x4 over 150x150x12 (the same parameters).
  const LayerWork stem = m.layers.front().work(1);
  const Op& first = stem.forward.front();
  CHECK(first.k == 4 * 4 * 12);
  CHECK(first.m == 150 * 150);
}

TEST_CASE("dropout keeps its mask and GELU its input: exactly the tensors their backwards read",
          "[models][memory]") {
  const std::int64_t b = 2, s = 64, d = 256, ff = 1024, h = 4;
  const std::string dims =
      R"("kind": "transformer", "layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 100, "seq_len": 64)";
  const Model plain = build("{" + dims + R"(, "activation": "relu"})");
  const Model hidden = build("{" + dims + R"(, "activation": "relu", "dropout": 0.1})");
  const Model attention = build("{" + dims + R"(, "activation": "relu", "attention_dropout": 0.1})");
  const Model gelu = build("{" + dims + R"(, "activation": "gelu"})");
  const double act = 2;  // bf16
  auto stash = [&](const Model& m, std::size_t layer) { return m.layers[layer].work(b).stash_bytes; };
  // Two sublayer outputs per block, one embedding output; one [b, h, s, s] mask per attention;
  // GELU's pre-activation [b, s, d_ff].
  CHECK(stash(hidden, 1) - stash(plain, 1) == Approx(2.0 * b * s * d * act));
  CHECK(stash(hidden, 0) - stash(plain, 0) == Approx(1.0 * b * s * d * act));
  CHECK(stash(attention, 1) - stash(plain, 1) == Approx(1.0 * b * h * s * s * act));
  CHECK(stash(gelu, 1) - stash(plain, 1) == Approx(1.0 * b * s * ff * act));
  // No FLOPs change: dropout and GELU are vector work.
  CHECK(total_flops(hidden, b, false) == Approx(total_flops(plain, b, false)));
  CHECK(total_flops(gelu, b, true) == Approx(total_flops(plain, b, true)));
}

TEST_CASE("a dropout writes its mask forward and reads it backward, drawing one random number each",
          "[models][cost]") {
  const NamedOp op = dropout("drop", act({{"batch", 4}, {"seq", 8}, {"d_model", 16}}));
  const double elements = 4 * 8 * 16;
  const Op fwd = forward_op(op, Sharding::none(), 2);
  CHECK(fwd.bytes == Approx(elements * 2));
  CHECK(fwd.random_numbers_per_element == 1);
  CHECK(fwd.ops_per_element == 3);  // compare, select, scale
  CHECK_FALSE(fwd.fusible);         // its own pass: the mask is an output of its own
  const Op bwd = input_gradient_op(op, Sharding::none(), 2);
  CHECK(bwd.bytes == Approx(elements * 2));
  CHECK(bwd.ops_per_element == 1);
  CHECK(bwd.random_numbers_per_element == 0);
}

TEST_CASE("dropout rates and the activation are validated", "[models]") {
  for (const char* bad : {R"("dropout": 1)", R"("attention_dropout": -0.1)", R"("activation": "swish")"}) {
    Problems problems("test");
    build_model(
        Json::parse(
            std::string(
                R"({"kind": "transformer", "activation": "relu", "layers": 1, "d_model": 8, "d_ff": 8, "heads": 2, "vocab": 4, "seq_len": 4, )") +
            bad + "}"),
        "model", problems);
    const std::string key = std::string(bad).substr(1, std::string(bad).find('"', 1) - 1);
    CHECK_THROWS_WITH(problems.throw_if_any(), Catch::Contains("model." + key));
  }
}

TEST_CASE("a forward holds its largest unkept intermediate: attention scores beside their probabilities",
          "[models][memory]") {
  // By hand, one block, batch 2, sequence 128, d_model 256, 4 heads: the scores [2, 4, 128, 128]
  // exist while the softmax writes the (kept) probabilities; every other unkept tensor is
  // smaller (d_model rows: 2 x 128 x 256) and the feed-forward's hidden is kept. bf16.
  const Model m = build(
      R"({"kind": "transformer", "activation": "relu", "layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 100, "seq_len": 128})");
  CHECK(m.layers[1].work(2).workspace_bytes == Approx(2.0 * 4 * 128 * 128 * 2));
  // The output layer: the logits read the final layer norm's (recomputed, unkept) output; softmax
  // cross-entropy keeps the logits' gradient and writes a loss per row, not [batch, seq, vocab].
  const Model big_vocab = build(
      R"({"kind": "transformer", "activation": "relu", "layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 128})");
  CHECK(big_vocab.layers.back().work(2).workspace_bytes == Approx(2.0 * 128 * 256 * 2));
}

namespace {

/// Everything a layer's lowering reads from its named ops, as text.
std::string program_text(const std::vector<NamedOp>& ops) {
  std::string text;
  for (const auto& op : ops) {
    text += op.name + " " + op.kind + " " + std::to_string(int(op.math)) + " " + std::to_string(op.ops) +
            " " + op.reduce_dim + " " + std::to_string(op.window) + " " + std::to_string(op.stride) + " " +
            op.skip + ":";
    for (const auto& t : op.tensors()) {
      text += " [" + t.id + (t.keep ? " kept" : "") + (t.weight ? " weight" : "");
      for (const auto& d : t.dims) text += " " + d.name + "=" + std::to_string(d.size);
      text += "]";
    }
    text += "\n";
  }
  return text;
}

}  // namespace

TEST_CASE("a layer marked the same computation as an earlier one lowers exactly like it", "[models]") {
  // Every shipped study's model: the marked layers (whose costs are computed once) have the
  // weights, named ops and work of the layer they name, at two batch sizes.
  int marked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(config_dir() / "studies")) {
    const Json study = Json::parse(std::ifstream(entry.path()));
    const Model m = build(study["model"].dump());
    for (std::size_t l = 0; l < m.layers.size(); ++l) {
      const Layer& layer = m.layers[l];
      if (layer.same_as < 0) continue;
      INFO(entry.path().filename().string() << ": " << layer.name);
      REQUIRE(layer.same_as < int(l));
      const Layer& first = m.layers[std::size_t(layer.same_as)];
      ++marked;
      CHECK(layer.weights == first.weights);
      for (std::int64_t b : {1, 3}) {
        CHECK(program_text(layer.named_ops(b)) == program_text(first.named_ops(b)));
        const LayerWork w = layer.work(b), f = first.work(b);
        CHECK(w.forward.size() == f.forward.size());
        CHECK(w.backward.size() == f.backward.size());
        for (auto bytes : {&LayerWork::input_bytes, &LayerWork::output_bytes, &LayerWork::stash_bytes,
                           &LayerWork::workspace_bytes, &LayerWork::backward_workspace_bytes})
          CHECK(w.*bytes == f.*bytes);
      }
    }
  }
  CHECK(marked > 100);  // the transformers' blocks, the conv nets' repeated blocks and cells
}

TEST_CASE("a transformer's blocks are one computation, a ResNet stage's first block is not", "[models]") {
  const Model t = build(
      R"({"kind": "transformer", "activation": "relu", "layers": 3, "d_model": 32, "d_ff": 64, "heads": 2, "vocab": 16, "seq_len": 8})");
  REQUIRE(t.layers.size() == 5);  // embedding, 3 blocks, output
  CHECK(t.layers[1].same_as == -1);
  CHECK(t.layers[2].same_as == 1);
  CHECK(t.layers[3].same_as == 1);
  CHECK(t.layers[4].same_as == -1);
  const Model r = build(R"({"kind": "resnet50"})");
  CHECK(r.layers[1].same_as == -1);  // stage1_block1: projection shortcut
  CHECK(r.layers[2].same_as == -1);  // stage1_block2: the first of its kind
  CHECK(r.layers[3].same_as == 2);
  CHECK(r.layers[4].same_as == -1);  // stage2_block1: stride 2
  // A step's FLOPs count every block, the marked ones included.
  for (const Model* m : {&t, &r})
    CHECK(m->step_model_flops(4) ==
          Approx(total_flops(*m, 4, false) + total_flops(*m, 4, true)).epsilon(1e-12));
}

TEST_CASE("a sequential model's layers made by equal calls are one computation", "[models]") {
  // dense 8-8 twice (d_model->d_ff, then d_ff->d_model: names differ), the same again, a conv
  // repeated, the first layer of each kind apart (it reads the model's input).
  const Model m = build(R"({"kind": "sequential", "layers": [
      {"kind": "dense", "in": 8, "out": 8, "count": 2}, {"kind": "dense", "in": 8, "out": 8, "count": 2},
      {"kind": "dense", "in": 8, "out": 8, "activation": "none"}]})");
  REQUIRE(m.layers.size() == 5);
  CHECK(m.layers[0].same_as == -1);  // the model's input
  CHECK(m.layers[1].same_as == -1);  // d_ff -> d_model
  CHECK(m.layers[2].same_as == -1);  // d_model -> d_ff, not the first
  CHECK(m.layers[3].same_as == 1);
  CHECK(m.layers[4].same_as == -1);  // no ReLU
  const Model c = build(R"({"kind": "sequential", "layers": [
      {"kind": "conv2d", "size": 8, "in_channels": 4, "out_channels": 4, "kernel": 3, "count": 3}]})");
  REQUIRE(c.layers.size() == 3);
  CHECK(c.layers[1].same_as == -1);
  CHECK(c.layers[2].same_as == 1);
  CHECK(m.step_model_flops(4) == Approx(total_flops(m, 4, false) + total_flops(m, 4, true)).epsilon(1e-12));
}

TEST_CASE("every kind of named op has its registered class, which prices it and says what it keeps",
          "[models][ops]") {
  const std::int64_t b = 2, s = 8, d = 16;
  const std::vector<NamedOp> ops = {
      einsum("proj", act({{"batch", b}, {"seq", s}, {"d_model", d}}), weight({{"d_model", d}, {"d_ff", d}}),
             act({{"batch", b}, {"seq", s}, {"d_ff", d}})),
      elementwise("relu", act({{"batch", b}, {"seq", s}, {"d_ff", d}}), 2),
      reduction("norm", act({{"batch", b}, {"seq", s}, {"d_ff", d}}), "d_ff"),
      gather("lookup", act({{"batch", b}, {"seq", s}}), weight({{"vocab", 32}, {"d_model", d}}),
             act({{"batch", b}, {"seq", s}, {"d_model", d}})),
      conv("conv", b, 8, 3, 4, 3, 1),
      batch_norm("bn", b, 8, 4),
      pool("pool", b, 8, 4, 2, 2),
  };
  std::set<const NamedOpKind*> classes;
  for (const auto& op : ops) {
    const NamedOpKind& kind = op_kind(op);
    classes.insert(&kind);
    CHECK(kind.forward(op, Sharding::none(), 2).name == op.name);
    CHECK(forward_op(op, Sharding::none(), 2).bytes == kind.forward(op, Sharding::none(), 2).bytes);
  }
  CHECK(classes.size() == ops.size());  // one class per kind
  // Only the einsum and the convolution have a second backward (db, dw); only the element-wise op
  // fuses into its producer; a lookup keeps its int32 ids for the scatter.
  for (const auto& op : ops)
    CHECK(bool(op_kind(op).operand_gradient(op, Sharding::none(), 2)) ==
          (op.kind == "einsum" || op.kind == "conv"));
  CHECK(op_kind(ops[1]).fuses_into_producer());
  CHECK_FALSE(op_kind(ops[0]).fuses_into_producer());
  CHECK(op_kind(ops[3]).kept_extra_bytes(ops[3], Sharding::none()) == Approx(b * s * 4.0));
  // Host math: the einsum, the lookup, the convolution, the batch norm and the pool have it (the
  // element-wise op and the reduction say no math); a 1x7 convolution has none, and says why.
  for (std::size_t i : {0, 3, 4, 5, 6}) CHECK(op_kind(ops[i]).missing_host_math(ops[i]).empty());
  CHECK_FALSE(op_kind(ops[1]).missing_host_math(ops[1]).empty());
  const NamedOp rect = conv("rect", b, 8, 3, 4, 1, 7, 1);
  CHECK_THAT(op_kind(rect).missing_host_math(rect), Catch::Contains("square window"));
}

TEST_CASE("BERT-large for pre-training has BertForPreTraining's 336,226,108 parameters", "[models]") {
  const Model m = build(
      R"({"kind": "bert", "layers": 24, "d_model": 1024, "d_ff": 4096, "heads": 16, "vocab": 30522, "seq_len": 512, "predicted_positions": 76})");
  const std::int64_t d = 1024, ff = 4096, V = 30522, S = 512;
  // By hand: word, 2 token-type and 512 position embeddings and their layer norm; per block the
  // four attention projections and the two feed-forward ones with biases and two layer norms;
  // the masked LM's transform (dense, layer norm) and output bias, the pooler and 2 classes.
  const std::int64_t embedding = V * d + 2 * d + S * d + 2 * d;
  const std::int64_t block = 4 * (d * d + d) + (d * ff + ff) + (ff * d + d) + 2 * 2 * d;
  const std::int64_t heads = (d * d + d) + 2 * d + V + (d * d + d) + (d * 2 + 2);
  CHECK(m.layers.front().params() == embedding);
  CHECK(m.layers.back().params() == heads);
  CHECK(m.params() == embedding + 24 * block + heads);
  CHECK(m.params() == 336226108);
  // BertModel (without the two pre-training heads but with the pooler): 335,141,888.
  CHECK(m.params() - heads + (d * d + d) == 335141888);
  // Forward FLOPs per sequence: the blocks' matmuls and attention, the masked LM over its 76
  // positions (transform and logits through the tied table), the pooler and the classes.
  const double blocks = 24.0 * (2.0 * S * (4 * d * d + 2 * d * ff) + 4.0 * S * S * d);
  const double mlm = 2.0 * 76 * (d * d + d * V), nsp = 2.0 * (d * d + d * 2);
  CHECK(total_flops(m, 1, false) == Approx(blocks + mlm + nsp));
}

TEST_CASE("a layer reading a tied table names the earlier layer owning it, which holds a weight that size",
          "[models][tied]") {
  auto tied_elements = [](const Layer& l) {
    double elements = 0;
    for (const auto& op : l.named_ops(2))
      if (op.b.tied) elements += op.b.elements();
    return elements;
  };
  for (
      const std::string& json :
      {R"({"kind": "bert", "layers": 2, "d_model": 64, "d_ff": 256, "heads": 4, "vocab": 300, "seq_len": 32, "predicted_positions": 5})",
       R"({"kind": "transformer", "activation": "relu", "layers": 2, "encoder_layers": 2, "d_model": 64, "d_ff": 256, "heads": 4, "vocab": 300, "seq_len": 32, "shared_embeddings": true})",
       R"({"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 64, "d_ff": 256, "heads": 4, "vocab": 300, "seq_len": 32, "shared_embeddings": true})",
       R"({"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 64, "d_ff": 256, "heads": 4, "vocab": 300, "seq_len": 32})"}) {
    INFO(json);
    const Model m = build(json);
    int readers = 0;
    for (std::size_t l = 0; l < m.layers.size(); ++l) {
      const Layer& layer = m.layers[l];
      if (tied_elements(layer) == 0) {
        CHECK(layer.tied_to == -1);
        continue;
      }
      ++readers;
      REQUIRE(layer.tied_to >= 0);
      CHECK(layer.tied_to < int(l));
      bool owned = false;
      for (const auto& shape : m.layers[std::size_t(layer.tied_to)].weights) {
        double elements = 1;
        for (auto n : shape) elements *= double(n);
        owned = owned || elements == tied_elements(layer);
      }
      CHECK(owned);
    }
    CHECK(readers == (json.find("bert") != std::string::npos             ? 1
                      : json.find("encoder_layers") != std::string::npos ? 2
                      : json.find("shared") != std::string::npos         ? 1
                                                                         : 0));
  }
}

TEST_CASE("a BERT without its predicted positions, or with heads not dividing d_model, is bad input",
          "[models]") {
  for (const auto& [bad, path] : std::vector<std::pair<std::string, std::string>>{
           {R"("heads": 16, "vocab": 100, "seq_len": 64})", "model.predicted_positions"},
           {R"("heads": 5, "vocab": 100, "seq_len": 64, "predicted_positions": 8})", "model.heads"},
           {R"("heads": 16, "vocab": 100, "seq_len": 64, "predicted_positions": 65})",
            "model.predicted_positions"}}) {
    Problems problems("test");
    build_model(Json::parse(R"({"kind": "bert", "layers": 2, "d_model": 64, "d_ff": 128, )" + bad), "model",
                problems);
    CHECK_THROWS_WITH(problems.throw_if_any(), Catch::Contains(path));
  }
}

TEST_CASE("BERT takes flash attention once its attention dropout is off", "[models][flash]") {
  const std::string dims =
      R"("kind": "bert", "layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 100, "seq_len": 128, )"
      R"("predicted_positions": 8, "attention_dropout": 0)";
  const Model standard = build("{" + dims + "}");
  const Model flash = build("{" + dims + R"(, "attention": "flash"})");
  // The block keeps each row's log-sum-exp instead of the probabilities [batch, heads, seq, seq].
  const double probabilities = 2.0 * 4 * 128 * 128 * 2, log_sum_exp = 2.0 * 4 * 128 * 4;
  CHECK(standard.layers[1].work(2).stash_bytes - flash.layers[1].work(2).stash_bytes ==
        Approx(probabilities - log_sum_exp));
  // BERT's default attention dropout (the paper's 0.1) and flash are refused together.
  std::string defaults = dims.substr(0, dims.find(R"(, "attention_dropout")"));
  CHECK_THROWS_WITH(build("{" + defaults + R"(, "attention": "flash"})"), Catch::Contains("model.attention"));
}

TEST_CASE("a problem elsewhere, or a bad size, does not make mesh_lm's other keys look unknown", "[models]") {
  for (const char* size : {"0", "9"}) {
    Problems problems("test");
    problems.add("slice", Json("v9-8"), "a slice");  // found before the model is read
    build_model(Json::parse(std::string(R"({"kind": "mesh_lm", "size": )") + size +
                            R"(, "layers": 2, "d_model": 32, "seq_len": 16})"),
                "model", problems);
    try {
      problems.throw_if_any();
      FAIL("no problem reported");
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), !Catch::Contains("unknown key"));
      CHECK_THAT(e.what(), Catch::Contains("slice"));
    }
  }
}

TEST_CASE("sequential's global pool turns convolutions' image into what a classifier reads", "[models]") {
  const Model m = build(R"({"kind": "sequential", "layers": [
      {"kind": "conv2d", "size": 8, "in_channels": 3, "out_channels": 4, "kernel": 3, "batch_norm": false},
      {"kind": "global_pool"}, {"kind": "classifier", "in": 4, "classes": 5}]})");
  REQUIRE(m.layers.size() == 3);
  CHECK(m.layers[1].params() == 0);
  // It reads the image and hands on one value per channel.
  CHECK(m.layers[1].work(2).input_bytes == Approx(2.0 * 8 * 8 * 4 * 2));
  CHECK(m.layers[1].work(2).output_bytes == Approx(2.0 * 4 * 2));
  CHECK(m.layers[0].function);  // without batch norm, functional mode runs it
  for (const auto& [bad, path] : std::vector<std::pair<std::string, std::string>>{
           {R"({"kind": "dense", "in": 4, "out": 4}, {"kind": "global_pool"})", "model.layers[1].kind"},
           {R"({"kind": "conv2d", "size": 8, "in_channels": 3, "out_channels": 4, "kernel": 3},
               {"kind": "global_pool", "count": 2})",
            "model.layers[1].count"},
           {R"({"kind": "conv2d", "size": 8, "in_channels": 3, "out_channels": 4, "kernel": 3},
               {"kind": "classifier", "in": 4, "classes": 2})",
            "model.layers[1].in"}}) {
    Problems problems("test");
    build_model(Json::parse(R"({"kind": "sequential", "layers": [)" + bad + "]}"), "model", problems);
    CHECK_THROWS_WITH(problems.throw_if_any(), Catch::Contains(path));
  }
}

TEST_CASE("save_dots keeps the projections' outputs and recomputes attention and the element-wise work",
          "[models][memory][remat]") {
  // One block without biases, batch 2, sequence 128, d_model 256, d_ff 1024, 4 heads of 64, bf16,
  // unpadded. By hand: the q, k, v and output projections and the feed-forward's first matmul
  // are kept ([2, 128, 256] each but the hidden [2, 128, 1024]); the scores, softmax and context
  // (products of two activations), the ReLU and the attention's residual are recomputed; the
  // feed-forward's second matmul's output is read by nothing the backward needs, and the layer
  // norms' outputs are not kept in any policy (the backward recomputes them from their kept input).
  const Model m = build(
      R"({"kind": "transformer", "activation": "relu", "layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 100, "seq_len": 128, "biases": false})");
  const auto ops = m.layers[1].named_ops(2);
  const SavePlan plan = save_plan(ops, Sharding::whole(0, kFp32Bytes), 2, save_dots_policy());
  const double row = 2.0 * 128 * 2;  // bytes per feature
  CHECK(plan.kept_bytes == Approx(row * (4 * 256 + 1024)));
  std::set<std::string> recomputed;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (plan.recomputed[i]) recomputed.insert(ops[i].name);
  CHECK(recomputed ==
        std::set<std::string>{"self_scores", "self_softmax", "self_context", "self_residual", "ffn_relu"});
  // Between keeping everything and keeping the input only: the probabilities are not kept.
  const LayerWork w = m.layers[1].work(2);
  CHECK(w.saved_output_bytes == Approx(plan.kept_bytes));
  CHECK(w.input_bytes + w.saved_output_bytes < w.stash_bytes);
  CHECK(w.partial_forward.size() == recomputed.size());
}

TEST_CASE("flash attention: no scores or probabilities in HBM, the scores computed again in backward",
          "[models][memory][flash]") {
  // One block, batch 2, sequence 128 (one block of queries), 4 heads of 64, bf16, unpadded.
  const std::string dims =
      R"("layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 100, "seq_len": 128)";
  const Model standard = build(R"({"kind": "transformer", "activation": "relu", )" + dims + "}");
  const Model flash =
      build(R"({"kind": "transformer", "activation": "relu", "attention": "flash", )" + dims + "}");
  const LayerWork a = standard.layers[1].work(2), b = flash.layers[1].work(2);
  const double probabilities = 2.0 * 4 * 128 * 128 * 2;  // [batch, heads, seq, seq_k] in bf16
  const double log_sum_exp = 2.0 * 4 * 128 * 4;          // a row's, fp32
  auto bytes = [](const std::vector<Op>& ops) {
    double sum = 0;
    for (const auto& op : ops) sum += op.bytes;
    return sum;
  };
  auto flops = [](const std::vector<Op>& ops, bool model) {
    double sum = 0;
    const CostModel cost(load_hardware("tpu-v3").core);
    for (const auto& op : ops) sum += model ? op.model_flops() : cost.cost(op).hardware_flops;
    return sum;
  };
  // Forward: the scores' write, the softmax's pass and the context's read of the probabilities
  // are gone (the softmax's vector work rides in the kernel).
  CHECK(bytes(a.forward) - bytes(b.forward) == Approx(3 * probabilities));
  // Kept: the probabilities give way to each row's log-sum-exp; the forward's largest transient
  // (the scores beside the probabilities) is gone too.
  CHECK(a.stash_bytes - b.stash_bytes == Approx(probabilities - log_sum_exp));
  CHECK(b.workspace_bytes < a.workspace_bytes);
  // Backward: two kernels (the keys' and values' gradients, the queries'), each computing QK^T
  // again, the second also dO . V^T (hardware FLOPs only); the model's FLOPs unchanged.
  const double qk = 2.0 * 2 * 4 * 128 * 64 * 128;
  CHECK(flops(b.backward, true) == Approx(flops(a.backward, true)));
  CHECK(flops(b.backward, false) - flops(a.backward, false) == Approx(3 * 2 * qk));  // d_kv 64 pads to 128
  CHECK(flops(b.forward, true) == Approx(flops(a.forward, true)));
  // A longer sequence reads the keys and values once per block of 128 queries.
  const std::string longer =
      R"("layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 100, "seq_len": 512, "causal": false)";
  const Model four =
      build(R"({"kind": "transformer", "activation": "relu", "attention": "flash", )" + longer + "}");
  const Model one = build(
      R"({"kind": "transformer", "activation": "relu", "attention": "flash", "flash_block_rows": 512, )" +
      longer + "}");
  const double keys_and_values = 2 * (2.0 * 512 * 256 * 2);  // k and v, [batch, seq, heads x d_kv] bf16
  CHECK(bytes(four.layers[1].work(2).forward) - bytes(one.layers[1].work(2).forward) ==
        Approx(3 * keys_and_values));
}

TEST_CASE("flash attention is validated: not with attention dropout, a block size only with it",
          "[models][flash]") {
  const std::string dims =
      R"("layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 100, "seq_len": 128)";
  CHECK_THROWS_WITH(
      build(
          R"({"kind": "transformer", "activation": "relu", "attention": "flash", "attention_dropout": 0.1, )" +
          dims + "}"),
      Catch::Contains("model.attention"));
  CHECK_THROWS_WITH(
      build(R"({"kind": "transformer", "activation": "relu", "flash_block_rows": 64, )" + dims + "}"),
      Catch::Contains("model.flash_block_rows"));
  CHECK_THROWS_WITH(
      build(R"({"kind": "transformer", "activation": "relu", "attention": "fast", )" + dims + "}"),
      Catch::Contains("model.attention"));
}

TEST_CASE("op kinds are registered by name, one file under models/ops/ and one registry line each",
          "[models]") {
  // The names NamedOp::kind holds; adding a kind adds its name here.
  CHECK(op_kind_names() == std::vector<std::string>{"batch_norm", "conv", "dispatch", "einsum", "elementwise",
                                                    "gather", "pool", "reduction"});
  // Every model's ops name one ("every registered model kind builds"); an unknown one is a bug.
  NamedOp unknown = einsum("x", act({{"batch", 2}}), weight({{"batch", 2}}), act({{"batch", 2}}));
  unknown.kind = "fft";
  CHECK_THROWS_AS(op_kind(unknown), SimulationError);
}

TEST_CASE("a kind says whether it runs on the pieces a mesh layout gives a core", "[models][shards]") {
  // By default (convolutions, batch norms, pools) a split batch only, named by the kind; an
  // element-wise op on any split; an einsum reads an operand whole along a split sequence.
  const Model resnet = build(R"({"kind": "resnet50"})");
  const auto ops = resnet.layers[0].named_ops(8);
  const NamedOp& conv = ops.front();
  REQUIRE(conv.kind == "conv");
  auto splitting = [](std::set<std::string> dims) {
    return ShardSupport{[dims](const std::string& d) { return dims.count(d) > 0; }, false, false, true};
  };
  CHECK(op_kind(conv).missing_shard_math(conv, splitting({"batch"})).empty());
  const std::string why = op_kind(conv).missing_shard_math(conv, splitting({"batch", "height"}));
  CHECK(why == "a conv with height split: no host math on such shards");
  NamedOp relu = conv;
  relu.kind = "elementwise";
  relu.math = NamedOp::Math::BiasRelu;
  relu.b = NamedTensor{};
  CHECK(op_kind(relu).missing_shard_math(relu, splitting({"batch", "height"})).empty());
  CHECK(op_kind(relu).missing_shard_math(relu, splitting({})).empty());
  CHECK(op_kind(relu).reads_split_sequence_whole() == false);
  NamedOp matmul =
      einsum("x", act({{"batch", 2}, {"d", 4}}), weight({{"d", 4}, {"f", 8}}), act({{"batch", 2}, {"f", 8}}));
  CHECK(op_kind(matmul).missing_shard_math(matmul, splitting({"d"})).empty());
  CHECK(op_kind(matmul).reads_split_sequence_whole());
}

TEST_CASE("a parallel block has one layer norm and adds attention and feed-forward to its input",
          "[models]") {
  const std::string dims =
      R"("layers": 2, "d_model": 64, "d_ff": 256, "heads": 4, "vocab": 100, "seq_len": 16, "activation": "swiglu")";
  const Model sequential = build(R"({"kind": "transformer", "activation": "relu", )" + dims + "}");
  const Model parallel =
      build(R"({"kind": "transformer", "activation": "relu", "block": "parallel", )" + dims + "}");
  // Exactly one layer norm (scale and shift, d_model each) fewer per block; the same FLOPs.
  CHECK(sequential.params() - parallel.params() == 2 * 2 * 64);
  CHECK(total_flops(parallel, 2, false) == Approx(total_flops(sequential, 2, false)).epsilon(1e-12));
  // The feed-forward reads the attention's layer norm, and the second residual adds its sum.
  const auto ops = parallel.layers[1].named_ops(2);
  int norms = 0;
  for (const auto& op : ops) norms += op.math == NamedOp::Math::LayerNorm ? 1 : 0;
  CHECK(norms == 1);
  for (const auto& op : ops)
    if (op.name == "ffn_gate" || op.name == "ffn_up" || op.name == "self_q_projection")
      CHECK(op.a.id == "self_h");
  CHECK(ops.back().skip == "attention_sum");
  Problems p("test");
  build_model(
      Json::parse(
          R"({"kind": "transformer", "activation": "relu", "block": "parallel", "encoder_layers": 1, )" +
          dims + "}"),
      "model", p);
  CHECK_THROWS_WITH(p.throw_if_any(), Catch::Contains("model.block"));
}

TEST_CASE(
    "causal attention: the model counts half of the scores and the context, flash attention skips "
    "the masked blocks",
    "[models]") {
  const std::int64_t b = 2, s = 512, h = 4, k = 16, layers = 2;
  const std::string dims =
      R"("layers": 2, "d_model": 64, "d_ff": 256, "heads": 4, "vocab": 100, "seq_len": 512)";
  const Model causal =
      build(R"({"kind": "transformer", "activation": "relu", )" + dims + "}");  // decoder-only: causal
  const Model full = build(R"({"kind": "transformer", "activation": "relu", "causal": false, )" + dims + "}");
  // Scores and context: 2 x (2 b h s^2 k) forward, twice that backward; half of it not counted.
  const double attention = 2.0 * 2.0 * double(b * h * s * s * k) * double(layers);
  CHECK(total_flops(full, b, false) - total_flops(causal, b, false) == Approx(attention / 2));
  CHECK(total_flops(full, b, true) - total_flops(causal, b, true) == Approx(attention));
  // Standard attention computes the masked half all the same: hardware FLOPs are equal.
  const CostModel cost(load_hardware("tpu-v3").core);
  auto hardware = [&](const Model& m, const std::string& op) {
    for (const auto& o : m.layers[1].work(b).forward)
      if (o.name == op) return cost.cost(o).hardware_flops;
    return -1.0;
  };
  CHECK(hardware(causal, "self_scores") == hardware(full, "self_scores"));
  // Flash attention, blocks of 128 queries: 4 x 4 blocks, 10 of them at or below the diagonal.
  const Model flash_causal =
      build(R"({"kind": "transformer", "activation": "relu", "attention": "flash", )" + dims + "}");
  const Model flash_full =
      build(R"({"kind": "transformer", "activation": "relu", "attention": "flash", "causal": false, )" +
            dims + "}");
  CHECK(hardware(flash_causal, "self_scores") == Approx(hardware(flash_full, "self_scores") * 10 / 16));
  CHECK(hardware(flash_causal, "self_context") == Approx(hardware(flash_full, "self_context") * 10 / 16));
  // An encoder attends both ways: BERT counts every product.
  const Model bert = build(
      R"({"kind": "bert", "layers": 1, "d_model": 64, "d_ff": 256, "heads": 4, "vocab": 100, "seq_len": 512, "predicted_positions": 8})");
  for (const auto& op : bert.layers[1].named_ops(b)) CHECK(op.counted_fraction == 1.0);
}

TEST_CASE(
    "flash attention's kernels step through query x key blocks: a grid step per block pair, four grids a "
    "re-materialized layer",
    "[models][flash][cost]") {
  const std::int64_t b = 2, h = 4;
  const std::string dims =
      R"("layers": 1, "d_model": 64, "d_ff": 256, "heads": 4, "vocab": 100, "seq_len": 512, "attention": "flash")";
  const Model causal = build(R"({"kind": "transformer", "activation": "relu", )" + dims + "}");
  const Model full = build(R"({"kind": "transformer", "activation": "relu", "causal": false, )" + dims + "}");
  const CoreSpec core = load_hardware("tpu-v4").core;
  const CostModel cost(core);
  auto steps = [&](const std::vector<Op>& ops, const std::string& name) {
    double sum = 0;
    for (const auto& o : ops)
      if (o.name.rfind(name, 0) == 0) sum += cost.grid_steps(o);
    return sum;
  };
  // 512 / 128 = 4 blocks of queries by 4 of keys, 10 at or below the diagonal, per product.
  const LayerWork c = causal.layers[1].work(b), f = full.layers[1].work(b);
  CHECK(steps(c.forward, "self_scores") == Approx(b * h * 10));
  CHECK(steps(f.forward, "self_scores") == Approx(b * h * 16));
  // The context's products run inside the scores' steps: no grid of their own, forward or back.
  CHECK(steps(c.forward, "self_context") == 0);
  CHECK(steps(c.backward, "self_context") == 0);
  // The backward's two kernels each step through the grid (their scores computed again); the
  // scores' gradients ride in those steps.
  CHECK(steps(c.backward, "self_scores_recompute") == Approx(2 * b * h * 10));
  CHECK(steps(c.backward, "self_scores") == steps(c.backward, "self_scores_recompute"));
  // Each step pays the core's grid-step cycles, shared by its TensorCores.
  for (const auto& o : c.forward)
    if (o.name == "self_scores")
      CHECK(cost.cost(o).grid_overhead_s ==
            Approx(b * h * 10 * core.matmul_grid_step_overhead_cycles / core.clock_hz / core.tensor_cores));
  // Larger blocks, fewer steps: one 512-row block is one step per product.
  const Model one =
      build(R"({"kind": "transformer", "activation": "relu", "flash_block_rows": 512, )" + dims + "}");
  CHECK(steps(one.layers[1].work(b).forward, "self_scores") == Approx(b * h));
}

TEST_CASE("a learned position table adds seq_len x d_model parameters to the embedding", "[models]") {
  const std::string dims =
      R"("layers": 2, "d_model": 64, "d_ff": 256, "heads": 4, "vocab": 100, "seq_len": 16)";
  const Model none = build(R"({"kind": "transformer", "activation": "relu", )" + dims + "}");
  const Model learned =
      build(R"({"kind": "transformer", "activation": "relu", "positions": "learned", )" + dims + "}");
  CHECK(learned.params() - none.params() == 16 * 64);
  CHECK(learned.layers.front().params() - none.layers.front().params() == 16 * 64);
  // Added to the lookup's output in its fusion: no HBM pass of its own.
  const auto ops = learned.layers.front().named_ops(2);
  REQUIRE(ops.size() == 2);
  CHECK(ops[1].b.weight);
  CHECK(ops[1].b.elements() == 16 * 64);
  Problems p("test");
  build_model(
      Json::parse(R"({"kind": "transformer", "activation": "relu", "positions": "alibi", )" + dims + "}"),
      "model", p);
  CHECK_THROWS_WITH(p.throw_if_any(), Catch::Contains("model.positions") && Catch::Contains("rotary"));
}

TEST_CASE("a mixture of experts: exact parameters, expert FLOPs over its slots, the dense blocks untouched",
          "[models][moe]") {
  // 4 blocks, experts on every second (blocks 1 and 3): E = 8, top-2, capacity factor 1.5,
  // expert width 512; GELU with biases.
  const std::string dims =
      R"("activation": "gelu", "layers": 4, "d_model": 64, "d_ff": 256, "heads": 4, "vocab": 100, "seq_len": 16)";
  const Model dense = build(R"({"kind": "transformer", )" + dims + "}");
  const Model moe =
      build(R"({"kind": "transformer", )" + dims +
            R"(, "moe": {"experts": 8, "every": 2, "top_k": 2, "capacity_factor": 1.5, "d_ff": 512}})");
  CHECK(moe.mixture_of_experts);
  const std::int64_t M = 64, F = 256, E = 8, Fe = 512;
  // A dense feed-forward: M F + F + F M + M. An expert block's: the router M E, then E experts of
  // M Fe + Fe + Fe M + M each.
  const std::int64_t dense_ffn = M * F + F + F * M + M, experts = M * E + E * (M * Fe + Fe + Fe * M + M);
  CHECK(moe.params() - dense.params() == 2 * (experts - dense_ffn));
  CHECK(moe.layers[1].params() == dense.layers[1].params());                        // block0: dense
  CHECK(moe.layers[2].params() == dense.layers[2].params() + experts - dense_ffn);  // block1: experts
  CHECK(moe.layers[4].params() == dense.layers[4].params() + experts - dense_ffn);  // block3: experts
  // FLOPs at 4 sequences: the router's 2 T M E and the experts' 2 x 2 E C M Fe (C = capacity:
  // 1.5 x 2 x 64 tokens / 8 = 24 slots each) replace the dense 2 x 2 T M F.
  const double T = 4 * 16, C = 24;
  double forward_moe = 0, forward_dense = 0;
  for (const auto& op : moe.layers[2].work(4).forward) forward_moe += op.model_flops();
  for (const auto& op : dense.layers[2].work(4).forward) forward_dense += op.model_flops();
  CHECK(forward_moe - forward_dense == Approx(2 * T * M * E + 4 * E * C * M * Fe - 4 * T * M * F));
  // Top-8 of 8 experts (each token to every expert, as Mixtral-style routing at its limit): four
  // times top-2's slots (C = 1.5 x 8 x 64 / 8 = 96), so four times the experts' FLOPs; top-9 of 8
  // is bad input.
  const Model top8 =
      build(R"({"kind": "transformer", )" + dims +
            R"(, "moe": {"experts": 8, "every": 2, "top_k": 8, "capacity_factor": 1.5, "d_ff": 512}})");
  double forward_top8 = 0;
  for (const auto& op : top8.layers[2].work(4).forward) forward_top8 += op.model_flops();
  CHECK(forward_top8 - forward_dense == Approx(2 * T * M * E + 4 * E * (4 * C) * M * Fe - 4 * T * M * F));
  Problems too_many("test");
  build_model(Json::parse(R"({"kind": "transformer", )" + dims + R"(, "moe": {"experts": 8, "top_k": 9}})"),
              "model", too_many);
  CHECK_THROWS_WITH(too_many.throw_if_any(),
                    Catch::Contains("model.moe.top_k: found 9, expected at most experts (8)"));
  // Routing is data movement: two dispatch ops (to the slots and back), no matmul.
  int dispatches = 0;
  for (const auto& op : moe.layers[2].named_ops(4)) dispatches += op.kind == "dispatch" ? 1 : 0;
  CHECK(dispatches == 2);
  // Gated experts have a gate and an up projection each.
  const Model gated = build(
      R"({"kind": "transformer", "activation": "swiglu", "layers": 2, "d_model": 64, "d_ff": 256, "heads": 4, "vocab": 100, "seq_len": 16, "biases": false, "moe": {"experts": 4, "d_ff": 128}})");
  CHECK(
      gated.layers[1].params() -
          build(
              R"({"kind": "transformer", "activation": "swiglu", "layers": 2, "d_model": 64, "d_ff": 256, "heads": 4, "vocab": 100, "seq_len": 16, "biases": false})")
              .layers[1]
              .params() ==
      (64 * 4 + 4 * 3 * 64 * 128) - 3 * 64 * 256);
}

TEST_CASE("the UNet is Stable Diffusion v2's base model: its parameters, layers and repeated blocks",
          "[models][unet]") {
  const Model m = build(R"({"kind": "unet"})");
  // diffusers' UNet2DConditionModel of stabilityai/stable-diffusion-2-base: 865,910,724.
  CHECK(m.params() == 865910724);
  REQUIRE(m.layers.size() == 30);
  CHECK(m.layers[1].name == "down0_0");
  CHECK(m.layers[2].same_as == 1);  // down0_1 is down0_0's computation
  CHECK(model_family("unet") == "image generators");
  // conv_in: a 3x3 convolution of 4 to 320 channels over 64 x 64 latents.
  const Op first = m.layers[0].work(2).forward.front();
  CHECK(first.model_flops() == Approx(2.0 * 2 * 64 * 64 * 9 * 4 * 320));
  // Flash attention keeps none of the 4096 x 4096 scores of the first level's self-attention.
  const Model flash = build(R"({"kind": "unet", "attention": "flash"})");
  CHECK(flash.layers[1].work(2).stash_bytes < 0.5 * m.layers[1].work(2).stash_bytes);
  // A smaller one from its keys (the parameter count from the same formulas: 3,767,044): two
  // levels of one block, the first attending.
  const Model small =
      build(R"({"kind": "unet", "block_channels": [64, 128], "layers_per_block": 1, "latent_size": 32})");
  CHECK(small.params() == 3767044);
  CHECK(small.layers.size() == 12);
  // Bad sizes name their key.
  Problems p("test");
  build_model(Json::parse(R"({"kind": "unet", "block_channels": [320, 100]})"), "model", p);
  REQUIRE(p.size() == 1);
  CHECK_THROWS_WITH(p.throw_if_any(),
                    Catch::Contains("model.block_channels[1]") && Catch::Contains("head_dim"));
}

TEST_CASE("Llama 3.1 with RMSNorm has its published parameter counts", "[models]") {
  const std::string llama =
      R"({"kind": "transformer", "activation": "swiglu", "biases": false, "norm": "rms", "positions": "rotary",
          "vocab": 128256, "seq_len": 8192, "kv_heads": 8, )";
  CHECK(build(llama + R"("layers": 32, "d_model": 4096, "d_ff": 14336, "heads": 32})").params() ==
        8030261248.0);
  CHECK(build(llama + R"("layers": 80, "d_model": 8192, "d_ff": 28672, "heads": 64})").params() ==
        70553706496.0);
  // A layer norm's shift adds d_model per norm: two per block and the final one.
  const Model layer_norm = build(
      R"({"kind": "transformer", "activation": "swiglu", "biases": false, "vocab": 128256, "seq_len": 8192,
                "kv_heads": 8, "layers": 32, "d_model": 4096, "d_ff": 14336, "heads": 32})");
  CHECK(layer_norm.params() - 8030261248.0 == (2 * 32 + 1) * 4096);
}

TEST_CASE(
    "RMSNorm does 5/8 of a layer norm's vector work over the same passes; rotary positions add 3 "
    "operations per query and key element, fused, forward and backward",
    "[models][cost]") {
  const std::string dims =
      R"("layers": 1, "d_model": 256, "d_ff": 1024, "heads": 4, "vocab": 1000, "seq_len": 64, "kv_heads": 2)";
  const Model ln = build(R"({"kind": "transformer", "activation": "relu", )" + dims + "}");
  const Model rms = build(
      R"({"kind": "transformer", "activation": "relu", "norm": "rms", "positions": "rotary", )" + dims + "}");
  const CostModel cost(load_hardware("tpu-v3").core);
  const auto find = [](const std::vector<NamedOp>& ops, const std::string& name) {
    for (const auto& op : ops)
      if (op.name == name) return op;
    FAIL("no op " << name);
    return NamedOp{};
  };
  const auto a = ln.layers[1].named_ops(8), b = rms.layers[1].named_ops(8);
  const NamedOp &norm_ln = find(a, "layernorm_self"), &norm_rms = find(b, "layernorm_self");
  CHECK(norm_rms.math == NamedOp::Math::RmsNorm);
  CHECK(norm_rms.b.elements() == 256);  // a scale, no shift
  for (bool backward : {false, true}) {
    const auto priced = [&](const NamedOp& op) {
      const Op o = backward ? op_kind(op).input_gradient(op, Sharding::none(), 2)
                            : op_kind(op).forward(op, Sharding::none(), 2);
      return cost.cost(o);
    };
    const OpCost l = priced(norm_ln), r = priced(norm_rms);
    CHECK(r.vpu_s == Approx(l.vpu_s * 5 / 8));
    CHECK(r.hbm_s == Approx(l.hbm_s));
    // By hand: 8 x 5/8 operations per element forward (16 x 5/8 backward) over 8 x 64 rows of 256.
    const double ops = (backward ? 16.0 : 8.0) * 5 / 8;
    CHECK(r.vpu_s == Approx(8 * 64 * 256 * ops / load_hardware("tpu-v3").core.vector_ops_per_s()));
  }
  // The queries (4 heads) and keys (2 key/value heads) of 64 positions of 64 features, rotated.
  for (const auto& [name, heads] : {std::pair{"self_q_rotary", 4}, std::pair{"self_k_rotary", 2}}) {
    const NamedOp& r = find(b, name);
    CHECK(r.ops == 3);
    CHECK(r.backward_ops == 3);
    CHECK(r.out.elements() == 8.0 * 64 * heads * 64);
    const OpCost c = cost.cost(op_kind(r).forward(r, Sharding::none(), 2));
    CHECK(c.bound == "fused");
    CHECK(c.vpu_s == Approx(r.out.elements() * 3 / load_hardware("tpu-v3").core.vector_ops_per_s()));
  }
  CHECK(b.size() == a.size() + 2);  // the values are not rotated
  // The attention reads the rotated queries and keys; the parameters do not change but the shifts.
  CHECK(find(b, "self_scores").a.id == "self_q");
  CHECK(ln.params() - rms.params() == 3 * 256);
}
