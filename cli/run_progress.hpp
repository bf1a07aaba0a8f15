// Progress of one simulation on stderr, for runs that take more than a couple of seconds: on a
// terminal one line updated in place, otherwise a line every few seconds (logs stay readable).
// Quiet runs print nothing.
#pragma once

#include <chrono>
#include <string>

namespace tpusim::cli {

class RunProgress {
 public:
  RunProgress();
  ~RunProgress();
  RunProgress(const RunProgress&) = delete;
  RunProgress& operator=(const RunProgress&) = delete;
  /// Tasks done of `total`, at simulated time `simulated_s` (EngineOptions::progress).
  void update(int done, int total, double simulated_s);

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_, last_;
  bool tty_, printed_ = false;
};

}  // namespace tpusim::cli
