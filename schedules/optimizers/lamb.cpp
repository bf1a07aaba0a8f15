// LAMB (You et al., 2020): Adam's update direction u = m_hat / (sqrt(v_hat) + eps) + decay * w,
// applied per layer scaled by the trust ratio ||w|| / ||u||. Both norms are sums over the
// whole layer: when its weights are split over cores, the partial sums are all-reduced before
// the update (as LARS's). Timing only (no functional update).
#include "schedules/optimizer.hpp"

namespace tpusim {

namespace {

class Lamb : public OptimizerRule {
 public:
  Cost cost() const override {
    return {16, 10,
            "derived: Adam's moments and direction (about 12 operations) plus weight decay and the squares "
            "for the two "
            "norms; reads w, g, m, v, writes m, v and the direction u, then reads u and w and writes w once "
            "the norms "
            "are known"};
  }
  int slots() const override { return 2; }
  double default_learning_rate() const override { return 1e-3; }
  double layer_statistics_bytes() const override { return 2 * 4.0; }  // ||w||^2 and ||u||^2, fp32
  std::string layer_statistics_phase() const override { return "lamb_norms"; }
};

}  // namespace

std::shared_ptr<const OptimizerRule> make_lamb() { return std::make_shared<Lamb>(); }

}  // namespace tpusim
