// Running tpusim itself as a child process (SimGrid allows one simulation per process, so
// every probe of `fit` and every point of a sweep is a process of its own).
#pragma once

#include <string>
#include <vector>

namespace tpusim::cli {

struct ChildResult {
  int exit_code = -1;      ///< the child's exit code, or 128 + signal if it was killed
  std::string out;         ///< what it wrote to stdout
  std::string err;         ///< what it wrote to stderr
  bool timed_out = false;  ///< killed because it ran past its time limit
};

/// Runs this executable with `args` (argv[1...]), capturing stdout and stderr. With
/// `timeout_s` > 0 a child still running after that many seconds is killed (SIGKILL), its
/// result marked timed_out with a message in `err`. Throws std::runtime_error if the child
/// cannot be started.
ChildResult run_self(const std::vector<std::string>& args, double timeout_s = 0);

}  // namespace tpusim::cli
