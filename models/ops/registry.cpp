#include <array>

#include "models/ops/op_kind.hpp"

namespace tpusim {

const NamedOpKind& op_kind(const NamedOp& op) {
  // One line per kind, in NamedOp::Kind's order.
  static const std::array<std::unique_ptr<const NamedOpKind>, 7> kinds = {
      make_einsum_kind(), make_elementwise_kind(), make_reduction_kind(), make_gather_kind(),
      make_conv_kind(),   make_batch_norm_kind(),  make_pool_kind(),
  };
  return *kinds.at(std::size_t(op.kind));
}

}  // namespace tpusim
