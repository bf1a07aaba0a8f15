// The progress lines of the commands that run children, on stderr: a sweep's points (a bar
// updated in place on a terminal, failed points listed above it; a line a point otherwise) and a
// fit's probes (a line updated in place on a terminal, a line each otherwise: a search of a large
// study takes minutes and must not look stuck). Fed by the workflows' callbacks (SweepOptions,
// FitOptions).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace tpusim::cli {

class SweepProgress {
 public:
  /// `points` of this shard, `recorded` of them already (--resume).
  void started(std::size_t points, std::size_t recorded);
  /// A point ended: `error` empty when it ran.
  void point_done(const std::string& key, const std::string& error);

 private:
  std::size_t total_ = 0, done_ = 0, ran_ = 0, failed_ = 0;
  bool tty_ = false;
  std::chrono::steady_clock::time_point start_;
};

class ProbeProgress {
 public:
  /// `path`: the field the fit maximizes.
  explicit ProbeProgress(std::string path);
  /// Ends the line updated in place.
  ~ProbeProgress();
  ProbeProgress(const ProbeProgress&) = delete;
  ProbeProgress& operator=(const ProbeProgress&) = delete;
  void probe_done(const std::string& value, const std::string& verdict);

 private:
  std::string path_;
  bool tty_;
  int done_ = 0;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace tpusim::cli
