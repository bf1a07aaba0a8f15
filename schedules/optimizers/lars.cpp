// LARS (You et al.): momentum scaled per layer by the trust ratio ||w|| / ||g||. The two norms
// are sums over the whole layer: when its weights are split over cores, the partial sums are
// all-reduced before the update. Timing only (no functional update).
#include "schedules/optimizer.hpp"

namespace tpusim {

namespace {

class Lars : public OptimizerRule {
 public:
  Cost cost() const override {
    return {8, 7,
            "derived: momentum (4 operations) plus the squares and sums of w and g for the norms; reads w, "
            "g, m and w, g again for the norms, writes w, m"};
  }
  int slots() const override { return 1; }
  double default_learning_rate() const override { return 0.1; }
  double layer_statistics_bytes() const override { return 2 * 4.0; }  // ||w||^2 and ||g||^2, fp32
  std::string layer_statistics_phase() const override { return "lars_norms"; }
};

}  // namespace

std::shared_ptr<const OptimizerRule> make_lars() { return std::make_shared<Lars>(); }

}  // namespace tpusim
