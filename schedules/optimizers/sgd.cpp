// Plain stochastic gradient descent: w -= lr * g.
#include "schedules/optimizer.hpp"

namespace tpusim {

namespace {

class Sgd : public OptimizerRule {
 public:
  Cost cost() const override { return {2, 3, "derived: w - lr * g (2 operations); reads w and g, writes w"}; }
  int slots() const override { return 0; }
  double default_learning_rate() const override { return 0.1; }
  bool functional() const override { return true; }
  void update(float* w, const float* g, const std::vector<float*>&, std::int64_t lo, std::int64_t hi,
              double lr, double) const override {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = lo; i < hi; ++i) w[i] = float(w[i] - lr * g[i]);
  }
};

}  // namespace

std::shared_ptr<const OptimizerRule> make_sgd() { return std::make_shared<Sgd>(); }

}  // namespace tpusim
