// Adafactor (Shazeer & Stern): the second moment of a matrix (its last two dimensions) is
// factored into the means of the squared gradient over each of them, so its slots are rows +
// columns instead of rows x columns; vectors keep a whole slot. Timing only.
#include "schedules/optimizer.hpp"

namespace tpusim {

namespace {

class Adafactor : public OptimizerRule {
 public:
  Cost cost() const override {
    return {12, 3,
            "derived: squares, row and column means, the factored estimate, sqrt, divide, step (about 12 "
            "operations); reads w, g, writes w (the factored statistics are small)"};
  }
  int slots() const override { return 0; }
  double slot_elements(const Layer& layer) const override {
    double total = 0;
    for (const auto& shape : layer.weights) {
      if (shape.size() >= 2) {
        double lead = 1;
        for (std::size_t i = 0; i + 2 < shape.size(); ++i) lead *= double(shape[i]);
        total += lead * double(shape[shape.size() - 2] + shape.back());
      } else {
        double n = 1;
        for (auto d : shape) n *= double(d);
        total += n;
      }
    }
    return total;
  }
  double extra_update_elements(const Layer& layer) const override {
    return 2.0 * slot_elements(layer);
  }  // read + write
  double default_learning_rate() const override { return 0.1; }
  bool factored_statistics() const override { return true; }
};

}  // namespace

std::shared_ptr<const OptimizerRule> make_adafactor() { return std::make_shared<Adafactor>(); }

}  // namespace tpusim
