#include "workflows/interrupt.hpp"

#include <csignal>

namespace tpusim::workflows {

namespace {
volatile std::sig_atomic_t g_signal = 0;
void (*g_catcher)() = nullptr;
}  // namespace

void set_stop_catcher(void (*catcher)()) { g_catcher = catcher; }

void catch_stop_signals() {
  static bool caught = false;
  if (caught) return;
  caught = true;
  if (g_catcher) g_catcher();
}

void request_stop(int signo) { g_signal = signo; }

int stop_signal() { return int(g_signal); }

std::string signal_name(int signo) {
  return signo == SIGINT ? "SIGINT" : signo == SIGTERM ? "SIGTERM" : "signal " + std::to_string(signo);
}

void throw_if_stopped(const std::string& kept) {
  if (const int sig = stop_signal()) throw Interrupted(sig, kept);
}

}  // namespace tpusim::workflows
