// A request to stop a command part-way, which the program embedding the workflows turns its
// signals into (the CLI: SIGINT and SIGTERM, cli/signals.hpp). A command that starts children
// (plan, sweep, fit, validate, run --intervals) says from which point it handles a request
// (catch_stop_signals): its children are stopped, it keeps what it finished (plan: its best plan
// so far; sweep: the points recorded; fit: the probes made) and says so, and the CLI exits with
// 128 + the signal. Without a catcher installed (the Python module, a test) nothing changes.
#pragma once

#include <stdexcept>
#include <string>

namespace tpusim::workflows {

/// What the embedding program does when a command starts handling stop requests (the CLI
/// installs signal handlers that call request_stop). Called once at most.
void set_stop_catcher(void (*catcher)());

/// From here the command handles a request to stop: calls the catcher (once; later calls do
/// nothing).
void catch_stop_signals();

/// Records a request to stop by signal `signo` (async-signal-safe: a signal handler calls it).
void request_stop(int signo);

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
/// finds it dies with its parent (cli/signals.hpp die_with_parent).
inline constexpr const char* kParentPidVariable = "TPUSIM_PARENT_PID";

}  // namespace tpusim::workflows
