#include "cli/run_progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <utility>

namespace tpusim::cli {

namespace {
constexpr double kQuietFor_s = 2.0;   // runs shorter than this print nothing
constexpr double kTtyEvery_s = 0.25;  // terminal: the line's refresh
constexpr double kLogEvery_s = 5.0;   // otherwise: a line this often
}  // namespace

RunProgress::RunProgress(std::string what, std::string unit)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      start_(Clock::now()),
      last_(start_),
      tty_(isatty(STDERR_FILENO)) {}

RunProgress::~RunProgress() {
  // On a terminal the line ends with the run: erased, so no stale "95 %" stays above the answer.
  if (printed_ && tty_) std::cerr << "\r\033[K" << std::flush;
}

void RunProgress::update(int done, int total, double simulated_s) {
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double since = std::chrono::duration<double>(now - last_).count();
  if (elapsed < kQuietFor_s || (printed_ && since < (tty_ ? kTtyEvery_s : kLogEvery_s))) return;
  last_ = now;
  printed_ = true;
  char buf[256], sim[64] = "";
  if (simulated_s >= 0) std::snprintf(sim, sizeof sim, ", simulated %.4g s", simulated_s);
  std::snprintf(buf, sizeof buf, "%stpusim: %s: %d of %d %s (%.1f %%)%s, %.0f s elapsed%s", tty_ ? "\r" : "",
                what_.c_str(), done, total, unit_.c_str(), 100.0 * done / (total > 0 ? total : 1), sim,
                elapsed, tty_ ? " " : "\n");
  std::cerr << buf << std::flush;
}

}  // namespace tpusim::cli
