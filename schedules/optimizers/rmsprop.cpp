// RMSProp (TensorFlow's defaults: decay 0.9, epsilon 1e-10): ms = 0.9 ms + 0.1 g^2;
// w -= lr g / (sqrt(ms) + eps).
#include <cmath>

#include "schedules/optimizer.hpp"

namespace tpusim {

namespace {

constexpr double kDecay = 0.9, kEpsilon = 1e-10;

class RmsProp : public OptimizerRule {
 public:
  Cost cost() const override {
    return {7, 5,
            "derived: square, scale, add, sqrt, add epsilon, divide, subtract (7 operations); reads w, g, "
            "ms, writes w, ms"};
  }
  int slots() const override { return 1; }
  double default_learning_rate() const override { return 1e-3; }
  bool functional() const override { return true; }
  void update(float* w, const float* g, const std::vector<float*>& s, std::int64_t lo, std::int64_t hi,
              double lr, double) const override {
    float* ms = s[0];
#pragma omp parallel for schedule(static)
    for (std::int64_t i = lo; i < hi; ++i) {
      ms[i] = float(kDecay * ms[i] + (1 - kDecay) * double(g[i]) * g[i]);
      w[i] = float(w[i] - lr * g[i] / (std::sqrt(double(ms[i])) + kEpsilon));
    }
  }
};

}  // namespace

std::shared_ptr<const OptimizerRule> make_rmsprop() { return std::make_shared<RmsProp>(); }

}  // namespace tpusim
