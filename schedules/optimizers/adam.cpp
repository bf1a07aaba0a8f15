// Adam (beta1 0.9, beta2 0.999, epsilon 1e-8) with bias correction, and AdamW (Loshchilov and
// Hutter, 2019): the same with decoupled weight decay, w <- w - lr (m_hat / (sqrt(v_hat) + eps) +
// decay w), decay 0.1 (Llama 3's and GPT-3's), its own vector work in the update's fusion.
#include <cmath>

#include "schedules/optimizer.hpp"

namespace tpusim {

namespace {

constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEpsilon = 1e-8, kAdamWDecay = 0.1;

class Adam : public OptimizerRule {
 public:
  explicit Adam(double decay) : decay_(decay) {}
  Cost cost() const override {
    if (decay_ > 0)
      return {14, 7,
              "derived: Adam's two moment updates, bias corrections, sqrt, divide and step (about 12) plus "
              "the decoupled weight decay (a multiply and an add: 14); reads w, g, m, v, writes w, m, v"};
    return {12, 7,
            "derived: two moment updates (3 + 4 operations), bias corrections, sqrt, divide, step (about "
            "12); reads w, g, m, v, writes w, m, v"};
  }
  int slots() const override { return 2; }
  double default_learning_rate() const override { return 1e-3; }
  bool functional() const override { return true; }
  void update(float* w, const float* g, const std::vector<float*>& s, std::int64_t lo, std::int64_t hi,
              double lr, double t) const override {
    const double correction1 = 1 - std::pow(kBeta1, t), correction2 = 1 - std::pow(kBeta2, t);
    float* m = s[0];
    float* v = s[1];
#pragma omp parallel for schedule(static)
    for (std::int64_t i = lo; i < hi; ++i) {
      m[i] = float(kBeta1 * m[i] + (1 - kBeta1) * g[i]);
      v[i] = float(kBeta2 * v[i] + (1 - kBeta2) * double(g[i]) * g[i]);
      if (decay_ > 0) {
        const double direction = (m[i] / correction1) / (std::sqrt(v[i] / correction2) + kEpsilon);
        w[i] = float(w[i] - lr * (direction + decay_ * w[i]));
      } else {
        w[i] = float(w[i] - lr * (m[i] / correction1) / (std::sqrt(v[i] / correction2) + kEpsilon));
      }
    }
  }

 private:
  double decay_;
};

}  // namespace

std::shared_ptr<const OptimizerRule> make_adam() { return std::make_shared<Adam>(0.0); }
std::shared_ptr<const OptimizerRule> make_adamw() { return std::make_shared<Adam>(kAdamWDecay); }

}  // namespace tpusim
