// MaxText's remat_policy values that save named activations (MaxText's decoder layers name their
// projections with checkpoint_name, and each policy is jax.checkpoint_policies.
// save_only_these_names of some of them; read in AI-Hypercomputer/maxtext, not in shared/):
//   save_qkv_proj          query_proj, key_proj, value_proj (qkv_proj)
//   save_out_proj          out_proj
//   save_dot_except_mlp    query_proj, key_proj, value_proj, out_proj
//   save_dot_except_mlpwi  query_proj, key_proj, value_proj, out_proj, mlpwo
//   save_dot_with_context_except_mlp  query_proj, key_proj, value_proj, context, out_proj
//   minimal                checkpoint_dots_with_no_batch_dims (as save_dots)
//   minimal_flash          the same and context (save_from_both_policies)
// and, named for its rule (Pax/praxis's checkpoint type of that name; the list):
//   save_dot_except_logits_ffn1  every matmul against a weight but the logits and mlpwi (ffn1)
// mapped onto tpusim's transformer ops: query/key/value_proj are the *_q/k/v_projection matmuls
// (self- and cross-attention), out_proj the attention's *_output matmul, context the
// attention's *_context product (of two activations: the attention kernel's output), mlpwi
// ffn_in (ffn_gate and ffn_up when gated), mlpwo ffn_out. A saved output the backward never reads (mlpwo's,
// which only a residual sum reads) is not kept: the walk keeps what the backward or a recompute needs.
#include <algorithm>
#include <string_view>

#include "models/ops/op_kind.hpp"
#include "models/save_policies/save_policy.hpp"

namespace tpusim {

namespace {

/// MaxText's checkpoint name of a transformer matmul, or "" when it names none.
std::string maxtext_name(const NamedOp& op) {
  const std::string_view n = op.name;
  if (n == "self_context" || n == "cross_context") return "context";
  if (!op_kind(op).is_dot(op)) return "";
  if (n.ends_with("_q_projection")) return "query_proj";
  if (n.ends_with("_k_projection")) return "key_proj";
  if (n.ends_with("_v_projection")) return "value_proj";
  if (n == "self_output" || n == "cross_output") return "out_proj";
  if (n == "ffn_in" || n == "ffn_gate" || n == "ffn_up") return "mlpwi";
  if (n == "ffn_out") return "mlpwo";
  if (n == "logits") return "logits";
  return "";
}

/// Saves the named outputs and, with `dots`, every matmul against a weight too.
class SaveNamed : public SavePolicy {
 public:
  explicit SaveNamed(std::vector<std::string> names, bool dots = false)
      : names_(std::move(names)), dots_(dots) {}
  std::string description() const override {
    std::string list = dots_ ? "the matmuls' outputs" : "";
    for (const auto& n : names_) list += (list.empty() ? "" : ", ") + n;
    return "MaxText's: keep " + list + ", recompute the rest";
  }
  bool saves(const NamedOp& op) const override {
    if (dots_ && op_kind(op).is_dot(op)) return true;
    const std::string name = maxtext_name(op);
    return !name.empty() && std::find(names_.begin(), names_.end(), name) != names_.end();
  }

 private:
  std::vector<std::string> names_;
  bool dots_;
};

/// Saves every matmul against a weight but those named.
class SaveDotsExcept : public SavePolicy {
 public:
  explicit SaveDotsExcept(std::vector<std::string> names) : names_(std::move(names)) {}
  std::string description() const override {
    std::string list;
    for (const auto& n : names_) list += (list.empty() ? "" : ", ") + n;
    return "keep the matmuls' outputs but " + list + ", recompute the rest";
  }
  bool saves(const NamedOp& op) const override {
    return op_kind(op).is_dot(op) &&
           std::find(names_.begin(), names_.end(), maxtext_name(op)) == names_.end();
  }

 private:
  std::vector<std::string> names_;
};

}  // namespace

std::unique_ptr<SavePolicy> make_save_dot_except_logits_ffn1() {
  return std::make_unique<SaveDotsExcept>(std::vector<std::string>{"logits", "mlpwi"});
}
std::unique_ptr<SavePolicy> make_save_qkv_proj() {
  return std::make_unique<SaveNamed>(std::vector<std::string>{"query_proj", "key_proj", "value_proj"});
}
std::unique_ptr<SavePolicy> make_save_out_proj() {
  return std::make_unique<SaveNamed>(std::vector<std::string>{"out_proj"});
}
std::unique_ptr<SavePolicy> make_save_dot_except_mlp() {
  return std::make_unique<SaveNamed>(
      std::vector<std::string>{"query_proj", "key_proj", "value_proj", "out_proj"});
}
std::unique_ptr<SavePolicy> make_save_dot_with_context_except_mlp() {
  return std::make_unique<SaveNamed>(
      std::vector<std::string>{"query_proj", "key_proj", "value_proj", "context", "out_proj"});
}
std::unique_ptr<SavePolicy> make_minimal() {
  return std::make_unique<SaveNamed>(std::vector<std::string>{}, true);
}
std::unique_ptr<SavePolicy> make_minimal_flash() {
  return std::make_unique<SaveNamed>(std::vector<std::string>{"context"}, true);
}
std::unique_ptr<SavePolicy> make_save_dot_except_mlpwi() {
  return std::make_unique<SaveNamed>(
      std::vector<std::string>{"query_proj", "key_proj", "value_proj", "out_proj", "mlpwo"});
}

}  // namespace tpusim
