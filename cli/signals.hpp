// The CLI's signals. SIGINT and SIGTERM: while a command that starts children handles them
// (workflows/interrupt.hpp, catch_stop_signals), a request to stop; `run`, one simulation in this
// process, says what was lost and exits at once (exit_on_stop_signals). Every child tpusim
// started by run_self dies with its parent (die_with_parent), even when the parent is killed
// outright.
#pragma once

namespace tpusim::cli {

/// Makes the workflows' catch_stop_signals install handlers that record the request.
void install_stop_catcher();

/// Installs handlers that write `message` ("interrupted by SIGINT: " before it) to stderr and end
/// the process with 128 + the signal, for work that cannot stop part-way and keep anything.
void exit_on_stop_signals(const char* message);

/// For a child of run_self: asks the kernel to kill this process when the parent that started it
/// ends (Linux's parent-death signal), and ends now when that parent is already gone. Does
/// nothing when this process was not started by run_self.
void die_with_parent();

}  // namespace tpusim::cli
