// "save_dots": the outputs of matmuls against weights (and convolutions) are saved, the other
// ops (normalizations, activations, attention's scores and softmax, residual adds) recomputed
// from them, as JAX's dots_with_no_batch_dims_saveable policy does.
#include "models/ops/op_kind.hpp"
#include "models/save_policies/save_policy.hpp"

namespace tpusim {

namespace {

class SaveDots : public SavePolicy {
 public:
  std::string description() const override {
    return "keep the matmuls' outputs too, recompute the other ops";
  }
  bool saves(const NamedOp& op) const override { return op_kind(op).is_dot(op); }
};

}  // namespace

std::unique_ptr<SavePolicy> make_save_dots() { return std::make_unique<SaveDots>(); }

}  // namespace tpusim
