// SGD with momentum (0.9): m = 0.9 m + g; w -= lr * m.
#include "schedules/optimizer.hpp"

namespace tpusim {

namespace {

constexpr double kMomentum = 0.9;

class Momentum : public OptimizerRule {
 public:
  Cost cost() const override {
    return {4, 5, "derived: m = 0.9 m + g, w - lr m (4 operations); reads w, g, m, writes w, m"};
  }
  int slots() const override { return 1; }
  double default_learning_rate() const override { return 0.01; }
  bool functional() const override { return true; }
  void update(float* w, const float* g, const std::vector<float*>& s, std::int64_t lo, std::int64_t hi,
              double lr, double) const override {
    float* m = s[0];
#pragma omp parallel for schedule(static)
    for (std::int64_t i = lo; i < hi; ++i) {
      m[i] = float(kMomentum * m[i] + g[i]);
      w[i] = float(w[i] - lr * m[i]);
    }
  }
};

}  // namespace

std::shared_ptr<const OptimizerRule> make_momentum() { return std::make_shared<Momentum>(); }

}  // namespace tpusim
