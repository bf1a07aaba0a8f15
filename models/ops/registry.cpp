#include <map>

#include "models/ops/op_kind.hpp"

namespace tpusim {

namespace {

const std::map<std::string, std::unique_ptr<const NamedOpKind>>& registry() {
  static const auto kinds = [] {
    std::map<std::string, std::unique_ptr<const NamedOpKind>> k;
    // One line per kind, by the name NamedOp::kind holds.
    k.emplace("einsum", make_einsum_kind());
    k.emplace("elementwise", make_elementwise_kind());
    k.emplace("reduction", make_reduction_kind());
    k.emplace("gather", make_gather_kind());
    k.emplace("conv", make_conv_kind());
    k.emplace("batch_norm", make_batch_norm_kind());
    k.emplace("pool", make_pool_kind());
    k.emplace("dispatch", make_dispatch_kind());
    return k;
  }();
  return kinds;
}

}  // namespace

const NamedOpKind& op_kind(const NamedOp& op) {
  const auto& kinds = registry();
  const auto it = kinds.find(op.kind);
  // A model builder names its ops' kinds; an unknown one is a bug in it, not in the study.
  if (it == kinds.end()) throw SimulationError("op " + op.name + ": no op kind named \"" + op.kind + "\"");
  return *it->second;
}

std::vector<std::string> op_kind_names() {
  std::vector<std::string> names;
  for (const auto& [name, kind] : registry()) names.push_back(name);
  return names;
}

}  // namespace tpusim
