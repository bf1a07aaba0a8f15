#include "models/save_policies/save_policy.hpp"

namespace tpusim {

struct SavePolicyRegistry {
  static void name(SavePolicy& policy, const std::string& name) { policy.name_ = name; }
};

namespace {

std::map<std::string, std::unique_ptr<SavePolicy>>& registry() {
  static auto policies = [] {
    std::map<std::string, std::unique_ptr<SavePolicy>> p;
    // One line per policy, by the name a schedule's "remat" gives it.
    p.emplace("save_dots", make_save_dots());
    p.emplace("save_qkv_proj", make_save_qkv_proj());
    p.emplace("save_out_proj", make_save_out_proj());
    p.emplace("save_dot_except_mlp", make_save_dot_except_mlp());
    p.emplace("save_dot_except_mlpwi", make_save_dot_except_mlpwi());
    p.emplace("save_dot_with_context_except_mlp", make_save_dot_with_context_except_mlp());
    p.emplace("minimal", make_minimal());
    p.emplace("minimal_flash", make_minimal_flash());
    p.emplace("save_dot_except_logits_ffn1", make_save_dot_except_logits_ffn1());
    for (auto& [name, policy] : p) SavePolicyRegistry::name(*policy, name);
    return p;
  }();
  return policies;
}

}  // namespace

const std::map<std::string, std::unique_ptr<SavePolicy>>& save_policies() { return registry(); }

const SavePolicy* find_save_policy(const std::string& name) {
  const auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second.get();
}

void register_save_policy(const std::string& name, std::unique_ptr<SavePolicy> policy) {
  SavePolicyRegistry::name(*policy, name);
  registry()[name] = std::move(policy);
}

std::string save_policy_names(bool described) {
  std::string names;
  for (const auto& [name, policy] : registry())
    names +=
        (names.empty() ? "\"" : ", \"") + name + "\"" + (described ? " (" + policy->description() + ")" : "");
  return names;
}

const SavePolicy& save_dots_policy() { return *registry().at("save_dots"); }

}  // namespace tpusim
