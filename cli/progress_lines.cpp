#include "cli/progress_lines.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <utility>

namespace tpusim::cli {

void SweepProgress::started(std::size_t points, std::size_t recorded) {
  total_ = points;
  done_ = recorded;
  tty_ = isatty(STDERR_FILENO);
  start_ = std::chrono::steady_clock::now();
}

void SweepProgress::point_done(const std::string& key, const std::string& error) {
  const bool failed = !error.empty();
  ++done_;
  ++ran_;
  failed_ += failed ? 1 : 0;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = ran_ > 0 ? elapsed / double(ran_) * double(total_ - done_) : 0;
  char buf[256];
  if (tty_) {
    if (failed)
      std::cerr << "\r\033[K"
                << "FAILED " << key << ": " << error.substr(0, 200) << "\n";
    const int width = 30, filled = int(width * double(done_) / double(std::max<std::size_t>(1, total_)));
    std::snprintf(buf, sizeof buf, "\r[%s%s] %zu/%zu  failed %zu  elapsed %.1fs  ETA %.1fs ",
                  std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), done_, total_,
                  failed_, elapsed, eta);
    std::cerr << buf << (done_ == total_ ? "\n" : "") << std::flush;
  } else {
    std::snprintf(buf, sizeof buf, "sweep: %zu/%zu done, %zu failed, elapsed %.1f s, ETA %.1f s: %s %s\n",
                  done_, total_, failed_, elapsed, eta, key.c_str(), failed ? "FAILED" : "ok");
    std::cerr << buf << std::flush;
  }
}

ProbeProgress::ProbeProgress(std::string path) : path_(std::move(path)), tty_(isatty(STDERR_FILENO)) {}

ProbeProgress::~ProbeProgress() {
  if (tty_ && done_ > 0) std::cerr << "\n";
}

void ProbeProgress::probe_done(const std::string& value, const std::string& verdict) {
  char line[512];
  std::snprintf(line, sizeof line, "%stpusim fit: probe %d: %s = %s: %s (%.0f s elapsed)%s",
                tty_ ? "\r\033[K" : "", ++done_, path_.c_str(), value.c_str(), verdict.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count(),
                tty_ ? "" : "\n");
  std::cerr << line << std::flush;
}

}  // namespace tpusim::cli
