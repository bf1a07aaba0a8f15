#include "schedules/batch_problem.hpp"

namespace tpusim {

bool check_batch_multiple(const Study& study, std::int64_t unit, const std::string& what,
                          Problems& problems) {
  if (unit <= 0 || study.batch % unit == 0) return false;
  const std::string expected = study.slices > 1
                                   ? "a multiple of " + std::to_string(unit * study.slices) + " (" +
                                         std::to_string(study.slices) +
                                         " slices, each slice's share a multiple of " + what + ")"
                                   : "a multiple of " + what;
  problems.add("batch", Json(study.global_batch()), expected);
  return true;
}

}  // namespace tpusim
