// Progress of one simulation (or of plan's bounding) on stderr, for runs that take more than a couple of
// seconds: on a terminal one line updated in place, otherwise a line every few seconds (logs stay readable).
// Quiet runs print nothing.
#pragma once

#include <chrono>
#include <string>

namespace tpusim::cli {

class RunProgress {
 public:
  /// `what`: the work ("simulating"), `unit`: what is counted ("tasks").
  explicit RunProgress(std::string what = "simulating", std::string unit = "tasks");
  ~RunProgress();
  RunProgress(const RunProgress&) = delete;
  RunProgress& operator=(const RunProgress&) = delete;
  /// `done` of `total`, at simulated time `simulated_s` (EngineOptions::progress; < 0: none).
  void update(int done, int total, double simulated_s = -1);

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_, unit_;
  Clock::time_point start_, last_;
  bool tty_, printed_ = false;
};

}  // namespace tpusim::cli
