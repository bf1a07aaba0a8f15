// SIGINT and SIGTERM as a request to stop. A command that starts children (plan, sweep, fit,
// validate, run --intervals) catches them: its children are stopped, it keeps what it finished
// (plan: its best plan so far; sweep: the points recorded; fit: the probes made) and says so, and
// it exits with 128 + the signal. `run`, one simulation in this process, says what was lost and
// exits at once. Every child tpusim started by run_self also dies with its parent
// (die_with_parent), even when the parent is killed outright.
#pragma once

#include <stdexcept>
#include <string>

namespace tpusim::workflows {

/// Installs the handlers that record the request (once; later calls do nothing).
void catch_stop_signals();

/// Installs handlers that write `message` ("interrupted by SIGINT: " before it) to stderr and end
/// the process with 128 + the signal, for work that cannot stop part-way and keep anything.
void exit_on_stop_signals(const char* message);

/// The signal that asked to stop (SIGINT, SIGTERM), or 0.
int stop_signal();

/// "SIGINT" or "SIGTERM".
std::string signal_name(int signo);

/// A command stopped by a signal: what it kept, for the CLI to say before it exits with
/// 128 + signal() (only the CLI turns it into an exit code).
class Interrupted : public std::runtime_error {
 public:
  Interrupted(int signo, const std::string& kept)
      : std::runtime_error("interrupted by " + signal_name(signo) + ": " + kept), signal_(signo) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

/// Throws Interrupted (with `kept`) when a stop was requested.
void throw_if_stopped(const std::string& kept);

/// The environment variable run_self sets to its own pid in each child; a tpusim process that
/// finds it calls die_with_parent().
inline constexpr const char* kParentPidVariable = "TPUSIM_PARENT_PID";

/// For a child of run_self: asks the kernel to kill this process when the parent that started it
/// ends (Linux's parent-death signal), and ends now when that parent is already gone. Does
/// nothing when this process was not started by run_self.
void die_with_parent();

}  // namespace tpusim::workflows
