#include "workflows/interrupt.hpp"

#include <csignal>

namespace tpusim::workflows {

namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int signo) { g_signal = signo; }
}  // namespace

void catch_stop_signals() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking poll returns and sees the request
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int stop_signal() { return int(g_signal); }

}  // namespace tpusim::workflows
