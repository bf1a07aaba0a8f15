#include "models/work_builder.hpp"

namespace tpusim {

void WorkBuilder::dense(const std::string& name, std::int64_t t, std::int64_t k, std::int64_t n,
                        bool x_recomputed) {
  work_.forward.push_back(dense_op(name, t, k, n, act_, kWeightBytes));
  work_.backward.push_back(dense_op(name + "_dx", t, n, k, act_, kWeightBytes));
  Op dw = dense_op(name + "_dw", k, t, n, act_, kWeightBytes);
  dw.weight_gradient = true;
  work_.backward.push_back(dw);
  if (!x_recomputed) stash(double(t) * k * act_);
  gradients(double(t) * n, double(t) * k);
}

void WorkBuilder::bias(const std::string& name, std::int64_t t, std::int64_t n) {
  work_.forward.push_back(vector_op(name, double(t) * n, 1, act_, true));
  Op grad = vector_op(name + "_grad", double(t) * n, 1, act_, true);
  grad.weight_gradient = true;
  work_.backward.push_back(grad);
}

void WorkBuilder::batched_matmul(const std::string& name, std::int64_t batch, std::int64_t m, std::int64_t k,
                                 std::int64_t n, bool keep_a, bool keep_b) {
  work_.forward.push_back(batched_matmul_op(name, batch, m, k, n, act_));
  work_.backward.push_back(batched_matmul_op(name + "_da", batch, m, n, k, act_));
  work_.backward.push_back(batched_matmul_op(name + "_db", batch, k, m, n, act_));
  stash(double(batch) * ((keep_a ? double(m) * k : 0.0) + (keep_b ? double(k) * n : 0.0)) * act_);
  gradients(double(batch) * m * n, double(batch) * (double(m) * k + double(k) * n));
}

void WorkBuilder::keep(const std::string& tensor, double bytes) {
  if (tensor.empty() || kept_.insert(tensor).second) stash(bytes);
}

void WorkBuilder::conv(const std::string& name, const ConvShape& c, bool input_gradient,
                       const std::string& input) {
  work_.forward.push_back(conv_op(name, c, act_, kWeightBytes));
  if (input_gradient) work_.backward.push_back(conv_input_grad_op(name + "_dx", c, act_, kWeightBytes));
  work_.backward.push_back(conv_weight_grad_op(name + "_dw", c, act_, kWeightBytes));
  const double in = double(c.batch) * c.in_h * c.in_w * c.in_channels;
  if (!input.empty()) keep(input, in * act_);
  gradients(double(c.batch) * c.out_h() * c.out_w() * c.out_channels, input_gradient ? in : 0.0);
}

void WorkBuilder::batch_norm(const std::string& name, double elements, std::int64_t channels) {
  work_.batch_norm_channels.push_back(channels);
  normalization(name, elements);
}

void WorkBuilder::normalization(const std::string& name, double elements) {
  work_.forward.push_back(multipass_op(name, elements, act_, MultiPass::NormalizationForward));
  work_.backward.push_back(multipass_op(name + "_grad", elements, act_, MultiPass::NormalizationBackward));
  stash(elements * act_);
  gradients(elements, 0);  // the input gradient overwrites the output gradient it is computed from
}

void WorkBuilder::layer_norm(const std::string& name, double elements) { normalization(name, elements); }

void WorkBuilder::elementwise(const std::string& name, double elements, double ops, double grad_ops) {
  work_.forward.push_back(vector_op(name, elements, ops, act_, true));
  work_.backward.push_back(vector_op(name + "_grad", elements, grad_ops, act_, true));
}

void WorkBuilder::softmax(const std::string& name, double elements) {
  work_.forward.push_back(multipass_op(name, elements, act_, MultiPass::SoftmaxForward));
  work_.backward.push_back(multipass_op(name + "_grad", elements, act_, MultiPass::SoftmaxBackward));
  stash(elements * act_);
  gradients(elements, 0);  // the input gradient overwrites the output gradient it is computed from
}

void WorkBuilder::pool(const std::string& name, double in_elements, double out_elements, double window,
                       Pool kind) {
  Op fwd = vector_op(name, out_elements, window, act_, false);
  fwd.bytes = (in_elements + out_elements) * act_;
  work_.forward.push_back(fwd);
  Op bwd = vector_op(name + "_grad", in_elements, 2, act_, false);
  bwd.bytes = (in_elements + out_elements) * act_;
  // A max pool's gradient finds each window's maximum again in its (recomputed) input: one read
  // more. An average pool's needs no activation.
  if (kind == Pool::Max) bwd.bytes += in_elements * act_;
  work_.backward.push_back(bwd);
  gradients(out_elements, in_elements);
}

void WorkBuilder::gather(const std::string& name, double rows, std::int64_t vocab, std::int64_t width) {
  work_.forward.push_back(memory_op(name, rows * width * (kWeightBytes + act_) + rows * 4));
  Op grad = memory_op(name + "_scatter_add", double(vocab) * width * kWeightBytes + rows * width * act_);
  grad.weight_gradient = true;
  work_.backward.push_back(grad);
  stash(rows * 4);  // the ids
  gradients(rows * width, 0);
}

void WorkBuilder::pick(const std::string& name, double rows, double from_rows, std::int64_t width) {
  work_.forward.push_back(memory_op(name, 2 * rows * double(width) * act_ + rows * 4));
  work_.backward.push_back(memory_op(name + "_scatter", (from_rows + rows) * double(width) * act_));
  stash(rows * 4);  // the positions
  gradients(rows * width, from_rows * width);
}

void WorkBuilder::softmax_xent(const std::string& name, double elements) {
  work_.forward.push_back(multipass_op(name, elements, act_, MultiPass::SoftmaxForward));
  // Its gradient, probabilities minus the one-hot targets, is one element-wise pass.
  work_.backward.push_back(vector_op(name + "_grad", elements, 2, act_, false));
  stash(elements * act_);  // the logits' gradient, written over the logits (which die)
  // The op before (a bias between them records none) produced the logits.
  if (!gradients_.empty() && gradients_.back().output == elements) gradients_.back().output = 0;
}

LayerWork WorkBuilder::finish(double input_bytes, double output_bytes) {
  for (const auto& g : gradients_)
    work_.backward_workspace_bytes = std::max(work_.backward_workspace_bytes, (g.output + g.inputs) * act_);
  work_.input_bytes = input_bytes;
  work_.output_bytes = output_bytes;
  return std::move(work_);
}

}  // namespace tpusim
