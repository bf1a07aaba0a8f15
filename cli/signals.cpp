#include "cli/signals.hpp"

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

#include "workflows/interrupt.hpp"

namespace tpusim::cli {

namespace {
const char* g_exit_message = "";

extern "C" void on_stop_signal(int signo) { workflows::request_stop(signo); }

/// Async-signal-safe: write(2) and _exit only.
extern "C" void on_stop_signal_exit(int signo) {
  const char* name = signo == SIGINT ? "tpusim: interrupted by SIGINT: " : "tpusim: interrupted by SIGTERM: ";
  [[maybe_unused]] auto a = ::write(STDERR_FILENO, name, std::strlen(name));
  [[maybe_unused]] auto b = ::write(STDERR_FILENO, g_exit_message, std::strlen(g_exit_message));
  [[maybe_unused]] auto c = ::write(STDERR_FILENO, "\n", 1);
  ::_exit(128 + signo);
}

void install(void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking poll returns and sees the request
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}
}  // namespace

void install_stop_catcher() {
  workflows::set_stop_catcher([] { install(on_stop_signal); });
}

void exit_on_stop_signals(const char* message) {
  g_exit_message = message;
  install(on_stop_signal_exit);
}

void die_with_parent() {
  const char* parent = std::getenv(workflows::kParentPidVariable);
  if (!parent) return;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (std::to_string(::getppid()) != parent) ::_exit(128 + SIGKILL);  // the parent ended before the call
}

}  // namespace tpusim::cli
