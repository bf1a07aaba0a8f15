// SIGINT and SIGTERM as a request to stop: a long search (plan) then finishes with what it has,
// writes its outputs marked incomplete, and exits with 128 + the signal.
#pragma once

namespace tpusim::workflows {

/// Installs the handlers (once; later calls do nothing).
void catch_stop_signals();

/// The signal that asked to stop (SIGINT, SIGTERM), or 0.
int stop_signal();

}  // namespace tpusim::workflows
