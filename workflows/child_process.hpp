// Running tpusim itself as a child process (SimGrid allows one simulation per process, so
// every probe of `fit` and every point of a sweep is a process of its own).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace tpusim::workflows {

struct ChildResult {
  int exit_code = -1;      ///< the child's exit code, or 128 + signal if it was killed
  std::string out;         ///< what it wrote to stdout
  std::string err;         ///< what it wrote to stderr
  bool timed_out = false;  ///< killed because it ran past its time limit
  bool cancelled = false;  ///< killed because `cancel` asked
};

/// The tpusim executable children run: this process's own (/proc/self/exe) unless set, as the
/// Python module sets it to the tpusim command it was built with.
void set_child_executable(const std::string& path);
const std::string& child_executable();

/// Runs the tpusim executable (child_executable()) with `args` (argv[1...]), capturing stdout and stderr.
/// With `timeout_s` > 0 a child still running after that many seconds is killed (SIGKILL), its result marked
/// timed_out with a message in `err`; with `cancel`, asked a few times a second, a child it answers true for
/// is killed and marked cancelled, and so is every child once a stop signal has been caught
/// (interrupt.hpp). The child dies with this process (cli/signals.hpp die_with_parent). Throws
/// std::runtime_error if the child cannot be started.
ChildResult run_self(const std::vector<std::string>& args, double timeout_s = 0,
                     const std::function<bool()>& cancel = {});

/// Where run_self's children run when not here: given a child's arguments, time limit and cancel
/// question, its result (as run_self gives it). The Dask runner (dask_runner.hpp) is one.
using ChildRunner = std::function<ChildResult(const std::vector<std::string>& args, double timeout_s,
                                              const std::function<bool()>& cancel)>;

/// Makes run_self hand every child to `runner` (empty: start them here again); returns the runner
/// it replaces. Set it before the children start, not while they run.
ChildRunner set_child_runner(ChildRunner runner);

/// A child's time limit beyond which it is no limit: no run is that long, and a deadline this far
/// ahead would overflow the clock (1e18 s killed every child at once).
inline constexpr double kLongestTimeoutS = 1e9;

/// Checks a time limit given on the command line (`option` names it): a number of seconds in
/// [0, kLongestTimeoutS] (0: none), else ConfigError naming the option.
void check_timeout(const std::string& option, double seconds);

/// Why a child failed, in one message: what it wrote to stderr (trailing newlines dropped), or its
/// exit code when it wrote nothing.
std::string failure_text(const ChildResult& child);

/// `-j`: the requested number of jobs, or (0) the machine's cores.
int job_count(int requested);

/// Runs body(0) .. body(count - 1) on up to `jobs` threads (each takes the next index), and
/// returns when all are done. For children run side by side: sweep points, validation cases,
/// plan candidates.
void parallel_for(std::size_t count, int jobs, const std::function<void(std::size_t)>& body);

}  // namespace tpusim::workflows
