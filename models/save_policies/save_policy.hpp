// Re-materialization policies that save some of a layer's activations for its backward and
// recompute the rest before it, as rules over the layer's named ops: the outputs of the ops a
// policy saves are kept (besides the layer's input), and every other activation the backward
// reads is recomputed from them (models/op_lowering.hpp: save_plan). A schedule's "remat" names
// one; its other values are false (keep everything) and true (keep only each layer's input). A
// new policy is one file in this folder and its line in registry.cpp.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/named_ops.hpp"

namespace tpusim {

class SavePolicy {
 public:
  virtual ~SavePolicy() = default;
  /// What it keeps and recomputes, for messages ("keep the matmuls' outputs too, recompute the
  /// other ops").
  virtual std::string description() const = 0;
  /// Whether the output of `op` is saved for the backward (and so never recomputed).
  virtual bool saves(const NamedOp& op) const = 0;
  /// Its name (the registry's key), set when it is registered.
  const std::string& name() const { return name_; }

 private:
  friend struct SavePolicyRegistry;  // names each policy as it is registered (registry.cpp)
  std::string name_;
};

/// The policies by name: the shipped ones (registry.cpp) and any registered since.
const std::map<std::string, std::unique_ptr<SavePolicy>>& save_policies();
/// The policy named `name`, or null.
const SavePolicy* find_save_policy(const std::string& name);
/// Adds a policy (a test's, say) under `name`, replacing one of that name.
void register_save_policy(const std::string& name, std::unique_ptr<SavePolicy> policy);
/// The registered names, quoted and comma-separated ("save_dot_except_mlp", ...), each with its
/// description in brackets when `described`: what messages list as the accepted values.
std::string save_policy_names(bool described);
/// "save_dots", the policy a schedule's re-materialization falls back to.
const SavePolicy& save_dots_policy();

// One factory per shipped policy (its own file).
std::unique_ptr<SavePolicy> make_save_dots();
// MaxText's named-save policies (one file: maxtext_names.cpp).
std::unique_ptr<SavePolicy> make_save_qkv_proj();
std::unique_ptr<SavePolicy> make_save_out_proj();
std::unique_ptr<SavePolicy> make_save_dot_except_mlp();
std::unique_ptr<SavePolicy> make_save_dot_except_mlpwi();
std::unique_ptr<SavePolicy> make_save_dot_with_context_except_mlp();
std::unique_ptr<SavePolicy> make_minimal();
std::unique_ptr<SavePolicy> make_minimal_flash();
std::unique_ptr<SavePolicy> make_save_dot_except_logits_ffn1();

}  // namespace tpusim
